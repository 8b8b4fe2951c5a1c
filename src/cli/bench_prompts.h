#pragma once
// The benchmark's prompts: synthetic (random words, or random token ids for the Completions API)
// or read from a JSONL file, turned into request bodies; in multi-turn mode each conversation
// resends its whole history (earlier prompts, the model's replies, the new user message) every turn.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::cli::bench {

enum class Endpoint { Completions, Chat };

// "/v1/completions" or "/v1/chat/completions".
std::string_view endpoint_path(Endpoint endpoint);

enum class PromptKind {
  Words,     // random common English words, about one token each
  TokenIds,  // random token ids, exactly --input-len tokens (Completions only)
};

// Synthetic token ids start here: DeepSeek's tokenizer gives 0, 1, 2 to BOS, EOS and PAD.
inline constexpr int32_t kFirstSyntheticTokenId = 3;

struct PromptOptions {
  std::size_t count = 100;  // conversations (requests when turns == 1); a dataset is cycled to reach
                            // it, and 0 means one per dataset line
  int64_t input_len = 256;  // words or ids per synthetic prompt and per follow-up message
  int64_t output_len = 64;  // max_tokens, unless a dataset line sets its own
  int64_t prefix_len = 0;   // words or ids at the start of every synthetic prompt, the same for all
  PromptKind kind = PromptKind::Words;
  int32_t token_id_end = 500;  // synthetic ids are drawn from [kFirstSyntheticTokenId, token_id_end)
  int64_t turns = 1;
  uint64_t seed = 0;
  std::optional<std::string> dataset;  // JSONL: {"prompt": text or ids} or {"messages": [...]}, optional "max_tokens"
};

struct Conversation {
  nlohmann::json history;  // Chat: the messages array; Completions: the prompt (text or token ids)
  std::vector<std::string> follow_ups;  // user messages of turns 2.., in order
  std::size_t next_follow_up = 0;
  int64_t max_tokens = 0;

  bool has_next_turn() const { return next_follow_up < follow_ups.size(); }
};

// Throws deepinfer::Error for an unreadable or malformed dataset (naming file and line) and for
// prompts the endpoint cannot take (messages for Completions, token ids for Chat or multi-turn).
std::vector<Conversation> make_conversations(const PromptOptions& options, Endpoint endpoint);

// The streaming request for the conversation's current turn. `ignore_eos` asks the server to
// generate exactly max_tokens (a vLLM extension; servers without it ignore the field).
// `response_format` (not null): sent as the request's response_format (structured output).
nlohmann::json request_body(const Conversation& conversation, Endpoint endpoint, const std::string& model,
                            bool ignore_eos, const nlohmann::json& response_format = nullptr);

// The JSON object in `path` that --response-format sends with each request; throws
// deepinfer::Error naming the file when it cannot be read or is not a JSON object.
nlohmann::json read_response_format(const std::string& path);

// Appends the model's reply and the next follow-up message, so the next request resends it all.
void advance_turn(Conversation& conversation, Endpoint endpoint, const std::string& reply);

}  // namespace deepinfer::cli::bench
