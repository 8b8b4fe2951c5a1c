#include "grammar/jump_forward.h"

#include <algorithm>
#include <string>

namespace deepinfer::grammar {
namespace {

// The length of the longest prefix of `bytes` that does not end inside a UTF-8 character (the
// grammar forces bytes; a character cut after its lead byte is not text the tokenizer can take).
std::size_t whole_characters(std::string_view bytes) {
  std::size_t end = bytes.size();
  std::size_t lead = end;
  // The last lead byte (not 10xxxxxx) within the last 4 bytes.
  for (std::size_t back = 0; back < 4 && back < end; ++back)
    if ((static_cast<uint8_t>(bytes[end - 1 - back]) & 0xC0) != 0x80) {
      lead = end - 1 - back;
      break;
    }
  if (lead == end) return end;  // only continuation bytes at the end: leave them to the grammar's judgement
  const auto first = static_cast<uint8_t>(bytes[lead]);
  const std::size_t length = first < 0x80 ? 1 : (first >> 5) == 0x6 ? 2 : (first >> 4) == 0xE ? 3 : (first >> 3) == 0x1E ? 4 : 1;
  return end - lead < length ? lead : end;
}

bool allowed(std::span<const uint64_t> mask, int32_t id) {
  const auto word = static_cast<std::size_t>(id) / 64;
  return word < mask.size() && ((mask[word] >> (static_cast<unsigned>(id) % 64)) & 1) != 0;
}

}  // namespace

bool allows_longer_token(const Vocabulary& vocabulary, int32_t id, std::span<const uint64_t> mask) {
  const std::string& bytes = vocabulary.bytes(id);
  const std::span<const Vocabulary::Node> trie = vocabulary.trie(0);
  // Down the trie along the token's bytes: a node's children follow it, each after the subtree of
  // the one before.
  std::size_t node = 0;
  for (const char c : bytes) {
    const auto byte = static_cast<uint8_t>(c);
    const std::size_t end = node + static_cast<std::size_t>(trie[node].subtree_size);
    std::size_t child = node + 1;
    while (child < end && trie[child].byte != byte) child += static_cast<std::size_t>(trie[child].subtree_size);
    if (child >= end) return false;  // no token goes through these bytes (a special token's)
    node = child;
  }
  const std::size_t end = node + static_cast<std::size_t>(trie[node].subtree_size);
  for (std::size_t longer = node + 1; longer < end; ++longer)
    for (const int32_t token : vocabulary.tokens_at(trie[longer]))
      if (allowed(mask, token)) return true;
  return false;
}

std::vector<int32_t> jump_forward(Matcher& matcher, const Vocabulary& vocabulary, const TextEncoder& encode,
                                  std::size_t max_tokens, std::span<const int32_t> stop_tokens) {
  if (max_tokens == 0 || matcher.finished() || !encode) return {};
  std::string forced = matcher.forced_bytes();
  forced.resize(whole_characters(forced));
  if (forced.empty()) return {};
  std::vector<int32_t> tokens = encode(forced);
  std::size_t accepted = 0;
  for (const int32_t id : tokens) {
    if (accepted == max_tokens) break;
    if (std::find(stop_tokens.begin(), stop_tokens.end(), id) != stop_tokens.end()) break;
    if (!matcher.accept_token(id)) break;  // a special token, or an id outside the grammar's vocabulary
    ++accepted;
  }
  tokens.resize(accepted);
  if (tokens.empty()) return tokens;
  // The run's last token: were the model to write the same bytes, it could have taken a longer
  // token the grammar allows there, merging them with what comes after; leave it to the sampler.
  matcher.rollback(1);
  std::vector<uint64_t> mask(static_cast<std::size_t>((vocabulary.size() + 63) / 64));
  matcher.fill_mask(mask);
  if (allows_longer_token(vocabulary, tokens.back(), mask)) {
    tokens.pop_back();
  } else {
    matcher.accept_token(tokens.back());
  }
  return tokens;
}

}  // namespace deepinfer::grammar
