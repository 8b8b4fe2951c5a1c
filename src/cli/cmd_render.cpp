// `deepinfer render`: Chat Completions request bodies -> the exact prompt text and token ids the
// server would run (the same parse_chat_completions_request, render_prompt and PromptEncoder), so
// that training data and serving agree byte for byte (tools/train/).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/prompt_renderer.h"
#include "api/prompt_tokens.h"
#include "api/request.h"
#include "api/training_render.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json_output.h"
#include "core/error.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kRenderUsage =
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

nlohmann::ordered_json render_line(const api::PromptEncoder& encoder, api::PromptFormat format,
                                   const std::string& line, const std::string& where, bool train) {
  const nlohmann::ordered_json body = parse_json(line, where);
  nlohmann::ordered_json out;
  if (train) {
    const api::TrainingRender rendered = api::render_training(encoder, format, body, where);
    out["text"] = rendered.text;
    out["ids"] = rendered.ids;
    out["output_start"] = output_start_name(rendered.output_start);
    out["answer_start"] = rendered.answer_start;
    return out;
  }
  api::Conversation conversation;
  try {
    conversation = api::parse_chat_completions_request(body).conversation;
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  const api::RenderedPrompt prompt = api::render_prompt(conversation, format);
  out["text"] = prompt.text();
  out["ids"] = encoder.encode(prompt);
  out["output_start"] = output_start_name(prompt.output_start);
  return out;
}

}  // namespace

int run_render(const std::vector<std::string>& argv) {
  try {
    Args args(argv, {"--help", "--train"}, {"--tokenizer", "--input", "--format"});
    if (args.has("--help")) {
      std::fputs(kRenderUsage, stdout);
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
    std::fprintf(stderr, "deepinfer render: %s\n\n%s", e.message.c_str(), kRenderUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer render: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli
