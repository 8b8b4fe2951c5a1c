// The bundled V4.1 tokenizer against token ids recorded from the real DeepSeek V4.1 tokenizer.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "io/tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

TEST(TokenizerConformanceTest, V41VectorsEncodeExactly) {
  const Tokenizer tokenizer =
      Tokenizer::from_file(std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json");
  std::ifstream in(std::string(DEEPINFER_TEST_DATA_DIR) + "/conformance/tokenizer_vectors_v41.jsonl");
  ASSERT_TRUE(in) << "missing tokenizer_vectors_v41.jsonl";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto vector = nlohmann::json::parse(line);
    ASSERT_FALSE(vector.value("add_special_tokens", false)) << "vectors with BOS are not expected here";
    const std::string text = vector.at("text").get<std::string>();
    const auto ids = vector.at("ids").get<std::vector<TokenId>>();
    EXPECT_EQ(tokenizer.encode(text), ids) << "text: " << text;
    EXPECT_EQ(tokenizer.decode(ids), text);
    ++checked;
  }
  EXPECT_GE(checked, 16);
}

}  // namespace
}  // namespace deepinfer
