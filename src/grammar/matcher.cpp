#include "grammar/matcher.h"

#include <algorithm>

#include "core/error.h"
#include "grammar/earley.h"
#include "grammar/mask_walk.h"
#include "grammar/text_slice.h"

namespace deepinfer::grammar {

// ---- the vocabulary trie ----

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> specials, int32_t eos)
    : token_bytes_(std::move(token_bytes)), special_(token_bytes_.size(), 0), eos_(eos) {
  for (int32_t id : specials) {
    if (id < 0 || id >= size()) fail("vocabulary: special token ", id, " outside ", size(), " tokens");
    special_[static_cast<std::size_t>(id)] = 1;
  }
  if (eos_ >= size()) fail("vocabulary: eos ", eos_, " outside ", size(), " tokens");
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size(); ++id)
    if (!special_[static_cast<std::size_t>(id)] && id != eos_ && !token_bytes_[static_cast<std::size_t>(id)].empty())
      order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes_[static_cast<std::size_t>(a)] < token_bytes_[static_cast<std::size_t>(b)];
  });
  // Each token's slice level (the first that holds it; past the last: not plain text), then a
  // mask and a trie of the others for each level.
  std::vector<int> level(order.size(), text_slice::kLevels + 1);
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::string& bytes = token_bytes_[static_cast<std::size_t>(order[i])];
    max_token_length_ = std::max(max_token_length_, bytes.size());
    if (bytes.size() > UINT16_MAX) fail("vocabulary: token ", order[i], " has ", bytes.size(), " bytes");
    int state = text_slice::kStart;
    for (std::size_t b = 0; b < bytes.size() && state != text_slice::kDead; ++b)
      state = text_slice::next(state, static_cast<uint8_t>(bytes[b]));
    if (state == text_slice::kDead) continue;
    level[i] = 1;
    while (bytes.size() > text_slice::kLevelBytes[static_cast<std::size_t>(level[i])]) ++level[i];
  }
  trie_roots_.push_back(build_trie(order));
  slice_tokens_.emplace_back(static_cast<std::size_t>((size() + 63) / 64), 0);
  for (int l = 1; l <= text_slice::kLevels; ++l) {
    std::vector<uint64_t> tokens(static_cast<std::size_t>((size() + 63) / 64), 0);
    std::vector<int32_t> others;
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (level[i] <= l) {
        tokens[static_cast<std::size_t>(order[i]) / 64] |= uint64_t{1} << (order[i] % 64);
      } else {
        others.push_back(order[i]);
      }
    }
    slice_tokens_.push_back(std::move(tokens));
    trie_roots_.push_back(build_trie(others));
  }
  tokens_.push_back(0);  // first_token_or_any's spare entry
}

int32_t Vocabulary::build_trie(const std::vector<int32_t>& sorted_ids) {
  // Preorder over [begin, end) of `order`, tokens sharing a prefix of `depth` bytes.
  struct Builder {
    Vocabulary& v;
    const std::vector<int32_t>& order;
    const std::string& bytes(std::size_t i) const { return v.token_bytes_[static_cast<std::size_t>(order[i])]; }
    void build(std::size_t begin, std::size_t end, std::size_t depth, uint8_t byte) {
      const std::size_t node = v.nodes_.size();
      v.nodes_.push_back({byte, static_cast<uint16_t>(depth), 1, static_cast<int32_t>(v.tokens_.size()), 0});
      std::size_t i = begin;
      while (i < end && bytes(i).size() == depth) v.tokens_.push_back(order[i++]);  // sorted: shorter first
      v.nodes_[node].token_count = static_cast<int32_t>(v.tokens_.size()) - v.nodes_[node].first_token;
      while (i < end) {
        const auto next = static_cast<uint8_t>(bytes(i)[depth]);
        std::size_t j = i;
        while (j < end && static_cast<uint8_t>(bytes(j)[depth]) == next) ++j;
        build(i, j, depth + 1, next);
        i = j;
      }
      v.nodes_[node].subtree_size = static_cast<int32_t>(v.nodes_.size() - node);
    }
  };
  const auto root = static_cast<int32_t>(nodes_.size());
  Builder{*this, sorted_ids}.build(0, sorted_ids.size(), 0, 0);
  return root;
}

