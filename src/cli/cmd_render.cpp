// `deepinfer render`: Chat Completions request bodies -> the exact prompt text and token ids the
// server would run (the same parse_chat_completions_request, render_prompt and PromptEncoder), so
// that training data and serving agree byte for byte (tools/train/).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/prompt_markers.h"
#include "api/prompt_renderer.h"
#include "api/prompt_tokens.h"
#include "api/request.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer render [--tokenizer FILE_OR_MODEL_DIR] [--input FILE] [--format v41|v4]\n"
    "                        [--train]\n"
    "\n"
    "Reads one Chat Completions request body (JSON) per line and writes, per line, the prompt\n"
    "the server renders for it: {\"text\": ..., \"ids\": [...], \"output_start\": ...}, where\n"
    "output_start is thinking, answer or tool_calls (where the model's output begins).\n"
    "A body without \"model\" is given one (the field names no checkpoint here).\n"
    "\n"
    "--train renders a conversation whose LAST message is the assistant answer to learn: the\n"
    "text and ids are the whole conversation with that answer rendered as history (its\n"
    "reasoning_content, content, tool calls and end-of-sentence), and \"answer_start\" is the\n"
    "index of the answer's first id. The ids before it are checked to be exactly the prompt\n"
    "the server renders for the conversation without the answer, so ids[answer_start:] is\n"
    "exactly what the model must generate after that prompt. A line where this does not hold\n"
    "(for example a required tool_choice, whose prompt ends inside the calls block) is an error.\n"
    "\n"
    "options:\n"
    "  --tokenizer PATH  tokenizer.json, or a model folder holding one\n"
    "                    (default: the bundled DeepSeek-V4.1 tokenizer)\n"
    "  --input FILE      read FILE instead of stdin\n"
    "  --format F        prompt format: v41 (default) or v4\n"
    "  --train           training rendering, see above\n"
    "\n"
    "exit codes: 0 done, 1 bad input line (named) or tokenizer file, 2 bad command line\n";

std::string utf8_json(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

const char* output_start_name(api::OutputStart start) {
  switch (start) {
    case api::OutputStart::Thinking: return "thinking";
    case api::OutputStart::Answer: return "answer";
    case api::OutputStart::ToolCalls: return "tool_calls";
  }
  return "answer";
}

nlohmann::ordered_json parse_json(const std::string& line, const std::string& where) {
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) fail(where, ": expected a JSON object (a Chat Completions request body)");
  if (!body.contains("model")) body["model"] = "render";
  return body;
}

api::Conversation parse_body(const nlohmann::ordered_json& body, const std::string& where) {
  try {
    return api::parse_chat_completions_request(body).conversation;
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
}

// --train: the request without its answer must be one the server accepts. The answer itself is
// parsed by the same adapter; a tool-calling answer gets placeholder results after it only so that
// the adapter's "calls need results" rule passes (they are not rendered).
api::Conversation parse_training_body(const nlohmann::ordered_json& body, const std::string& where) {
  const auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array() || messages->empty() ||
      !messages->back().is_object() || messages->back().value("role", "") != "assistant")
    fail(where, ": --train needs the last message to be the assistant answer");
  nlohmann::ordered_json asked_body = body;
  asked_body["messages"].erase(asked_body["messages"].size() - 1);
  api::Conversation conversation = parse_body(asked_body, where);
  nlohmann::ordered_json answered = body;
  if (const auto calls = messages->back().find("tool_calls"); calls != messages->back().end() && calls->is_array())
    for (const auto& call : *calls)
      answered["messages"].push_back({{"role", "tool"}, {"tool_call_id", call.value("id", "")}, {"content", ""}});
  const api::Conversation full = parse_body(answered, where);
  conversation.messages.push_back(full.messages.at(conversation.messages.size()));
  return conversation;
}

