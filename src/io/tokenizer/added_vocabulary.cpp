#include "io/tokenizer/added_vocabulary.h"

#include <algorithm>

#include "io/tokenizer/regex.h"
#include "io/tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

// The library tests single_word boundaries with Rust's regex `\w` (Unicode word characters).
bool is_word_character(char32_t c) {
  static const Regex word("\\w", "added-token word boundary");
  std::string spelled;
  append_utf8(spelled, c);
  MatchRange match{};
  return word.find(spelled, 0, match);
}

bool ends_with_word(std::string_view text) {
  if (text.empty()) return false;
  std::size_t end = text.size();
  return is_word_character(previous_codepoint(text, end));
}

bool starts_with_word(std::string_view text) {
  if (text.empty()) return false;
  std::size_t pos = 0;
  return is_word_character(next_codepoint(text, pos));
}

// Start of the white space run that ends `text`.
std::size_t trailing_space_start(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    std::size_t before = end;
    if (!is_unicode_whitespace(previous_codepoint(text, before))) break;
    end = before;
  }
  return end;
}

// Length of the white space run that starts `text`.
std::size_t leading_space_length(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t after = pos;
    if (!is_unicode_whitespace(next_codepoint(text, after))) break;
    pos = after;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::add(std::string_view content, int32_t token_index) {
  int32_t node = 0;
  for (const char c : content) {
    const auto byte = static_cast<unsigned char>(c);
    auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, unsigned char b) { return child.first < b; });
    if (it != children.end() && it->first == byte) {
      node = it->second;
      continue;
    }
    const auto child = static_cast<int32_t>(nodes_.size());
    children.insert(it, {byte, child});
    nodes_.emplace_back();  // may reallocate: `children` is not used after this
    node = child;
  }
  nodes_[node].token_index = token_index;
  first_bytes_[static_cast<unsigned char>(content.front())] = true;
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, std::size_t pos, std::size_t& end) const {
  int32_t node = 0;
  int32_t found = -1;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, unsigned char b) { return child.first < b; });
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (nodes_[node].token_index >= 0) {
      found = nodes_[node].token_index;
      end = i + 1;
    }
  }
  return found;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    if (token.content.empty()) continue;  // the library ignores empty added tokens
    (token.normalized ? normalized_trie_ : raw_trie_).add(token.content, static_cast<int32_t>(i));
  }
}

void AddedVocabulary::split(std::string_view text, FunctionRef<void(int32_t)> on_token,
                            FunctionRef<void(std::string_view)> on_text) const {
  if (normalized_trie_.empty()) {
    split_with(raw_trie_, text, on_token, on_text);
    return;
  }
  // The normalizer is the identity (others are refused at load), so the normalized pass runs on
  // the text left between the raw-matched tokens as it is.
  split_with(raw_trie_, text, on_token,
             [&](std::string_view piece) { split_with(normalized_trie_, piece, on_token, on_text); });
}

void AddedVocabulary::split_with(const Trie& trie, std::string_view sentence,
                                 FunctionRef<void(int32_t)> on_token,
                                 FunctionRef<void(std::string_view)> on_text) const {
  if (sentence.empty()) return;
  if (trie.empty()) {
    on_text(sentence);
    return;
  }
  std::size_t start_offset = 0;  // end of what has been reported so far
  std::size_t search = 0;        // where the next leftmost-longest search starts
  while (search < sentence.size()) {
    std::size_t match_start = search;
    std::size_t match_end = 0;
    int32_t index = -1;
    for (; match_start < sentence.size(); ++match_start) {
      if (!trie.may_start(static_cast<unsigned char>(sentence[match_start]))) continue;
      index = trie.longest_at(sentence, match_start, match_end);
      if (index >= 0) break;
    }
    if (index < 0) break;
    search = match_end;  // matches never overlap, even when a strip moves the reported bounds
    const AddedToken& token = tokens_[index];
    std::size_t start = match_start;
    std::size_t stop = match_end;
    if (token.single_word) {
      const bool space_before = start == 0 || !ends_with_word(sentence.substr(0, start));
      const bool space_after = stop == sentence.size() || !starts_with_word(sentence.substr(stop));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(sentence.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_length(sentence.substr(stop));
    if (start_offset < start) on_text(sentence.substr(start_offset, start - start_offset));
    on_token(token.id);
    start_offset = stop;
  }
  if (start_offset < sentence.size()) on_text(sentence.substr(start_offset));
}

}  // namespace deepinfer::tokenizer