// ---- the matcher ----

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const Vocabulary> vocabulary)
    : chart_(std::make_unique<Chart>(*grammar)), grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {
  if (vocabulary_) mask_aliases_ = grammar_->mask_aliases(vocabulary_->max_token_length());
}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

bool Matcher::accept_bytes(std::string_view bytes, int64_t* rejected_at) {
  if (finished_) {
    if (rejected_at) *rejected_at = 0;
    return false;
  }
  const std::size_t mark = chart_->columns.size();
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (!chart_->advance(static_cast<uint8_t>(bytes[i]))) {
      chart_->columns.resize(mark);
      if (rejected_at) *rejected_at = static_cast<int64_t>(i);
      return false;
    }
  chart_->marks.push_back(mark);
  return true;
}

bool Matcher::accept_token(int32_t id) {
  if (!vocabulary_ || id < 0 || id >= vocabulary_->size()) return false;
  if (finished_) return false;
  if (id == vocabulary_->eos()) {
    if (!accepting()) return false;
    chart_->marks.push_back(chart_->columns.size());
    finished_ = true;
    return true;
  }
  if (vocabulary_->special(id)) return false;
  return accept_bytes(vocabulary_->bytes(id));
}

void Matcher::rollback(int32_t tokens) {
  if (tokens < 0 || tokens > static_cast<int32_t>(chart_->marks.size()))
    fail("grammar matcher: rollback of ", tokens, " tokens after ", chart_->marks.size());
  for (int32_t i = 0; i < tokens; ++i) {
    chart_->columns.resize(chart_->marks.back());
    chart_->marks.pop_back();
  }
  finished_ = false;  // EOS, if it was rolled back, pushed a mark like any token
}

bool Matcher::accepting() const { return chart_->columns.back().accepting; }

Matcher::MaskCacheStats Matcher::mask_cache_stats() const { return grammar_->mask_cache_stats(); }

void Matcher::fill_mask(std::span<uint64_t> mask, bool cached) const {
  std::fill(mask.begin(), mask.end(), 0);
  if (!vocabulary_) return;
  if (static_cast<int64_t>(mask.size()) * 64 < vocabulary_->size())
    fail("grammar matcher: a mask of ", mask.size(), " words for ", vocabulary_->size(), " tokens");
  if (finished_) return;
  if (!cached) {
    walk_reference(*chart_, *vocabulary_, mask);
    return;
  }
  std::string key;
  chart_->mask_key(key, mask_aliases_ ? std::span<const uint32_t>(*mask_aliases_) : std::span<const uint32_t>());
  if (grammar_->cached_mask(vocabulary_.get(), key, mask)) return;
  // The automaton's states are exact keys: a walk steps from them to states it meets deeper,
  // where a key good for a token's length from the start would not be.
  if (mask_aliases_) {
    std::string exact;
    chart_->mask_key(exact);
    walk_automaton(*chart_, grammar_->automaton(), *vocabulary_, exact, mask);
  } else {
    walk_automaton(*chart_, grammar_->automaton(), *vocabulary_, key, mask);
  }
  grammar_->store_mask(vocabulary_.get(), key, mask);
}

std::string Matcher::forced_bytes() const {
  std::string out;
  if (finished_) return out;
  Chart& chart = *chart_;
  const std::size_t base = chart.columns.size();
  constexpr std::size_t kMaxForced = 256;
  while (out.size() < kMaxForced && !chart.columns.back().accepting) {
    const ByteSet next = chart.next_bytes();
    int count = 0;
    uint8_t only = 0;
    for (unsigned b = 0; b < 256 && count < 2; ++b)
      if (next.contains(static_cast<uint8_t>(b))) {
        ++count;
        only = static_cast<uint8_t>(b);
      }
    if (count != 1) break;
    chart.advance(only);
    out += static_cast<char>(only);
  }
  chart.columns.resize(base);
  return out;
}

bool matches(const Grammar& grammar, std::string_view text) {
  Matcher matcher(prepare(grammar), nullptr);
  return matcher.accept_bytes(text) && matcher.accepting();
}

}  // namespace deepinfer::grammar
