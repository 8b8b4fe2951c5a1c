#include "api/chunk_responses.h"

#include <utility>
#include <variant>

namespace deepinfer::api {
namespace {

constexpr int kContentIndex = 0;  // reasoning and message items hold one content part

}  // namespace

ResponsesEventWriter::ResponsesEventWriter(ResponsesFormat format) : format_(std::move(format)) {}

ResponsesEvent ResponsesEventWriter::event(const char* type, WireJson fields) {
  WireJson data;
  data["type"] = type;
  data["sequence_number"] = sequence_number_++;
  for (auto field = fields.begin(); field != fields.end(); ++field) data[field.key()] = std::move(*field);
  return {type, std::move(data)};
}

// item_id, output_index, content_index, then the part or text fields.
WireJson ResponsesEventWriter::part_fields(WireJson fields) const {
  WireJson out;
  out["item_id"] = item_id_;
  out["output_index"] = done_items_.size();
  out["content_index"] = kContentIndex;
  for (auto field = fields.begin(); field != fields.end(); ++field) out[field.key()] = std::move(*field);
  return out;
}

void ResponsesEventWriter::open(Item item, const std::string& name, std::vector<ResponsesEvent>& out) {
  close(out);
  open_item_ = item;
  text_.clear();
  call_name_ = name;
  const std::size_t position = done_items_.size();
  WireJson added;
  switch (item) {
    case Item::reasoning:
      item_id_ = responses_item_id(format_, "rs", position);
      added = responses_reasoning_item(item_id_, "in_progress", WireJson::array());
      break;
    case Item::message:
      item_id_ = responses_item_id(format_, "msg", position);
      added = responses_message_item(item_id_, "in_progress", WireJson::array());
      break;
    case Item::function_call:
      item_id_ = responses_item_id(format_, "fc", position);
      added = responses_function_call_item(item_id_, "in_progress", responses_item_id(format_, "call", position),
                                           name, "");
      break;
    case Item::none: return;
  }
  out.push_back(event("response.output_item.added", {{"output_index", position}, {"item", std::move(added)}}));
  if (item == Item::reasoning)
    out.push_back(event("response.content_part.added", part_fields({{"part", responses_reasoning_text("")}})));
  if (item == Item::message)
    out.push_back(event("response.content_part.added", part_fields({{"part", responses_output_text("")}})));
}

void ResponsesEventWriter::close(std::vector<ResponsesEvent>& out, std::string_view status) {
  const std::size_t position = done_items_.size();
  WireJson done;
  switch (open_item_) {
    case Item::none: return;
    case Item::reasoning:
      out.push_back(event("response.reasoning_text.done", part_fields({{"text", text_}})));
      out.push_back(event("response.content_part.done", part_fields({{"part", responses_reasoning_text(text_)}})));
      done = responses_reasoning_item(item_id_, status, WireJson::array({responses_reasoning_text(text_)}));
      break;
    case Item::message:
      out.push_back(
          event("response.output_text.done", part_fields({{"text", text_}, {"logprobs", WireJson::array()}})));
      out.push_back(event("response.content_part.done", part_fields({{"part", responses_output_text(text_)}})));
      done = responses_message_item(item_id_, status, WireJson::array({responses_output_text(text_)}));
      break;
    case Item::function_call:
      done = responses_function_call_item(item_id_, status, responses_item_id(format_, "call", position),
                                          call_name_, text_);
      out.push_back(event("response.function_call_arguments.done", {{"item_id", item_id_},
                                                                    {"name", done["name"]},
                                                                    {"output_index", position},
                                                                    {"arguments", text_}}));
      break;
  }
  out.push_back(event("response.output_item.done", {{"output_index", position}, {"item", done}}));
  done_items_.push_back(std::move(done));
  open_item_ = Item::none;
}

// Empty pieces open nothing: the body leaves out an empty reasoning or message item too.
void ResponsesEventWriter::text_delta(Item item, const std::string& text, std::vector<ResponsesEvent>& out) {
  if (text.empty()) return;
  if (open_item_ != item) open(item, "", out);
  text_ += text;
  if (item == Item::reasoning)
    out.push_back(event("response.reasoning_text.delta", part_fields({{"delta", text}})));
  else
    out.push_back(
        event("response.output_text.delta", part_fields({{"delta", text}, {"logprobs", WireJson::array()}})));
}

std::vector<ResponsesEvent> ResponsesEventWriter::write(const StreamEvent& stream_event) {
  std::vector<ResponsesEvent> out;
  if (std::holds_alternative<StreamStart>(stream_event)) {
    const WireJson response = responses_object(format_, WireJson::array(), nullptr);
    out.push_back(event("response.created", {{"response", response}}));
    out.push_back(event("response.in_progress", {{"response", response}}));
  } else if (const auto* finish = std::get_if<StreamFinish>(&stream_event)) {
    const bool incomplete = finish->reason == FinishReason::length;
    close(out, incomplete ? "incomplete" : "completed");
    out.push_back(event(incomplete ? "response.incomplete" : "response.completed",
                        {{"response", responses_object(format_, done_items_, finish)}}));
  } else {
    const OutputEvent& output = std::get<OutputEvent>(stream_event);
    switch (output.kind) {
      case OutputEvent::Kind::reasoning_delta: text_delta(Item::reasoning, output.text, out); break;
      case OutputEvent::Kind::content_delta: text_delta(Item::message, output.text, out); break;
      case OutputEvent::Kind::tool_call_start: open(Item::function_call, output.text, out); break;
      case OutputEvent::Kind::tool_call_arguments_delta:
        if (open_item_ != Item::function_call || output.text.empty()) break;
        text_ += output.text;
        out.push_back(event("response.function_call_arguments.delta",
                            {{"item_id", item_id_}, {"output_index", done_items_.size()}, {"delta", output.text}}));
        break;
    }
  }
  return out;
}

ResponsesEvent ResponsesEventWriter::error(const ApiError& failure) {
  WireJson fields;
  fields["code"] = failure.code().empty() ? WireJson(failure.type()) : WireJson(failure.code());
  fields["message"] = failure.message();
  fields["param"] = failure.param().empty() ? WireJson(nullptr) : WireJson(failure.param());
  return event("error", std::move(fields));
}

}  // namespace deepinfer::api
