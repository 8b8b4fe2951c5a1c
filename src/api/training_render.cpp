#include "api/training_render.h"

#include <algorithm>

#include "api/prompt_markers.h"
#include "api/request.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

Conversation parse_body(const nlohmann::ordered_json& body, const std::string& where) {
  try {
    return parse_chat_completions_request(body).conversation;
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
}

// The request without its answer must be one the server accepts. The answer itself is parsed by
// the same adapter; a tool-calling answer gets placeholder results after it only so that the
// adapter's "calls need results" rule passes (they are not rendered).
Conversation parse_answered_conversation(nlohmann::ordered_json body, const std::string& where) {
  if (!body.is_object()) fail(where, ": expected a JSON object (a Chat Completions request body)");
  if (!body.contains("model")) body["model"] = "render";
  const auto messages = body.find("messages");
  const auto is_assistant = [](const nlohmann::ordered_json& message) {
    const auto role = message.find("role");
    return role != message.end() && role->is_string() && *role == "assistant";
  };
  if (messages == body.end() || !messages->is_array() || messages->empty() || !messages->back().is_object() ||
      !is_assistant(messages->back()))
    fail(where, ": the last message must be the assistant answer");
  nlohmann::ordered_json asked_body = body;
  asked_body["messages"].erase(asked_body["messages"].size() - 1);
  Conversation conversation = parse_body(asked_body, where);
  nlohmann::ordered_json answered = body;
  if (const auto calls = messages->back().find("tool_calls"); calls != messages->back().end() && calls->is_array())
    for (const auto& call : *calls) {
      // a malformed call is the adapter's to refuse; only a string id can be answered
      const auto id = call.is_object() ? call.find("id") : call.end();
      const bool has_id = call.is_object() && id != call.end() && id->is_string();
      answered["messages"].push_back({{"role", "tool"}, {"tool_call_id", has_id ? id->get<std::string>() : ""}, {"content", ""}});
    }
  const Conversation full = parse_body(answered, where);
  if (full.messages.size() <= conversation.messages.size())
    fail(where, ": the answer did not parse as an assistant message of its own");
  conversation.messages.push_back(full.messages[conversation.messages.size()]);
  return conversation;
}

}  // namespace

TrainingRender render_training(const PromptEncoder& encoder, PromptFormat format, const nlohmann::ordered_json& body,
                               const std::string& where) {
  const Conversation conversation = parse_answered_conversation(body, where);
  const auto& messages = conversation.messages;
  if (messages.empty() || messages.back().role != Role::Assistant || messages.back().prefix)
    fail(where, ": the last message must be the assistant answer (not a prefix)");
  Conversation asked = conversation;
  asked.messages.pop_back();
  const RenderedPrompt prompt = render_prompt(asked, format);
  // A conversation ending in an assistant turn renders that turn, then the next turn's generation
  // opener (`<｜Assistant｜><think>`): the answer ends at the first end-of-sentence marker after
  // the prompt's pieces, and nothing after it is trained on.
  RenderedPrompt full = render_prompt(conversation, format);
  for (std::size_t i = prompt.pieces.size() > 0 ? prompt.pieces.size() - 1 : 0; i < full.pieces.size(); ++i) {
    if (full.pieces[i].is_marker && full.pieces[i].text == markers::kEos) {
      full.pieces.resize(i + 1);
      break;
    }
  }
  TrainingRender out;
  out.ids = encoder.encode(full);
  out.text = full.text();
  const std::vector<TokenId> prompt_ids = encoder.encode(prompt);
  const std::string prompt_text = prompt.text();
  const bool ids_prefix = prompt_ids.size() < out.ids.size() &&
                          std::equal(prompt_ids.begin(), prompt_ids.end(), out.ids.begin());
  if (!ids_prefix || out.text.compare(0, prompt_text.size(), prompt_text) != 0) {
    const nlohmann::ordered_json tail = prompt_text.substr(prompt_text.size() > 40 ? prompt_text.size() - 40 : 0);
    fail(where, ": the answer rendered as history does not continue the served prompt (prompt ends ",
         tail.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace),
         "); such a line cannot be trained on or scored");
  }
  out.output_start = prompt.output_start;
  out.answer_start = prompt_ids.size();
  return out;
}

}  // namespace deepinfer::api
