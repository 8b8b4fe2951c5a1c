#pragma once
// Runs a Grammar against generated output, token by token: which tokens may come next (a mask
// over the vocabulary), accepting a token, rolling back, whether the output is complete, and the
// bytes the grammar forces next (jump-forward).
//
// The parser is Earley's over bytes (every CFG, ambiguity and left recursion included; earley.h),
// with the state after each accepted token kept so rollback is a pop. A mask walks the
// vocabulary's token trie, cutting every subtree whose first bytes the grammar rejects, over an
// automaton of parse states the grammar builds as it goes (mask_walk.h), adding the plain-text
// tokens at once where a state takes them all; the masks of parse states met before come from a
// cache the grammar keeps (by the part of the chart later bytes can reach, Chart::mask_key).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

// A tokenizer's vocabulary as bytes, in a trie, shared by every matcher of that tokenizer.
class Vocabulary {
 public:
  // token_bytes[id]: the bytes token id decodes to; ids in `specials` (control tokens) never
  // match grammar text; `eos` may end the output when the grammar accepts (-1: none).
  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> specials, int32_t eos);

  int32_t size() const { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t eos() const { return eos_; }
  const std::string& bytes(int32_t id) const { return token_bytes_[static_cast<std::size_t>(id)]; }
  bool special(int32_t id) const { return special_[static_cast<std::size_t>(id)] != 0; }

  // A trie's nodes in depth-first preorder, the root first: a node's subtree is it and the
  // subtree_size - 1 nodes after it, and its parent is the last node before it one level up, so a
  // walk is a scan that keeps a state per depth and skips a rejected subtree in one jump.
  struct Node {
    uint8_t byte = 0;     // the byte from the parent (the root: none)
    uint16_t depth = 0;   // bytes from the root
    int32_t subtree_size = 1;
    int32_t first_token = 0, token_count = 0;  // tokens ending here: tokens_[first..first+count)
  };
  std::span<const int32_t> tokens_at(const Node& node) const {
    return std::span(tokens_).subspan(static_cast<std::size_t>(node.first_token),
                                      static_cast<std::size_t>(node.token_count));
  }
  // The first token ending at `node`, or any id when none does (the list ends with a spare
  // entry), so a walk can set the bit without a branch and scale it by token_count != 0.
  int32_t first_token_or_any(const Node& node) const { return tokens_[static_cast<std::size_t>(node.first_token)]; }
  std::size_t max_token_length() const { return max_token_length_; }
  // The tokens of plain string text up to a slice level (grammar/text_slice.h) as a mask, and a
  // trie over all the others (level 0: no slice, the whole vocabulary): a mask walk from a state
  // that takes the level's tokens copies the mask and walks only that trie.
  std::span<const uint64_t> slice_tokens(int level) const { return slice_tokens_[static_cast<std::size_t>(level)]; }
  std::span<const Node> trie(int level) const {
    const int32_t root = trie_roots_[static_cast<std::size_t>(level)];
    return std::span(nodes_).subspan(static_cast<std::size_t>(root),
                                     static_cast<std::size_t>(nodes_[static_cast<std::size_t>(root)].subtree_size));
  }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<char> special_;
  int32_t eos_ = -1;
  std::vector<Node> nodes_;  // every trie, one after another
  std::vector<int32_t> tokens_;
  std::size_t max_token_length_ = 0;
  std::vector<std::vector<uint64_t>> slice_tokens_;  // by level
  std::vector<int32_t> trie_roots_;                  // by level

  int32_t build_trie(const std::vector<int32_t>& sorted_ids);  // returns the root
};

// A grammar prepared for matching (nullable rules, prediction tables); immutable, shareable.
// Refuses (CompileError) a grammar whose prepared tables would exceed limits.max_bytes, and stops
// at limits.deadline (CompileTimeout).
class CompiledGrammar;
struct CompileLimits;
struct Chart;
std::shared_ptr<const CompiledGrammar> prepare(Grammar grammar);
std::shared_ptr<const CompiledGrammar> prepare(Grammar grammar, const CompileLimits& limits);
// What a prepared grammar holds, in bytes (its tables and the grammar; not its mask cache, which
// is bounded by mask_cache_bytes): what the server's cache of compiled grammars counts.
int64_t prepared_bytes(const CompiledGrammar& grammar);
// What the prepared grammar's source asked for and it does not enforce (Grammar::relaxations).
const std::vector<Grammar::Relaxation>& relaxations(const CompiledGrammar& grammar);
// The most one prepared grammar's mask cache holds, in bytes, for a vocabulary of `tokens`.
int64_t mask_cache_bytes(int32_t tokens);

class Matcher {
 public:
  Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const Vocabulary> vocabulary);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  // Appends the token's bytes; false (and no change) when the grammar rejects them. EOS is
  // accepted exactly when accepting(), and then the matcher is finished.
  bool accept_token(int32_t id);
  // Appends raw bytes (tests, `deepinfer grammar --check`); false and no change on rejection.
  // Returns the number of bytes accepted before the first rejected one in `rejected_at` when
  // given.
  bool accept_bytes(std::string_view bytes, int64_t* rejected_at = nullptr);
  // Undoes the last `tokens` accept_token / accept_bytes calls.
  void rollback(int32_t tokens);

  // The output so far is a whole sentence of the grammar (EOS may come now).
  bool accepting() const;
  bool finished() const { return finished_; }
  // mask bit id set (bit id % 64 of word id / 64) for every token that may come next; `mask`
  // holds ceil(vocabulary size / 64) words. A mask computed once for a parse state the grammar
  // has met before (in any matcher of it) is copied from the grammar's cache; `cached` false
  // always walks the vocabulary with the Earley parser (the reference: the tests hold the two
  // equal); a cached mask not in the cache is walked over the grammar's chart-key automaton.
  void fill_mask(std::span<uint64_t> mask, bool cached = true) const;
  // The grammar's mask cache so far, over every matcher of it: masks copied, masks walked.
  struct MaskCacheStats {
    int64_t hits = 0, misses = 0;
  };
  MaskCacheStats mask_cache_stats() const;
  // The bytes every continuation starts with (jump-forward), as long as exactly one byte is
  // allowed at each step and the output is not yet accepting.
  std::string forced_bytes() const;

 private:
  std::unique_ptr<Chart> chart_;
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  // The grammar's mask aliases at the vocabulary's longest token (null: none): the mask cache's
  // keys are written with them, so positions inside a long bounded string share one mask.
  std::shared_ptr<const std::vector<uint32_t>> mask_aliases_;
  bool finished_ = false;
};

// Convenience for tests and the CLI: is `text` a whole sentence of `grammar`?
bool matches(const Grammar& grammar, std::string_view text);

}  // namespace deepinfer::grammar
