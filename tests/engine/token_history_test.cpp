#include "engine/token_history.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

TEST(TokenHistory, KeepsDistinctPromptIdsAndCountsGeneratedOnes) {
  const std::vector<int32_t> prompt = {7, 3, 7, 1};
  TokenHistory history(prompt);
  EXPECT_EQ(std::vector<int32_t>(history.prompt_tokens_distinct().begin(), history.prompt_tokens_distinct().end()),
            (std::vector<int32_t>{1, 3, 7}));
  for (int32_t token : {9, 3, 9, 9}) history.append(token);
  ASSERT_EQ(history.generated_counts().size(), 2u);
  EXPECT_EQ(history.generated_counts()[0].token, 9);
  EXPECT_EQ(history.generated_counts()[0].count, 3);
  EXPECT_FALSE(history.generated_counts()[0].in_prompt);
  EXPECT_EQ(history.generated_counts()[1].token, 3);
  EXPECT_EQ(history.generated_counts()[1].count, 1);
  EXPECT_TRUE(history.generated_counts()[1].in_prompt);
  EXPECT_EQ(history.generated_length(), 4);
  EXPECT_EQ(history.id_bound(), 10);
}

TEST(TokenHistory, CopiesShareThePromptAndDivergeAfterIt) {
  const std::vector<int32_t> prompt = {4, 5};
  TokenHistory first(prompt);
  TokenHistory second = first;
  first.append(6);
  second.append(4);
  EXPECT_EQ(first.prompt_tokens_distinct().data(), second.prompt_tokens_distinct().data());
  EXPECT_EQ(first.generated_counts()[0].token, 6);
  EXPECT_EQ(second.generated_counts()[0].token, 4);
  EXPECT_EQ(first.generated_counts().size(), 1u);
}

TEST(TokenHistory, RejectsNegativeIds) {
  const std::vector<int32_t> prompt = {1, -2};
  EXPECT_THROW(TokenHistory{prompt}, Error);
  TokenHistory history;
  EXPECT_THROW(history.append(-1), Error);
}

}  // namespace
}  // namespace deepinfer::engine
