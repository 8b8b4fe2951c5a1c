#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

constexpr int64_t kVocab = 100;

std::string error_of(const std::function<void(SamplingParams&)>& edit) {
  SamplingParams params;
  edit(params);
  try {
    validate(params, kVocab);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(SamplingParams, DefaultsAndBoundaryValuesAreValid) {
  EXPECT_EQ(error_of([](SamplingParams&) {}), "");
  EXPECT_EQ(error_of([](SamplingParams& p) {
              p.temperature = 0;
              p.top_p = 1;
              p.top_k = -1;
              p.min_p = 1;
              p.presence_penalty = -2;
              p.frequency_penalty = 2;
              p.repetition_penalty = 0.01f;
              p.logit_bias = {{0, -100}, {99, 100}};
              p.stop_token_ids = {0, 99};
              p.seed = 0;
              p.logprobs = 20;
              p.n = 4;
            }),
            "");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.logprobs = 0; }), "");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_k = 0; }), "");
}

struct BadCase {
  const char* field;
  std::function<void(SamplingParams&)> edit;
};

TEST(SamplingParams, EachOutOfRangeFieldIsNamedInTheError) {
  const float nan = std::nanf("");
  const BadCase cases[] = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [&](SamplingParams& p) { p.temperature = nan; }},
      {"temperature", [](SamplingParams& p) { p.temperature = INFINITY; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"top_p", [&](SamplingParams& p) { p.top_p = nan; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -2.5f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[3] = 100.5f; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[kVocab] = 1; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[-1] = 1; }},
      {"stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {5, kVocab}; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }},
      {"n", [](SamplingParams& p) { p.n = 0; }},
  };
  for (const BadCase& bad : cases) {
    const std::string message = error_of(bad.edit);
    EXPECT_NE(message.find(std::string("sampling parameter ") + bad.field), std::string::npos)
        << bad.field << ": '" << message << "'";
  }
}

}  // namespace
}  // namespace deepinfer::engine
