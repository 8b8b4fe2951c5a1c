#include "api/prompt_renderer.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "api/dsml_tags.h"
#include "api/prompt_json.h"
#include "api/prompt_markers.h"

namespace deepinfer::api {
namespace {

using namespace std::string_view_literals;


// V4.1 effort prefix (recipe §1.4): low 50, max 100, everything else 75.
std::string v41_effort_prefix(std::optional<ReasoningEffort> effort) {
  int level = 75;
  if (effort == ReasoningEffort::Low) level = 50;
  if (effort == ReasoningEffort::Max) level = 100;
  return "Reasoning Effort: " + std::to_string(level) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

constexpr std::string_view kV4EffortHigh =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

constexpr std::string_view kV4EffortMax =
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every causal "
    "chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

// V4: nothing for low, MAX for max, HIGH otherwise (recipe §1.4).
std::string_view v4_effort_prefix(std::optional<ReasoningEffort> effort) {
  if (effort == ReasoningEffort::Low) return {};
  if (effort == ReasoningEffort::Max) return kV4EffortMax;
  return kV4EffortHigh;
}

constexpr std::string_view kJsonInstruction =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
    "{\"type\": \"json_object\"}";

class PromptBuilder {
 public:
  void marker(std::string_view spelling) { pieces_.push_back(PromptPiece{std::string(spelling), true}); }

  // Client-supplied text: never turned into markers.
  void text(std::string_view text) {
    if (text.empty()) return;
    if (!pieces_.empty() && !pieces_.back().is_marker) {
      pieces_.back().text += text;
    } else {
      pieces_.push_back(PromptPiece{std::string(text), false});
    }
  }

  void content(const Content& content) {
    for (const ContentPart& part : content) {
      if (part.kind == ContentPart::Kind::Image) {
        marker(markers::kImage);
      } else {
        text(part.text);
      }
    }
  }

  // The template's own text: marker spellings in it are markers (the tool prompt names <think>
  // and the DSML tags, which the official encoder tokenizes as control tokens).
  void template_text(std::string_view text) {
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t best = std::string_view::npos;
      std::string_view found;
      for (const markers::Marker& m : markers::kAll) {
        const std::size_t at = text.find(m.text, start);
        if (at < best) {
          best = at;
          found = m.text;
        }
      }
      if (best == std::string_view::npos) {
        this->text(text.substr(start));
        return;
      }
      this->text(text.substr(start, best - start));
      marker(found);
      start = best + found.size();
    }
  }

  std::vector<PromptPiece> take() { return std::move(pieces_); }

 private:
  std::vector<PromptPiece> pieces_;
};

std::string tools_prompt(const std::vector<ToolDefinition>& tools, PromptFormat format) {
  const dsml::TagNames tags = dsml::tag_names(format);
  const std::string open = "<｜DSML｜";
  const std::string close = "</｜DSML｜";
  std::string schemas;
  for (const ToolDefinition& tool : tools) {
    if (!schemas.empty()) schemas += '\n';
    nlohmann::ordered_json line = nlohmann::ordered_json::object();
    line["name"] = tool.name;
    line["description"] = tool.description;
    line["parameters"] = tool.parameters.is_null() ? nlohmann::ordered_json::object() : tool.parameters;
    schemas += python_json(line);
  }
  std::string prompt;
  prompt += "## Tools\n\nYou have access to a set of tools to help answer the user's question. ";
  prompt += "You can invoke tools by writing a \"" + open + std::string(tags.calls) +
            ">\" block like the following:\n\n";
  prompt += open + std::string(tags.calls) + ">\n";
  prompt += open + std::string(tags.invoke) + " name=\"$TOOL_NAME\">\n";
  prompt += open + std::string(tags.parameter) +
            " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE" + close +
            std::string(tags.parameter) + ">\n";
  prompt += "...\n";
  prompt += close + std::string(tags.invoke) + ">\n";
  prompt += open + std::string(tags.invoke) + " name=\"$TOOL_NAME2\">\n";
  prompt += "...\n";
  prompt += close + std::string(tags.invoke) + ">\n";
  prompt += close + std::string(tags.calls) + ">\n\n";
  prompt +=
      "String parameters should be specified as is and set `string=\"true\"`. For all other types "
      "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
      "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after </think> with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n";
  prompt += schemas;
  prompt +=
      "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
      "tool calls.\n";
  return prompt;
}

// Tool schemas are client text, so the tool prompt is split around them: template, schemas, template.
void append_tools_prompt(PromptBuilder& out, const std::vector<ToolDefinition>& tools,
                         PromptFormat format) {
  const std::string prompt = tools_prompt(tools, format);
  const std::string_view head_end = "### Available Tool Schemas\n\n";
  const std::string_view tail_start = "\n\nYou MUST strictly follow";
  const std::size_t head = prompt.find(head_end) + head_end.size();
  const std::size_t tail = prompt.rfind(tail_start);
  out.template_text(std::string_view(prompt).substr(0, head));
  out.text(std::string_view(prompt).substr(head, tail - head));
  out.template_text(std::string_view(prompt).substr(tail));
}

void append_calls_block(PromptBuilder& out, const std::vector<ToolCall>& calls, PromptFormat format) {
  const dsml::TagNames tags = dsml::tag_names(format);
  const std::string open = "<｜DSML｜";
  const std::string close = "</｜DSML｜";
  out.template_text(open + std::string(tags.calls) + ">\n");
  for (std::size_t k = 0; k < calls.size(); ++k) {
    if (k > 0) out.template_text("\n");
    out.template_text(open + std::string(tags.invoke) + " name=\"");
    out.text(calls[k].name);
    out.template_text("\">\n");
    const nlohmann::ordered_json arguments =
        nlohmann::ordered_json::parse(calls[k].arguments, nullptr, /*allow_exceptions=*/false);
    auto parameter = [&](std::string_view key, bool is_string, std::string_view value) {
      out.template_text(open + std::string(tags.parameter) + " name=\"");
      out.text(key);
      out.template_text(is_string ? "\" string=\"true\">" : "\" string=\"false\">");
      out.text(value);
      out.template_text(close + std::string(tags.parameter) + ">");
    };
    if (arguments.is_object()) {
      bool first = true;
      for (const auto& [key, value] : arguments.items()) {
        if (!first) out.template_text("\n");
        first = false;
        if (value.is_string()) {
          parameter(key, true, value.get_ref<const std::string&>());
        } else {
          parameter(key, false, python_json(value));
        }
      }
    } else {
      parameter("arguments", true, calls[k].arguments);
    }
    out.template_text("\n" + close + std::string(tags.invoke) + ">");
  }
  out.template_text("\n" + close + std::string(tags.calls) + ">");
}

void append_content(Content& to, const Content& from) {
  for (const ContentPart& part : from) {
    if (part.kind == ContentPart::Kind::Text && !to.empty() &&
        to.back().kind == ContentPart::Kind::Text) {
      to.back().text += part.text;
    } else {
      to.push_back(part);
    }
  }
}

void join_content(Content& to, const Content& from) {
  append_content(to, text_content("\n\n"));
  append_content(to, from);
}

// V4 has no system marker: leading system messages fold into one, later ones become user text.
std::vector<Message> fold_v4_system_messages(const std::vector<Message>& messages) {
  std::vector<Message> folded;
  bool seen_other = false;
  for (const Message& message : messages) {
    if (message.role != Role::System) {
      seen_other = true;
      folded.push_back(message);
      continue;
    }
    if (!seen_other) {
      if (folded.empty()) {
        folded.push_back(message);
      } else if (!plain_text(message.content).empty()) {
        if (plain_text(folded.front().content).empty()) {
          folded.front().content = message.content;
        } else {
          join_content(folded.front().content, message.content);
        }
      }
    } else if (!plain_text(message.content).empty()) {
      Message user = message;
      user.role = Role::User;
      folded.push_back(std::move(user));
    }
  }
  return folded;
}

std::vector<Message> merge_consecutive_users(std::vector<Message> messages) {
  std::vector<Message> merged;
  for (Message& message : messages) {
    if (message.role == Role::User && !merged.empty() && merged.back().role == Role::User) {
      join_content(merged.back().content, message.content);
    } else {
      merged.push_back(std::move(message));
    }
  }
  return merged;
}

// Within the user/tool run after a tool-calling assistant turn, tool results move into the order
// of the calls (stable; an unknown id ranks first); user messages keep their places.
void order_tool_results(std::vector<Message>& messages) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != Role::Assistant || messages[i].tool_calls.empty()) continue;
    const std::vector<ToolCall>& calls = messages[i].tool_calls;
    auto rank = [&](const Message& result) {
      for (std::size_t k = 0; k < calls.size(); ++k) {
        if (calls[k].id == result.tool_call_id) return k;
      }
      return std::size_t{0};
    };
    std::vector<std::size_t> slots;
    std::vector<Message> results;
    for (std::size_t j = i + 1;
         j < messages.size() && (messages[j].role == Role::User || messages[j].role == Role::Tool);
         ++j) {
      if (messages[j].role == Role::Tool) {
        slots.push_back(j);
        results.push_back(messages[j]);
      }
    }
    std::stable_sort(results.begin(), results.end(),
                     [&](const Message& a, const Message& b) { return rank(a) < rank(b); });
    for (std::size_t k = 0; k < slots.size(); ++k) messages[slots[k]] = std::move(results[k]);
  }
}

}  // namespace

