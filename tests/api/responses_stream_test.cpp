// The Responses API event writer (api/chunk_responses.h): exact event lists for reasoning + text,
// a DSML tool call and a max_output_tokens cut, and the invariants the openai SDK's stream
// accumulator relies on (sequence numbers, item ids per output_index, deltas adding up to the
// done text, the final response equal to the non-streaming body).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "api/chunk_responses.h"
#include "api/output_collector.h"
#include "api/output_processor.h"
#include "api/output_responses_body.h"

namespace deepinfer::api {
namespace {

const ResponsesFormat kFormat{"resp_r1", "m", 100, 105, /*reasoning_tokens=*/true};

OutputEvent reasoning(std::string text) { return {OutputEvent::Kind::reasoning_delta, std::move(text)}; }
OutputEvent content(std::string text) { return {OutputEvent::Kind::content_delta, std::move(text)}; }

StreamFinish finish(FinishReason reason) {
  StreamFinish out;
  out.reason = reason;
  out.prompt = {std::nullopt, 12, 8};
  out.completion = {5, 3};
  return out;
}

std::vector<ResponsesEvent> write_all(ResponsesEventWriter& writer, const std::vector<StreamEvent>& events) {
  std::vector<ResponsesEvent> out;
  for (const StreamEvent& event : events)
    for (ResponsesEvent& written : writer.write(event)) out.push_back(std::move(written));
  return out;
}

std::vector<std::string> types(const std::vector<ResponsesEvent>& events) {
  std::vector<std::string> names;
  for (const ResponsesEvent& event : events) names.push_back(event.type);
  return names;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What the SDK's accumulator needs: numbering from 0, item ids that match the item added at
// their output_index, deltas that add up to the .done text, and a final response equal to the
// body of the same answer.
void expect_consistent(const std::vector<ResponsesEvent>& events, const std::vector<StreamEvent>& input) {
  std::map<int, std::string> item_ids;
  std::map<std::string, std::string> deltas;  // item id -> concatenated deltas
  for (std::size_t i = 0; i < events.size(); ++i) {
    const WireJson& data = events[i].data;
    SCOPED_TRACE(data.dump());
    EXPECT_EQ(data["type"], events[i].type);
    EXPECT_EQ(data["sequence_number"], i);
    if (events[i].type == "response.output_item.added") {
      EXPECT_EQ(data["output_index"], item_ids.size());
      item_ids[data["output_index"]] = data["item"]["id"];
      EXPECT_EQ(data["item"]["status"], "in_progress");
    }
    if (data.contains("item_id")) {
      EXPECT_EQ(data["item_id"], item_ids.at(data["output_index"]));
    }
    if (events[i].type == "response.output_item.done") {
      EXPECT_EQ(data["item"]["id"], item_ids.at(data["output_index"]));
    }
    if (ends_with(events[i].type, ".delta")) deltas[data["item_id"]] += data["delta"].get<std::string>();
    if (events[i].type == "response.output_text.done" || events[i].type == "response.reasoning_text.done") {
      EXPECT_EQ(data["text"], deltas[data["item_id"]]);
    }
    if (events[i].type == "response.function_call_arguments.done") {
      EXPECT_EQ(data["arguments"], deltas[data["item_id"]]);
    }
  }
  CollectedOutput collected;
  for (const StreamEvent& event : input) collected.add(event);
  EXPECT_EQ(events.back().data["response"], responses_body(kFormat, collected));
}

TEST(ResponsesEventWriter, ReasoningThenText) {
  const std::vector<StreamEvent> input = {StreamStart{{std::nullopt, 12, 8}}, reasoning("Hm"), reasoning("m."),
                                          content(""), content("Yes"), content("!"), finish(FinishReason::stop)};
  ResponsesEventWriter writer(kFormat);
  const std::vector<ResponsesEvent> events = write_all(writer, input);
  EXPECT_EQ(types(events),
            (std::vector<std::string>{
                "response.created", "response.in_progress",
                "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
                "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                "response.output_item.done", "response.completed"}));
  expect_consistent(events, input);
  EXPECT_EQ(events[0].data, WireJson::parse(R"({"type":"response.created","sequence_number":0,"response":{
      "id":"resp_r1","object":"response","created_at":100,"model":"m","status":"in_progress",
      "completed_at":null,"error":null,"incomplete_details":null,"output":[],"usage":null}})"));
  EXPECT_EQ(events[2].data, WireJson::parse(R"({"type":"response.output_item.added","sequence_number":2,
      "output_index":0,"item":{"type":"reasoning","id":"rs_resp_r1_0","status":"in_progress","content":[],
      "summary":[]}})"));
  EXPECT_EQ(events[3].data, WireJson::parse(R"({"type":"response.content_part.added","sequence_number":3,
      "item_id":"rs_resp_r1_0","output_index":0,"content_index":0,"part":{"type":"reasoning_text","text":""}})"));
  EXPECT_EQ(events[11].data, WireJson::parse(R"({"type":"response.output_text.delta","sequence_number":11,
      "item_id":"msg_resp_r1_1","output_index":1,"content_index":0,"delta":"Yes","logprobs":[]})"));
  EXPECT_EQ(events[13].data["text"], "Yes!");
  EXPECT_EQ(events[15].data["item"]["content"][0]["text"], "Yes!");
  const WireJson& response = events.back().data["response"];
  EXPECT_EQ(response["status"], "completed");
  EXPECT_EQ(response["completed_at"], 105);
  EXPECT_EQ(response["usage"], WireJson::parse(R"({"input_tokens":12,"input_tokens_details":{"cached_tokens":8},
      "output_tokens":5,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":17})"));
}

// The events the output processor makes of a model answer, tool calls parsed, ending at EOS.
std::vector<StreamEvent> parsed_answer(const std::string& text) {
  OutputParsingOptions options;
  options.parse_tool_calls = true;
  OutputProcessor processor(options);
  std::vector<StreamEvent> input = processor.ready({std::nullopt, 12, 0});
  for (StreamEvent& event : processor.text(text, 1)) input.push_back(std::move(event));
  for (StreamEvent& event : processor.finish(BackendFinish::stop)) input.push_back(std::move(event));
  return input;
}

TEST(ResponsesEventWriter, ToolCallFromDsml) {
  const std::vector<StreamEvent> input = parsed_answer(
      "Let me look.<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"q\" "
      "string=\"true\">hi</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>");
  ResponsesEventWriter writer(kFormat);
  const std::vector<ResponsesEvent> events = write_all(writer, input);
  expect_consistent(events, input);

  std::vector<std::string> names = types(events);
  ASSERT_GE(names.size(), 12u);
  // created, in_progress, the message item (6 events), then the call.
  EXPECT_EQ(names[8], "response.output_item.added");
  EXPECT_EQ(events[8].data["item"], WireJson::parse(R"({"type":"function_call","id":"fc_resp_r1_1",
      "status":"in_progress","call_id":"call_resp_r1_1","name":"f","arguments":""})"));
  for (std::size_t i = 9; i + 3 < names.size(); ++i) EXPECT_EQ(names[i], "response.function_call_arguments.delta");
  EXPECT_EQ(names[names.size() - 3], "response.function_call_arguments.done");
  EXPECT_EQ(events[events.size() - 3].data, WireJson::parse(R"({"type":"response.function_call_arguments.done",
      "sequence_number":)" + std::to_string(events.size() - 3) + R"(,"item_id":"fc_resp_r1_1","name":"f",
      "output_index":1,"arguments":"{\"q\": \"hi\"}"})"));
  EXPECT_EQ(names[names.size() - 2], "response.output_item.done");
  EXPECT_EQ(events[events.size() - 2].data["item"]["status"], "completed");
  EXPECT_EQ(names.back(), "response.completed");
  EXPECT_EQ(events.back().data["response"]["output"][0]["content"][0]["text"], "Let me look.");
}

TEST(ResponsesEventWriter, ANamespacedToolsCallCarriesItsNamespace) {
  const std::vector<StreamEvent> input = parsed_answer(
      "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"files::read\">\n<｜DSML｜ parameter name=\"path\" "
      "string=\"true\">a.txt</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>");
  ResponsesEventWriter writer(kFormat);
  const std::vector<ResponsesEvent> events = write_all(writer, input);
  expect_consistent(events, input);  // the body's item too
  const WireJson& item = events.back().data["response"]["output"][0];
  EXPECT_EQ(item, WireJson::parse(R"({"type":"function_call","id":"fc_resp_r1_0","status":"completed",
      "call_id":"call_resp_r1_0","name":"read","namespace":"files","arguments":"{\"path\": \"a.txt\"}"})"));
  EXPECT_EQ(events[2].data["item"]["namespace"], "files");
  EXPECT_EQ(events[events.size() - 3].data["name"], "read");
}

TEST(ResponsesEventWriter, MaxOutputTokensCutEndsIncomplete) {
  const std::vector<StreamEvent> input = {StreamStart{}, content("Once upon"), finish(FinishReason::length)};
  ResponsesEventWriter writer(kFormat);
  const std::vector<ResponsesEvent> events = write_all(writer, input);
  EXPECT_EQ(types(events), (std::vector<std::string>{
                               "response.created", "response.in_progress", "response.output_item.added",
                               "response.content_part.added", "response.output_text.delta",
                               "response.output_text.done", "response.content_part.done",
                               "response.output_item.done", "response.incomplete"}));
  expect_consistent(events, input);
  const WireJson& response = events.back().data["response"];
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(response["incomplete_details"], WireJson::parse(R"({"reason":"max_output_tokens"})"));
  EXPECT_EQ(events[events.size() - 2].data["item"]["status"], "incomplete");
  EXPECT_EQ(response["output"][0]["status"], "incomplete");
}

TEST(ResponsesEventWriter, OnlyTheItemTheCutInterruptedIsIncomplete) {
  const std::vector<StreamEvent> input = {StreamStart{}, reasoning("Add."), content("4"),
                                          finish(FinishReason::length)};
  ResponsesEventWriter writer(kFormat);
  const std::vector<ResponsesEvent> events = write_all(writer, input);
  expect_consistent(events, input);
  const WireJson& output = events.back().data["response"]["output"];
  ASSERT_EQ(output.size(), 2u);
  EXPECT_EQ(output[0]["type"], "reasoning");
  EXPECT_EQ(output[0]["status"], "completed");
  EXPECT_EQ(output[1]["type"], "message");
  EXPECT_EQ(output[1]["status"], "incomplete");
  std::vector<std::string> done_statuses;
  for (const ResponsesEvent& event : events)
    if (event.type == "response.output_item.done") done_statuses.push_back(event.data["item"]["status"]);
  EXPECT_EQ(done_statuses, (std::vector<std::string>{"completed", "incomplete"}));
}

TEST(ResponsesEventWriter, ErrorEventContinuesTheNumbering) {
  ResponsesEventWriter writer(kFormat);
  ASSERT_EQ(writer.write(StreamStart{}).size(), 2u);
  const ResponsesEvent error = writer.error(ApiError(500, "engine failed", "", "server_error", "engine_error"));
  EXPECT_EQ(error.type, "error");
  EXPECT_EQ(error.data, WireJson::parse(R"({"type":"error","sequence_number":2,"code":"engine_error",
      "message":"engine failed","param":null})"));
}

}  // namespace
}  // namespace deepinfer::api
