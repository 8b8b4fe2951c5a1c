#pragma once
// What the penalties need to know about one sequence: which ids its prompt holds and how often each
// id has been generated. The prompt part is immutable and shared, so the n completions of one
// request copy a TokenHistory cheaply after the prompt and then diverge.
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

namespace deepinfer::engine {

struct GeneratedTokenCount {
  int32_t token;
  int32_t count;
  bool in_prompt;  // so the repetition penalty visits each id of prompt + output once
};

class TokenHistory {
 public:
  // Throws deepinfer::Error on a negative id.
  explicit TokenHistory(std::span<const int32_t> prompt = {});

  // Records one generated token. Throws deepinfer::Error on a negative id.
  void append(int32_t token);

  std::span<const int32_t> prompt_tokens_distinct() const { return *prompt_distinct_; }  // ascending
  std::span<const GeneratedTokenCount> generated_counts() const { return generated_; }  // first-seen order
  int64_t generated_length() const { return generated_length_; }
  // One past the largest id recorded (0 when empty): the sampler checks it against the vocabulary.
  int64_t id_bound() const { return id_bound_; }

 private:
  std::shared_ptr<const std::vector<int32_t>> prompt_distinct_;
  std::vector<GeneratedTokenCount> generated_;
  std::unordered_map<int32_t, size_t> generated_index_;
  int64_t generated_length_ = 0;
  int64_t id_bound_ = 0;
};

}  // namespace deepinfer::engine