std::string RenderedPrompt::text() const {
  std::string joined;
  for (const PromptPiece& piece : pieces) joined += piece.text;
  return joined;
}

RenderedPrompt render_prompt(const Conversation& conversation, PromptFormat format) {
  std::vector<Message> messages = format == PromptFormat::V4
                                      ? fold_v4_system_messages(conversation.messages)
                                      : conversation.messages;
  messages = merge_consecutive_users(std::move(messages));
  order_tool_results(messages);

  const bool has_tools =
      conversation.tool_choice != ToolChoice::None && !conversation.tools.empty();
  const bool json_mode = conversation.response_format == ResponseFormat::JsonObject;
  if ((has_tools || json_mode) && (messages.empty() || messages.front().role != Role::System)) {
    messages.insert(messages.begin(), Message{Role::System, {}, {}, {}, {}, false});
  }

  const bool thinking = conversation.thinking;
  std::string effort_prefix;
  if (thinking) {
    effort_prefix = format == PromptFormat::V41 ? v41_effort_prefix(conversation.reasoning_effort)
                                                : std::string(v4_effort_prefix(conversation.reasoning_effort));
  }

  PromptBuilder out;
  RenderedPrompt rendered;
  out.marker(markers::kBos);
  bool continued = false;  // the last message is a prefix the model continues
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Message& message = messages[i];
    const Role previous = i > 0 ? messages[i - 1].role : Role::System;
    const bool after_user_side = i > 0 && (previous == Role::User || previous == Role::Tool);
    if (i == 0) {
      if (format == PromptFormat::V41 && (!effort_prefix.empty() || message.role == Role::System)) {
        out.marker(markers::kSystem);
      }
      out.text(effort_prefix);
    }
    switch (message.role) {
      case Role::System:
        if (format == PromptFormat::V41 && i > 0) out.marker(markers::kSystem);
        out.content(message.content);
        if (i == 0 && has_tools) {
          out.text("\n\n");
          append_tools_prompt(out, conversation.tools, format);
        }
        if (i == 0 && json_mode) out.template_text(kJsonInstruction);
        break;
      case Role::User:
        if (after_user_side) {
          out.text("\n\n");
        } else {
          out.marker(markers::kUser);
        }
        out.content(message.content);
        break;
      case Role::Tool:
        if (after_user_side) {
          out.text("\n\n");
        } else {
          out.marker(markers::kUser);
        }
        out.text("<tool_result>");
        out.content(message.content);
        out.text("</tool_result>");
        break;
      case Role::LatestReminder:
        out.marker(markers::kLatestReminder);
        out.content(message.content);
        break;
      case Role::Assistant:
        out.marker(markers::kAssistant);
        if (message.prefix) {
          // Continuation (docs/API.md): the turn stays open, no end-of-sentence, no new turn.
          continued = true;
          const bool has_answer = !plain_text(message.content).empty();
          if (thinking) {
            out.marker(markers::kThinkStart);
            out.text(message.reasoning_content.value_or(""));
            if (has_answer) out.marker(markers::kThinkEnd);
          } else {
            out.marker(markers::kThinkEnd);
          }
          out.content(message.content);
          rendered.output_start =
              thinking && !has_answer ? OutputStart::Thinking : OutputStart::Answer;
          break;
        }
        if (thinking && i > 0) {
          out.marker(markers::kThinkStart);
          out.text(message.reasoning_content.value_or(""));
          out.marker(markers::kThinkEnd);
        } else {
          out.marker(markers::kThinkEnd);
        }
        out.content(message.content);
        if (!message.tool_calls.empty()) {
          out.text("\n\n");
          append_calls_block(out, message.tool_calls, format);
        }
        out.marker(markers::kEos);
        break;
    }
  }

  if (!continued) {
    out.marker(markers::kAssistant);
    out.marker(thinking ? markers::kThinkStart : markers::kThinkEnd);
    rendered.output_start = thinking ? OutputStart::Thinking : OutputStart::Answer;
    if (conversation.tool_choice == ToolChoice::Required && !conversation.tools.empty()) {
      out.text("\n\n");
      out.template_text("<｜DSML｜" + std::string(dsml::tag_names(format).calls) + ">\n");
      rendered.output_start = OutputStart::ToolCalls;
    }
  }
  rendered.pieces = out.take();
  return rendered;
}

}  // namespace deepinfer::api
