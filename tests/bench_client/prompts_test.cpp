#include "cli/bench_prompts.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace deepinfer::cli::bench {
namespace {

std::size_t word_count(const std::string& text) {
  std::istringstream in(text);
  std::size_t count = 0;
  for (std::string word; in >> word;) ++count;
  return count;
}

class DatasetFile {
 public:
  explicit DatasetFile(const std::string& contents)
      : path_(std::filesystem::temp_directory_path() /
              ("deepinfer_bench_dataset_" + std::to_string(reinterpret_cast<std::uintptr_t>(this)) + ".jsonl")) {
    std::ofstream(path_) << contents;
  }
  ~DatasetFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(SyntheticPrompts, TokenIdsHaveExactLengthRangeAndSharedPrefix) {
  PromptOptions options;
  options.count = 20;
  options.input_len = 50;
  options.prefix_len = 10;
  options.kind = PromptKind::TokenIds;
  options.token_id_end = 40;
  options.seed = 5;
  const auto conversations = make_conversations(options, Endpoint::Completions);
  ASSERT_EQ(conversations.size(), 20u);
  std::set<std::vector<int32_t>> tails;
  const auto first = conversations[0].history.get<std::vector<int32_t>>();
  for (const auto& conversation : conversations) {
    const auto ids = conversation.history.get<std::vector<int32_t>>();
    ASSERT_EQ(ids.size(), 50u);
    for (int32_t id : ids) {
      EXPECT_GE(id, kFirstSyntheticTokenId);
      EXPECT_LT(id, 40);
    }
    EXPECT_TRUE(std::equal(ids.begin(), ids.begin() + 10, first.begin()));
    tails.insert(std::vector<int32_t>(ids.begin() + 10, ids.end()));
    EXPECT_EQ(conversation.max_tokens, options.output_len);
    EXPECT_FALSE(conversation.has_next_turn());
  }
  EXPECT_EQ(tails.size(), 20u);  // the rest is drawn per prompt
  EXPECT_EQ(make_conversations(options, Endpoint::Completions)[7].history, conversations[7].history);
  options.seed = 6;
  EXPECT_NE(make_conversations(options, Endpoint::Completions)[7].history, conversations[7].history);
}

TEST(SyntheticPrompts, WordsForChatAreOneUserMessage) {
  PromptOptions options;
  options.count = 3;
  options.input_len = 30;
  options.prefix_len = 30;  // all shared
  const auto conversations = make_conversations(options, Endpoint::Chat);
  for (const auto& conversation : conversations) {
    ASSERT_TRUE(conversation.history.is_array());
    ASSERT_EQ(conversation.history.size(), 1u);
    EXPECT_EQ(conversation.history[0]["role"], "user");
    EXPECT_EQ(word_count(conversation.history[0]["content"]), 30u);
    EXPECT_EQ(conversation.history, conversations[0].history);
  }
}

TEST(SyntheticPrompts, RefusesWhatTheEndpointCannotTake) {
  PromptOptions options;
  options.count = 2;
  options.kind = PromptKind::TokenIds;
  EXPECT_THROW(make_conversations(options, Endpoint::Chat), Error);
  options.turns = 2;
  EXPECT_THROW(make_conversations(options, Endpoint::Completions), Error);
  options = PromptOptions{};
  options.prefix_len = options.input_len + 1;
  EXPECT_THROW(make_conversations(options, Endpoint::Completions), Error);
}

TEST(MultiTurn, ChatResendsTheWholeHistory) {
  PromptOptions options;
  options.count = 2;
  options.input_len = 8;
  options.turns = 3;
  auto conversations = make_conversations(options, Endpoint::Chat);
  Conversation& c = conversations[0];
  ASSERT_EQ(c.follow_ups.size(), 2u);
  const nlohmann::json first_prompt = c.history[0];
  const std::string follow_up_1 = c.follow_ups[0];
  const std::string follow_up_2 = c.follow_ups[1];
  EXPECT_EQ(word_count(follow_up_1), 8u);

  advance_turn(c, Endpoint::Chat, "reply one");
  advance_turn(c, Endpoint::Chat, "reply two");
  EXPECT_FALSE(c.has_next_turn());
  const nlohmann::json expected = {first_prompt,
                                   {{"role", "assistant"}, {"content", "reply one"}},
                                   {{"role", "user"}, {"content", follow_up_1}},
                                   {{"role", "assistant"}, {"content", "reply two"}},
                                   {{"role", "user"}, {"content", follow_up_2}}};
  EXPECT_EQ(c.history, expected);
  EXPECT_EQ(request_body(c, Endpoint::Chat, "m", true)["messages"], expected);
  EXPECT_THROW(advance_turn(c, Endpoint::Chat, "one too many"), Error);
}

TEST(MultiTurn, CompletionsAppendsReplyAndMessageToThePromptText) {
  PromptOptions options;
  options.count = 1;
  options.input_len = 4;
  options.turns = 2;
  auto conversations = make_conversations(options, Endpoint::Completions);
  Conversation& c = conversations[0];
  const std::string prompt = c.history.get<std::string>();
  advance_turn(c, Endpoint::Completions, " and so on");
  EXPECT_EQ(c.history.get<std::string>(), prompt + " and so on\n\n" + c.follow_ups[0]);
  EXPECT_EQ(request_body(c, Endpoint::Completions, "m", true)["prompt"], c.history);
}

TEST(RequestBody, StreamsWithUsageAndAsksToIgnoreEos) {
  Conversation c;
  c.history = "hello";
  c.max_tokens = 17;
  const auto body = request_body(c, Endpoint::Completions, "deepseek", true);
  EXPECT_EQ(body["model"], "deepseek");
  EXPECT_EQ(body["prompt"], "hello");
  EXPECT_EQ(body["max_tokens"], 17);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_FALSE(request_body(c, Endpoint::Completions, "deepseek", false).contains("ignore_eos"));
  EXPECT_FALSE(body.contains("response_format"));
  const nlohmann::json format = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}}}}}};
  EXPECT_EQ(request_body(c, Endpoint::Chat, "deepseek", true, format)["response_format"], format);
  EXPECT_EQ(endpoint_path(Endpoint::Chat), "/v1/chat/completions");
  EXPECT_EQ(endpoint_path(Endpoint::Completions), "/v1/completions");
}

