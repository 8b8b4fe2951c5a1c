#pragma once
// The pre-tokenizer pipeline: a sequence of steps (Split by regex or literal, ByteLevel, Digits),
// each applied to every piece the previous step produced, exactly as the Hugging Face library's
// PreTokenizedString does. Pieces are views into the input or into per-step buffers; nothing is
// allocated per piece.
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer/function_ref.h"
#include "io/tokenizer/regex.h"

namespace deepinfer::tokenizer {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel };
  Kind kind;
  // Split (Digits is a Split on \p{N}); also ByteLevel's regex when use_regex is set.
  std::unique_ptr<Regex> regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel only
};

// Receives each final piece. `byte_level` says the piece holds raw bytes that the ByteLevel step
// has yet to spell in its alphabet (done lazily: the BPE model reads raw bytes faster).
using PieceSink = FunctionRef<void(std::string_view piece, bool byte_level)>;

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps);

  void run(std::string_view text, PieceSink sink) const;

 private:
  // Per-step working memory, reused across calls on the same thread.
  struct Scratch {
    std::vector<std::vector<std::pair<MatchRange, bool>>> matches;
    std::vector<std::vector<MatchRange>> ranges;
    std::vector<std::string> buffers;
  };
  void run_step(std::size_t index, std::string_view piece, bool byte_level, Scratch& scratch,
                PieceSink sink) const;
  void split(const PreTokenizerStep& step, std::size_t index, std::string_view piece, Scratch& scratch,
             FunctionRef<void(std::string_view)> next) const;
  std::vector<PreTokenizerStep> steps_;
};

// The GPT-2 pattern the ByteLevel pre-tokenizer splits with when use_regex is set.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace deepinfer::tokenizer