nlohmann::ordered_json render_line(const api::PromptEncoder& encoder, api::PromptFormat format,
                                   const std::string& line, const std::string& where, bool train) {
  const nlohmann::ordered_json body = parse_json(line, where);
  const api::Conversation conversation = train ? parse_training_body(body, where) : parse_body(body, where);
  nlohmann::ordered_json out;
  if (!train) {
    const api::RenderedPrompt prompt = api::render_prompt(conversation, format);
    out["text"] = prompt.text();
    out["ids"] = encoder.encode(prompt);
    out["output_start"] = output_start_name(prompt.output_start);
    return out;
  }
  const auto& messages = conversation.messages;
  if (messages.empty() || messages.back().role != api::Role::Assistant || messages.back().prefix)
    fail(where, ": --train needs the last message to be the assistant answer (not a prefix)");
  api::Conversation asked = conversation;
  asked.messages.pop_back();
  const api::RenderedPrompt prompt = api::render_prompt(asked, format);
  // A conversation ending in an assistant turn renders that turn, then the next turn's generation
  // opener (`<｜Assistant｜><think>`): the answer ends at the first end-of-sentence marker after
  // the prompt's pieces, and nothing after it is trained on.
  api::RenderedPrompt full = api::render_prompt(conversation, format);
  for (std::size_t i = prompt.pieces.size() > 0 ? prompt.pieces.size() - 1 : 0; i < full.pieces.size(); ++i) {
    if (full.pieces[i].is_marker && full.pieces[i].text == api::markers::kEos) {
      full.pieces.resize(i + 1);
      break;
    }
  }
  const std::vector<TokenId> full_ids = encoder.encode(full);
  const std::vector<TokenId> prompt_ids = encoder.encode(prompt);
  const std::string full_text = full.text();
  const std::string prompt_text = prompt.text();
  const bool ids_prefix = prompt_ids.size() < full_ids.size() &&
                          std::equal(prompt_ids.begin(), prompt_ids.end(), full_ids.begin());
  if (!ids_prefix || full_text.compare(0, prompt_text.size(), prompt_text) != 0)
    fail(where, ": the answer rendered as history does not continue the served prompt (prompt ends ",
         utf8_json(prompt_text.substr(prompt_text.size() > 40 ? prompt_text.size() - 40 : 0)),
         "); such a line cannot be trained on");
  out["text"] = full_text;
  out["ids"] = full_ids;
  out["output_start"] = output_start_name(prompt.output_start);
  out["answer_start"] = prompt_ids.size();
  return out;
}

}  // namespace

int run_render(const std::vector<std::string>& argv) {
  try {
    Args args(argv, {"--help", "--train"}, {"--tokenizer", "--input", "--format"});
    if (args.has("--help")) {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (!args.positionals().empty()) throw UsageError{"unexpected argument " + args.positionals().front()};
    const std::string format_name = args.get("--format").value_or("v41");
    if (format_name != "v41" && format_name != "v4") throw UsageError{"--format: expected v41 or v4"};
    const api::PromptFormat format = format_name == "v4" ? api::PromptFormat::V4 : api::PromptFormat::V41;

    std::ifstream file;
    const std::optional<std::string> input = args.get("--input");
    if (input) {
      file.open(*input, std::ios::binary);
      if (!file) fail(*input, ": cannot open");
    }
    std::istream& in = input ? static_cast<std::istream&>(file) : std::cin;
    const std::string source = input ? *input : std::string("stdin");

    api::PromptEncoder encoder(
        Tokenizer::from_file(args.get("--tokenizer").value_or(asset_dir() + "/tokenizer/deepseek_v41_tokenizer.json")),
        format);
    std::string line;
    for (std::size_t number = 1; std::getline(in, line); ++number) {
      const std::string where = source + " line " + std::to_string(number);
      std::cout << utf8_json(render_line(encoder, format, line, where, args.has("--train"))) << '\n';
    }
    return kExitOk;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer render: %s\n\n%s", e.message.c_str(), kUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer render: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli
