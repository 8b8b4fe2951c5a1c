// Every vector of tests/data/conformance/{prompt_vectors,error_vectors,worked_examples_derived}.jsonl:
// the same prompt string and ids as deepseek-recipe, the same 400 messages.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/api_error.h"
#include "api_test_support.h"

namespace deepinfer::api {
namespace {

using nlohmann::ordered_json;
using testing::parse_request;
using testing::v41_tokenizer;

std::vector<ordered_json> read_vectors(const std::string& name) {
  const std::string path = std::string(DEEPINFER_TEST_DATA_DIR) + "/conformance/" + name;
  std::ifstream file(path);
  std::vector<ordered_json> rows;
  std::string line;
  while (std::getline(file, line)) {
    if (!line.empty()) rows.push_back(ordered_json::parse(line));
  }
  if (rows.empty()) ADD_FAILURE() << "no vectors in " << path;
  return rows;
}

std::string vector_name(const ::testing::TestParamInfo<ordered_json>& info) {
  return info.param["name"].get<std::string>();
}

class PromptVectorTest : public ::testing::TestWithParam<ordered_json> {};

TEST_P(PromptVectorTest, RendersTheSamePromptAndIds) {
  const ordered_json& row = GetParam();
  const PromptFormat format = row["encoding"] == "v4" ? PromptFormat::V4 : PromptFormat::V41;
  const ApiRequest request = parse_request(row["protocol"], row["request"]);
  const RenderedPrompt prompt = render_prompt(request.conversation, format);
  EXPECT_EQ(prompt.text(), row["expected_prompt"].get<std::string>());
  if (row.contains("expected_ids")) {
    // The V4 tokenizer differs from V4.1's only at ids V4 prompts never use (recipe §4).
    const PromptEncoder encoder(v41_tokenizer(), format);
    EXPECT_EQ(encoder.encode(prompt), row["expected_ids"].get<std::vector<TokenId>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Conformance, PromptVectorTest,
                         ::testing::ValuesIn(read_vectors("prompt_vectors.jsonl")), vector_name);
INSTANTIATE_TEST_SUITE_P(WorkedExamples, PromptVectorTest,
                         ::testing::ValuesIn(read_vectors("worked_examples_derived.jsonl")), vector_name);

class ErrorVectorTest : public ::testing::TestWithParam<ordered_json> {};

TEST_P(ErrorVectorTest, RefusesWithTheSameStatusAndMessage) {
  const ordered_json& row = GetParam();
  try {
    parse_request(row["protocol"], row["request"]);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status(), row["expected_status"].get<int>());
    EXPECT_EQ(std::string(error.what()), row["expected_message"].get<std::string>());
    EXPECT_EQ(error.type(), "invalid_request_error");
  }
}

INSTANTIATE_TEST_SUITE_P(Conformance, ErrorVectorTest,
                         ::testing::ValuesIn(read_vectors("error_vectors.jsonl")), vector_name);

}  // namespace
}  // namespace deepinfer::api
