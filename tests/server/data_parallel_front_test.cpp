// The data-parallel front's pure parts: the ranks' metrics merged into one exposition (each family
// once, every sample labelled with its rank), and the routing request read from a body (the
// prompt as the rank's handler encodes it, whether a stream was asked for). The front itself runs
// in tests/cli/serve_data_parallel_test.sh and through the openai SDK (sdk.openai_sdk_data_parallel).
#include <gtest/gtest.h>

#include <string>

#include "api/prompt_renderer.h"
#include "api/prompt_tokens.h"
#include "api/request.h"
#include "server/metrics_merge.h"
#include "server/routing_prompt.h"
#include "server/server_fixture.h"

namespace deepinfer::server {
namespace {

TEST(MergeRankMetrics, EachFamilyOnceEverySampleLabelledWithItsRank) {
  const std::string rank0 =
      "# HELP a:requests Requests.\n# TYPE a:requests counter\n"
      "a:requests{model_name=\"m\",endpoint=\"/v1/x\"} 3\n"
      "# HELP a:latency Latency.\n# TYPE a:latency histogram\n"
      "a:latency_bucket{model_name=\"m\",le=\"1\"} 1\na:latency_sum{model_name=\"m\"} 0.5\n"
      "a:latency_count{model_name=\"m\"} 1\n";
  const std::string rank1 =
      "# HELP a:requests Requests.\n# TYPE a:requests counter\n"
      "a:requests{model_name=\"m\",endpoint=\"/v1/}\\\"x\"} 4\n"  // a quoted } and an escaped quote
      "# HELP a:only_here Only on rank 1.\n# TYPE a:only_here gauge\na:only_here 7\n"
      "# HELP a:latency Latency.\n# TYPE a:latency histogram\n"
      "a:latency_bucket{model_name=\"m\",le=\"1\"} 2\na:latency_sum{model_name=\"m\"} 1.5\n"
      "a:latency_count{model_name=\"m\"} 2\n";
  EXPECT_EQ(merge_rank_metrics({{0, rank0}, {3, rank1}}),
            "# HELP a:requests Requests.\n# TYPE a:requests counter\n"
            "a:requests{model_name=\"m\",endpoint=\"/v1/x\",engine=\"0\"} 3\n"
            "a:requests{model_name=\"m\",endpoint=\"/v1/}\\\"x\",engine=\"3\"} 4\n"
            "# HELP a:latency Latency.\n# TYPE a:latency histogram\n"
            "a:latency_bucket{model_name=\"m\",le=\"1\",engine=\"0\"} 1\na:latency_sum{model_name=\"m\",engine=\"0\"} 0.5\n"
            "a:latency_count{model_name=\"m\",engine=\"0\"} 1\n"
            "a:latency_bucket{model_name=\"m\",le=\"1\",engine=\"3\"} 2\na:latency_sum{model_name=\"m\",engine=\"3\"} 1.5\n"
            "a:latency_count{model_name=\"m\",engine=\"3\"} 2\n"
            "# HELP a:only_here Only on rank 1.\n# TYPE a:only_here gauge\na:only_here{engine=\"3\"} 7\n");
  EXPECT_EQ(merge_rank_metrics({}), "");
  EXPECT_EQ(merge_rank_metrics({{0, "no_value\n{\n"}}), "");  // neither comment nor sample: dropped
}

TEST(RoutingRequest, ThePromptTheRankEncodesAndTheStreamFlag) {
  const api::PromptEncoder encoder(Tokenizer::from_file(testing::tokenizer_path()), api::PromptFormat::V41);
  HttpRequest request;
  request.method = "POST";
  request.path = "/v1/chat/completions";
  request.body = R"({"model":"m","messages":[{"role":"user","content":"hello there"}],"stream":true})";
  RoutingRequest routing = routing_request(request, encoder, api::PromptFormat::V41);
  const api::ApiRequest parsed = api::parse_chat_completions_request(nlohmann::ordered_json::parse(request.body));
  EXPECT_EQ(routing.prompt, encoder.encode(api::render_prompt(parsed.conversation, api::PromptFormat::V41)));
  EXPECT_TRUE(routing.stream);

  request.path = "/completions";
  request.body = R"({"model":"m","prompt":[[5,6,7],[8]]})";
  routing = routing_request(request, encoder, api::PromptFormat::V41);
  EXPECT_EQ(routing.prompt, (std::vector<int32_t>{5, 6, 7}));  // the first of several
  EXPECT_FALSE(routing.stream);

  // What the rank will refuse has no prompt to place; the front never throws for it.
  for (const std::string body : {"{not json", R"({"model":"m","messages":[]})", R"({"model":"m","prompt":{}})"}) {
    request.body = body;
    request.path = body.find("messages") != std::string::npos ? "/v1/chat/completions" : "/v1/completions";
    EXPECT_TRUE(routing_request(request, encoder, api::PromptFormat::V41).prompt.empty()) << body;
  }
  request.method = "GET";
  request.path = "/v1/models";
  request.body.clear();
  EXPECT_TRUE(routing_request(request, encoder, api::PromptFormat::V41).prompt.empty());
}

}  // namespace
}  // namespace deepinfer::server