TEST(Dataset, ReadsPromptsIdsAndMessagesAndCycles) {
  DatasetFile file(
      "{\"prompt\": \"one\", \"max_tokens\": 5}\n"
      "\n"
      "{\"prompt\": [7, 8, 9]}\r\n");
  PromptOptions options;
  options.dataset = file.path();
  options.count = 0;
  options.output_len = 33;
  auto conversations = make_conversations(options, Endpoint::Completions);
  ASSERT_EQ(conversations.size(), 2u);
  EXPECT_EQ(conversations[0].history, "one");
  EXPECT_EQ(conversations[0].max_tokens, 5);
  EXPECT_EQ(conversations[1].history, nlohmann::json::array({7, 8, 9}));
  EXPECT_EQ(conversations[1].max_tokens, 33);
  options.count = 5;
  conversations = make_conversations(options, Endpoint::Completions);
  ASSERT_EQ(conversations.size(), 5u);
  EXPECT_EQ(conversations[4].history, "one");
  // Token ids cannot go to the chat endpoint.
  EXPECT_THROW(make_conversations(options, Endpoint::Chat), Error);

  DatasetFile chat("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]}\n"
                   "{\"prompt\": \"plain\"}\n");
  options.dataset = chat.path();
  options.count = 0;
  conversations = make_conversations(options, Endpoint::Chat);
  ASSERT_EQ(conversations.size(), 2u);
  EXPECT_EQ(conversations[0].history.size(), 2u);
  EXPECT_EQ(conversations[1].history, nlohmann::json::parse(R"([{"role":"user","content":"plain"}])"));
  EXPECT_THROW(make_conversations(options, Endpoint::Completions), Error);
}

TEST(Dataset, ErrorsNameTheFileAndLine) {
  const auto message_for = [](const std::string& contents) {
    DatasetFile file(contents);
    PromptOptions options;
    options.dataset = file.path();
    try {
      make_conversations(options, Endpoint::Completions);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_for("{\"prompt\": \"ok\"}\nnot json\n").find(".jsonl:2: expected a JSON object"), std::string::npos);
  EXPECT_NE(message_for("{\"text\": \"x\"}\n").find(":1: needs \"prompt\" or \"messages\""), std::string::npos);
  EXPECT_NE(message_for("{\"prompt\": [1, -2]}\n").find("-2 is not a token id"), std::string::npos);
  EXPECT_NE(message_for("{\"prompt\": \"x\", \"max_tokens\": 0}\n").find("max_tokens"), std::string::npos);
  EXPECT_NE(message_for("\n\n").find("no prompts"), std::string::npos);
  PromptOptions missing;
  missing.dataset = "/nonexistent/prompts.jsonl";
  EXPECT_THROW(make_conversations(missing, Endpoint::Completions), Error);
}

}  // namespace
}  // namespace deepinfer::cli::bench
