#include "cli/bench_prompts.h"

#include <array>
#include <fstream>

#include "cli/bench_random.h"
#include "core/error.h"

namespace deepinfer::cli::bench {
namespace {

// Common English words: each is one token in byte-level BPE vocabularies with a leading space, so
// a prompt of N words is close to N tokens (the server's usage block reports the exact count).
constexpr std::array<std::string_view, 64> kWords = {
    "the",   "of",     "and",   "to",    "in",    "is",    "that",  "for",   "it",     "as",    "was",
    "with",  "be",     "by",    "on",    "not",   "he",    "this",  "are",   "or",     "his",   "from",
    "at",    "which",  "but",   "have",  "an",    "had",   "they",  "you",   "were",   "their", "one",
    "all",   "we",     "can",   "her",   "has",   "there", "been",  "if",    "more",   "when",  "will",
    "would", "who",    "so",    "no",    "time",  "people", "year", "way",   "day",    "man",   "world",
    "life",  "work",   "part",  "place", "case",  "week",  "water", "city",  "number"};

struct DatasetEntry {
  nlohmann::json prompt;    // a string or token ids; null when the line has messages
  nlohmann::json messages;  // null when the line has a prompt
  std::optional<int64_t> max_tokens;
  std::string where;  // FILE:LINE, for errors found later
};

std::vector<DatasetEntry> read_dataset(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, ": cannot open the dataset");
  std::vector<DatasetEntry> entries;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str_cat(path, ":", number);
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) fail(where, ": expected a JSON object");
    DatasetEntry entry{nullptr, nullptr, std::nullopt, where};
    if (auto prompt = parsed.find("prompt"); prompt != parsed.end()) {
      if (prompt->is_array()) {
        if (prompt->empty()) fail(where, ": \"prompt\" is an empty array");
        for (const auto& id : *prompt)
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            fail(where, ": \"prompt\" ", id.dump(), " is not a token id");
      } else if (!prompt->is_string()) {
        fail(where, ": \"prompt\" must be a string or an array of token ids");
      }
      entry.prompt = *prompt;
    } else if (auto messages = parsed.find("messages"); messages != parsed.end()) {
      if (!messages->is_array() || messages->empty()) fail(where, ": \"messages\" must be a non-empty array");
      entry.messages = *messages;
    } else {
      fail(where, ": needs \"prompt\" or \"messages\"");
    }
    if (auto max_tokens = parsed.find("max_tokens"); max_tokens != parsed.end()) {
      if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1)
        fail(where, ": \"max_tokens\" must be a positive integer");
      entry.max_tokens = max_tokens->get<int64_t>();
    }
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) fail(path, ": the dataset has no prompts");
  return entries;
}

std::string random_words(Rng& rng, int64_t count) {
  std::string text;
  for (int64_t i = 0; i < count; ++i) {
    if (i > 0) text.push_back(' ');
    text.append(kWords[uniform_below(rng, kWords.size())]);
  }
  return text;
}

std::vector<int32_t> random_ids(Rng& rng, int64_t count, int32_t end) {
  std::vector<int32_t> ids(static_cast<std::size_t>(count));
  const auto span = static_cast<uint64_t>(end - kFirstSyntheticTokenId);
  for (auto& id : ids) id = kFirstSyntheticTokenId + static_cast<int32_t>(uniform_below(rng, span));
  return ids;
}

nlohmann::json user_message(std::string text) { return {{"role", "user"}, {"content", std::move(text)}}; }

Conversation from_entry(const DatasetEntry& entry, Endpoint endpoint, const PromptOptions& options) {
  Conversation conversation;
  conversation.max_tokens = entry.max_tokens.value_or(options.output_len);
  if (endpoint == Endpoint::Chat) {
    if (entry.messages.is_null() && !entry.prompt.is_string())
      fail(entry.where, ": token-id prompts need --endpoint completions");
    conversation.history = entry.messages.is_null() ? nlohmann::json::array({user_message(entry.prompt)})
                                                    : entry.messages;
  } else {
    if (!entry.messages.is_null()) fail(entry.where, ": \"messages\" need --endpoint chat");
    if (options.turns > 1 && !entry.prompt.is_string())
      fail(entry.where, ": --multi-turn with --endpoint completions needs text prompts");
    conversation.history = entry.prompt;
  }
  return conversation;
}

}  // namespace

