#pragma once
// Added tokens (special and control tokens) found in the raw text before pre-tokenization, with
// the Hugging Face library's rules: leftmost-longest matching, tokens with normalized=false matched
// first on the whole text, normalized=true ones afterwards in the text between; lstrip / rstrip
// absorb neighbouring white space, single_word rejects matches inside a word.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer/function_ref.h"

namespace deepinfer::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  explicit AddedVocabulary(std::vector<AddedToken> tokens);

  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Splits `text` into added tokens (on_token(id)) and the text between them (on_text(piece)),
  // in order. Empty pieces are not reported.
  void split(std::string_view text, FunctionRef<void(int32_t)> on_token,
             FunctionRef<void(std::string_view)> on_text) const;

 private:
  // A byte trie over the contents of one group of tokens, searched leftmost-longest.
  class Trie {
   public:
    void add(std::string_view content, int32_t token_index);
    bool empty() const { return nodes_.size() <= 1; }
    // The longest token starting exactly at `pos`: its index in tokens_ and end, or -1.
    int32_t longest_at(std::string_view text, std::size_t pos, std::size_t& end) const;
    bool may_start(unsigned char byte) const { return first_bytes_[byte]; }

   private:
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
      int32_t token_index = -1;
    };
    std::vector<Node> nodes_{Node{}};
    bool first_bytes_[256] = {};
  };

  // One pass over `sentence` with `trie`, reporting tokens and leftover pieces.
  void split_with(const Trie& trie, std::string_view sentence, FunctionRef<void(int32_t)> on_token,
                  FunctionRef<void(std::string_view)> on_text) const;

  std::vector<AddedToken> tokens_;
  Trie raw_trie_;         // normalized = false
  Trie normalized_trie_;  // normalized = true
};

}  // namespace deepinfer::tokenizer
