// Issue 19: request JSON parsed in linear time and within a key / value / depth budget, to the
// same ordered_json nlohmann's parser builds; the 8 MiB body of ~800k keys refused in < 100 ms.
#include <gtest/gtest.h>

#include <string>

#include "raw_client.h"
#include "sanitizer_scale.h"
#include "server/json_body.h"
#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using OrderedJson = nlohmann::ordered_json;
using namespace std::chrono_literals;

std::string object_of_keys(std::size_t keys, std::size_t max_bytes = SIZE_MAX) {
  std::string out = "{";
  for (std::size_t i = 0; i < keys && out.size() < max_bytes; ++i) out += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
  return out + "}";
}

TEST(JsonBudget, BuildsWhatNlohmannBuilds) {
  for (const std::string& text :
       {std::string(R"({"b": 1, "a": [1, 2.5, "x", null, true, {"k": {}}], "c": {"z": [], "y": -3}})"),
        std::string(R"([1, {"a": 1, "a": 2, "b": 3}, "\u00e9\ud83d\ude00"])"), std::string("\"just a string\""),
        object_of_keys(100), std::string(R"({"dup": 1, "x": 2, "dup": {"deep": [1]}})")}) {
    SCOPED_TRACE(text.substr(0, 80));
    const JsonBodyResult parsed = parse_json_with_budget(text);
    ASSERT_EQ(parsed.status, JsonBodyResult::Status::Ok) << parsed.message;
    const OrderedJson expected = OrderedJson::parse(text);
    EXPECT_EQ(parsed.value, expected);
    EXPECT_EQ(parsed.value.dump(), expected.dump());  // the same key order
  }
  // Duplicates in an object large enough to be indexed: first place, last value.
  std::string many = object_of_keys(100);
  many.back() = ',';
  many += "\"7\":\"last\",\"new\":1}";
  const JsonBodyResult parsed = parse_json_with_budget(many);
  ASSERT_EQ(parsed.status, JsonBodyResult::Status::Ok);
  EXPECT_EQ(parsed.value.dump(), OrderedJson::parse(many).dump());
  EXPECT_EQ(parsed.value["7"], "last");
  EXPECT_EQ(parsed.value.size(), 101u);
  for (const std::string bad : {"{", "{\"a\" 1}", "[1,]", "{\"a\":1}x", "\"\xff\"", ""})
    EXPECT_EQ(parse_json_with_budget(bad).status, JsonBodyResult::Status::Malformed) << bad;
}

TEST(JsonBudget, KeysValuesAndDepthAreBounded) {
  JsonBudget budget;
  budget.max_keys = 10;
  budget.max_values = 20;
  budget.max_depth = 4;
  EXPECT_EQ(parse_json_with_budget(object_of_keys(10), budget).status, JsonBodyResult::Status::Ok);
  const JsonBodyResult keys = parse_json_with_budget(object_of_keys(11), budget);
  EXPECT_EQ(keys.status, JsonBodyResult::Status::OverBudget);
  EXPECT_NE(keys.message.find("10 object keys"), std::string::npos) << keys.message;
  EXPECT_EQ(parse_json_with_budget("[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19]", budget).status,
            JsonBodyResult::Status::Ok);
  EXPECT_EQ(parse_json_with_budget("[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]", budget).status,
            JsonBodyResult::Status::OverBudget);
  EXPECT_EQ(parse_json_with_budget("[[[[1]]]]", budget).status, JsonBodyResult::Status::Ok);
  EXPECT_EQ(parse_json_with_budget("[[[[[1]]]]]", budget).status, JsonBodyResult::Status::OverBudget);
}

TEST(JsonBudget, ManyKeysCostLinearTime) {
  // 100k keys took nlohmann's ordered_json 15 s (the issue); with a budget that allows them,
  // this parser takes a fraction of a second (the default budget refuses them at 16,384).
  const std::string text = object_of_keys(100'000);
  JsonBudget budget;
  budget.max_keys = 1 << 20;
  const auto start = Clock::now();
  const JsonBodyResult parsed = parse_json_with_budget(text, budget);
  const double took = ms_since(start);
  ASSERT_EQ(parsed.status, JsonBodyResult::Status::Ok);
  EXPECT_EQ(parsed.value.size(), 100'000u);
  EXPECT_LT(took, deepinfer::testing::release_or_sanitized(1000, 10000));
  EXPECT_EQ(parse_json_with_budget(text).status, JsonBodyResult::Status::OverBudget);
}

TEST(JsonBudget, TheEightMebibyteBodyOfKeysIsRefusedInUnder100ms) {
  ServerOptions options = test_options();
  RunningServer server(options);
  // The issue's body: ~800k keys in a logit_bias within the 8 MiB limit.
  std::string bias = object_of_keys(1'000'000, (8 << 20) - 200);
  const std::string body = R"({"model": "tiny", "prompt": "hi", "max_tokens": 1, "logit_bias": )" + bias + "}";
  ASSERT_LT(body.size(), std::size_t{8} << 20);
  ASSERT_GT(std::count(body.begin(), body.end(), ':'), 700'000);
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  const std::string request = http_request("POST", "/v1/completions", body);
  // Everything but the last byte first, so the clock measures the server, not this client's send.
  ASSERT_TRUE(send_all(fd, request.substr(0, request.size() - 1)));
  std::this_thread::sleep_for(200ms);
  const auto start = Clock::now();
  ASSERT_TRUE(send_all(fd, request.substr(request.size() - 1)));
  const std::string answer = read_for(fd, 30s, "}}");
  const double took = ms_since(start);
  ::close(fd);
  EXPECT_EQ(final_status(answer), 400) << answer.substr(0, 300);
  EXPECT_NE(answer.find("object keys"), std::string::npos) << answer.substr(0, 300);
  EXPECT_LT(took, deepinfer::testing::release_or_sanitized(100, 1500));
  std::printf("8 MiB body of keys refused in %.1f ms\n", took);
}

}  // namespace
}  // namespace deepinfer::server::testing