std::string_view endpoint_path(Endpoint endpoint) {
  return endpoint == Endpoint::Chat ? "/v1/chat/completions" : "/v1/completions";
}

std::vector<Conversation> make_conversations(const PromptOptions& options, Endpoint endpoint) {
  if (options.input_len < 1 || options.output_len < 1 || options.turns < 1)
    fail("input length, output length and turns must be at least 1");
  if (options.prefix_len < 0 || options.prefix_len > options.input_len)
    fail("the shared prefix (", options.prefix_len, ") must lie within the input length (", options.input_len, ")");
  const bool ids = options.kind == PromptKind::TokenIds;
  if (ids && endpoint == Endpoint::Chat) fail("token-id prompts need --endpoint completions");
  if (ids && options.turns > 1) fail("--multi-turn needs text prompts: a reply cannot be appended as token ids");
  if (ids && options.token_id_end <= kFirstSyntheticTokenId)
    fail("the synthetic token id range [", kFirstSyntheticTokenId, ", ", options.token_id_end, ") is empty");

  if (options.count == 0 && !options.dataset) fail("synthetic prompts need a count");
  Rng rng(options.seed);
  std::vector<Conversation> conversations;
  conversations.reserve(options.count);
  if (options.dataset) {
    const std::vector<DatasetEntry> entries = read_dataset(*options.dataset);
    const std::size_t count = options.count > 0 ? options.count : entries.size();
    for (std::size_t i = 0; i < count; ++i)
      conversations.push_back(from_entry(entries[i % entries.size()], endpoint, options));
  } else {
    const int64_t own_len = options.input_len - options.prefix_len;
    const std::string word_prefix = ids ? "" : random_words(rng, options.prefix_len);
    const std::vector<int32_t> id_prefix = ids ? random_ids(rng, options.prefix_len, options.token_id_end)
                                               : std::vector<int32_t>{};
    for (std::size_t i = 0; i < options.count; ++i) {
      Conversation conversation;
      conversation.max_tokens = options.output_len;
      if (ids) {
        std::vector<int32_t> prompt = id_prefix;
        const auto own = random_ids(rng, own_len, options.token_id_end);
        prompt.insert(prompt.end(), own.begin(), own.end());
        conversation.history = prompt;
      } else {
        std::string text = word_prefix;
        if (!text.empty() && own_len > 0) text.push_back(' ');
        text += random_words(rng, own_len);
        conversation.history = endpoint == Endpoint::Chat ? nlohmann::json::array({user_message(std::move(text))})
                                                          : nlohmann::json(std::move(text));
      }
      conversations.push_back(std::move(conversation));
    }
  }
  for (auto& conversation : conversations)
    for (int64_t turn = 1; turn < options.turns; ++turn)
      conversation.follow_ups.push_back(random_words(rng, options.input_len));
  return conversations;
}

nlohmann::json request_body(const Conversation& conversation, Endpoint endpoint, const std::string& model,
                            bool ignore_eos, const nlohmann::json& response_format) {
  nlohmann::json body = {{"model", model},
                         {endpoint == Endpoint::Chat ? "messages" : "prompt", conversation.history},
                         {"max_tokens", conversation.max_tokens},
                         {"temperature", 0.0},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (ignore_eos) body["ignore_eos"] = true;
  if (!response_format.is_null()) body["response_format"] = response_format;
  return body;
}

nlohmann::json read_response_format(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open the --response-format file");
  const nlohmann::json format = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!format.is_object()) fail(path, ": --response-format needs one JSON object (e.g. {\"type\": \"json_schema\", ...})");
  return format;
}

void advance_turn(Conversation& conversation, Endpoint endpoint, const std::string& reply) {
  if (!conversation.has_next_turn()) fail("the conversation has no further turn");
  std::string next = conversation.follow_ups[conversation.next_follow_up++];
  if (endpoint == Endpoint::Chat) {
    conversation.history.push_back({{"role", "assistant"}, {"content", reply}});
    conversation.history.push_back(user_message(std::move(next)));
  } else {
    if (!conversation.history.is_string()) fail("a token-id prompt cannot take a reply as text");
    // The reply continues the prompt text directly; a blank line marks the new user message.
    conversation.history = conversation.history.get<std::string>() + reply + "\n\n" + next;
  }
}

}  // namespace deepinfer::cli::bench
