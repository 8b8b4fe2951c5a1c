#include "engine/token_history.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

void require_token_id(int32_t token, const char* where) {
  if (token < 0) fail("token history: negative token id ", token, " in the ", where);
}

}  // namespace

TokenHistory::TokenHistory(std::span<const int32_t> prompt) {
  std::vector<int32_t> distinct(prompt.begin(), prompt.end());
  for (int32_t token : distinct) require_token_id(token, "prompt");
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (!distinct.empty()) id_bound_ = int64_t{distinct.back()} + 1;
  prompt_distinct_ = std::make_shared<const std::vector<int32_t>>(std::move(distinct));
}

void TokenHistory::append(int32_t token) {
  require_token_id(token, "generated tokens");
  ++generated_length_;
  id_bound_ = std::max(id_bound_, int64_t{token} + 1);
  const auto [slot, inserted] = generated_index_.try_emplace(token, generated_.size());
  if (!inserted) {
    ++generated_[slot->second].count;
    return;
  }
  const bool in_prompt = std::binary_search(prompt_distinct_->begin(), prompt_distinct_->end(), token);
  generated_.push_back({token, 1, in_prompt});
}

}  // namespace deepinfer::engine
