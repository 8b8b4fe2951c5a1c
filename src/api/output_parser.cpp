#include "api/output_parser.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "api/dsml_tags.h"

namespace deepinfer::api {
namespace {

// A literal with its KMP failure table, built once per parser.
struct Pattern {
  std::string text;
  std::vector<std::size_t> failure;  // failure[i]: longest proper border of text[0..i]

  explicit Pattern(std::string_view literal) : text(literal), failure(literal.size(), 0) {
    std::size_t border = 0;
    for (std::size_t i = 1; i < text.size(); ++i) {
      while (border > 0 && text[i] != text[border]) border = failure[border - 1];
      if (text[i] == text[border]) ++border;
      failure[i] = border;
    }
  }

  // Length of the longest prefix of `text` that ends the input, after one more byte.
  std::size_t advance(std::size_t matched, char byte) const {
    if (matched == text.size()) matched = failure[matched - 1];
    while (matched > 0 && text[matched] != byte) matched = failure[matched - 1];
    if (text[matched] == byte) ++matched;
    return matched;
  }
};

// Recognises one marker in a byte stream and says how many trailing bytes may still belong to it.
class Matcher {
 public:
  enum class Kind {
    literal,                // the pattern
    newlines_then_literal,  // any run of '\n' (possibly empty) directly followed by the pattern
    leading_newline,        // a '\n' as the stage's first byte (no pattern)
  };

  Matcher(Kind kind, const Pattern* pattern) : kind_(kind), pattern_(pattern) {}

  // True when the marker completes with this byte.
  bool feed(char byte) {
    switch (kind_) {
      case Kind::literal:
        matched_ = pattern_->advance(matched_, byte);
        return matched_ == pattern_->text.size();
      case Kind::newlines_then_literal: {
        if (matched_ == 0 && byte == '\n') {
          ++newlines_;
          return false;
        }
        const std::size_t next = pattern_->advance(matched_, byte);
        // A restarted partial match is no longer adjacent to the newlines counted before it.
        if (next <= matched_) newlines_ = (next == 0 && byte == '\n') ? 1 : 0;
        matched_ = next;
        return matched_ == pattern_->text.size();
      }
      case Kind::leading_newline:
        if (!at_stage_start_) return false;
        at_stage_start_ = false;
        matched_ = byte == '\n' ? 1 : 0;
        return matched_ == 1;
    }
    return false;
  }

  // Trailing input bytes that are (a prefix of) this marker.
  std::size_t held() const { return kind_ == Kind::newlines_then_literal ? matched_ + newlines_ : matched_; }

 private:
  Kind kind_;
  const Pattern* pattern_;
  std::size_t matched_ = 0;
  std::size_t newlines_ = 0;
  bool at_stage_start_ = true;
};

enum class Stage {
  common,          // answer text
  json,            // inside JSON (json_output)
  matched_json,    // after a closing fence (json_output)
  tool_calls,      // inside a DSML calls block, between invokes
  tool_name,       // inside invoke name="..."
  tool_arguments,  // inside an invoke, between parameters
  param_name,      // inside parameter name="..."
  param_type,      // inside string="..."
  param_value,     // a parameter's value
  reasoning,       // inside <think>
  finished,        // after the calls block or a stop string: nothing more is output
};

// What happens to matched marker bytes.
enum class MatchAction {
  skip,
  stop_sequence,
  json_open_label,  // the matched "{" or "[" is the JSON's first character
  tool_call_begin,
  tool_name_end,
  param_begin,       // "{" before the first parameter, ", " before the others
  param_name_end,    // the key as a JSON string, then ": "
  string_value_begin,
  param_value_end,   // '"' closes a string value
  arguments_end,     // "}" ("{}" when there were no parameters)
};

// What happens to bytes that match no marker.
enum class TextAction { content, to_space, reasoning, tool_name, param_name, param_value, skip };

struct Branch {
  Matcher matcher;
  Stage next;
  bool next_leading;
  MatchAction action;
};

void append_json_escaped(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
}

}  // namespace

struct OutputParser::State {
  OutputParsingOptions options;
  Pattern reasoning_end{dsml::kReasoningEnd};
  Pattern open_prefix{dsml::kOpenPrefix};
  Pattern close_prefix{dsml::kClosePrefix};
  Pattern calls_end_v41{dsml::kCallsEndV41};
  Pattern calls_end_v4{dsml::kCallsEndV4};
  Pattern invoke_name{dsml::kInvokeName};
  Pattern parameter_name{dsml::kParameterName};
  Pattern string_true{dsml::kStringTrue};
  Pattern string_false{dsml::kStringFalse};
  Pattern quote{"\""};
  Pattern fence_json{"```json\n"};
  Pattern fence_bare{"```\n"};
  Pattern brace{"{"};
  Pattern bracket{"["};
  Pattern json_end{"\n```"};
  std::vector<Pattern> stops;

  Stage stage = Stage::common;
  bool leading = true;       // stage-specific: first parameter / leading newlines still dropped
  bool string_value = false;  // param_value: the value is a JSON string
  std::vector<Branch> branches;
  TextAction text_action = TextAction::content;
  std::string held;  // bytes that may still be part of a marker

  std::string tool_name;
  std::string param_name;
  int tool_calls = 0;
  bool stopped = false;
  std::string stop_sequence;

  std::vector<OutputEvent>* out = nullptr;
  bool last_event_extendable = false;  // the last event in *out may take more text of its kind
  bool in_space_run = false;           // json_output: a run of non-JSON text already became " "

  explicit State(OutputParsingOptions parsing_options) : options(std::move(parsing_options)) {
    for (const std::string& stop : options.stop_sequences)
      if (!stop.empty()) stops.emplace_back(stop);
    if (options.start_in_tool_calls)
      enter(Stage::tool_calls, false);
    else if (options.thinking)
      enter(Stage::reasoning, true);
    else
      enter(Stage::common, true);
  }

  void add(const Pattern& pattern, Stage next, bool next_leading, MatchAction action,
           Matcher::Kind kind = Matcher::Kind::literal) {
    branches.push_back(Branch{Matcher(kind, &pattern), next, next_leading, action});
  }
  void add_stop_sequences() {
    for (const Pattern& stop : stops) add(stop, Stage::finished, false, MatchAction::stop_sequence);
  }
  void add_tool_call_block_start() {
    if (options.parse_tool_calls)
      add(open_prefix, Stage::tool_calls, false, MatchAction::skip,
          Matcher::Kind::newlines_then_literal);
  }
  void add_leading_newline(Stage stage_again) {
    branches.push_back(Branch{Matcher(Matcher::Kind::leading_newline, nullptr), stage_again, true,
                              MatchAction::skip});
  }

  // Branch order is priority order: the first branch to complete on a byte wins.
  void enter(Stage next, bool next_leading) {
    stage = next;
    leading = next_leading;
    branches.clear();
    switch (stage) {
      case Stage::common:
        if (options.json_output) {
          add(fence_json, Stage::json, false, MatchAction::skip);
          add(fence_bare, Stage::json, false, MatchAction::skip);
          add(brace, Stage::json, false, MatchAction::json_open_label);
          add(bracket, Stage::json, false, MatchAction::json_open_label);
        } else {
          add_stop_sequences();
        }
        add_tool_call_block_start();
        if (leading) add_leading_newline(Stage::common);
        // A stray </think> in the answer is dropped.
        add(reasoning_end, Stage::common, false, MatchAction::skip);
        text_action = options.json_output ? TextAction::to_space : TextAction::content;
        break;
      case Stage::json:
        add_stop_sequences();
        add(json_end, Stage::matched_json, false, MatchAction::skip);
        text_action = TextAction::content;
        break;
      case Stage::matched_json:
        add_tool_call_block_start();
        text_action = TextAction::to_space;
        break;
      case Stage::tool_calls:
        add(invoke_name, Stage::tool_name, false, MatchAction::tool_call_begin);
        add(calls_end_v4, Stage::finished, false, MatchAction::skip);
        add(calls_end_v41, Stage::finished, false, MatchAction::skip);
        text_action = TextAction::skip;
        break;
      case Stage::tool_name:
        add(quote, Stage::tool_arguments, true, MatchAction::tool_name_end);
        text_action = TextAction::tool_name;
        break;
      case Stage::tool_arguments:
        add(parameter_name, Stage::param_name, false, MatchAction::param_begin);
        add(close_prefix, Stage::tool_calls, false, MatchAction::arguments_end);
        text_action = TextAction::skip;
        break;
      case Stage::param_name:
        add(quote, Stage::param_type, false, MatchAction::param_name_end);
        text_action = TextAction::param_name;
        break;
      case Stage::param_type:
        add(string_true, Stage::param_value, true, MatchAction::string_value_begin);
        add(string_false, Stage::param_value, false, MatchAction::skip);
        text_action = TextAction::skip;
        break;
      case Stage::param_value:
        add(close_prefix, Stage::tool_arguments, false, MatchAction::param_value_end);
        text_action = TextAction::param_value;
        break;
      case Stage::reasoning:
        add_tool_call_block_start();
        if (leading) add_leading_newline(Stage::reasoning);
        add(reasoning_end, Stage::common, true, MatchAction::skip,
            Matcher::Kind::newlines_then_literal);
        text_action = TextAction::reasoning;
        break;
      case Stage::finished:
        text_action = TextAction::skip;
        break;
    }
  }

  void emit_text(OutputEvent::Kind kind, std::string_view text, int index = -1) {
    if (text.empty()) return;
    in_space_run = false;
    if (last_event_extendable && !out->empty() && out->back().kind == kind &&
        out->back().tool_index == index) {
      out->back().text += text;
      return;
    }
    out->push_back(OutputEvent{kind, std::string(text), index});
    last_event_extendable = true;
  }
  // Markup-derived text is a delta of its own, so the argument deltas follow the JSON's tokens.
  void emit_label(OutputEvent::Kind kind, std::string text, int index) {
    in_space_run = false;
    out->push_back(OutputEvent{kind, std::move(text), index});
    last_event_extendable = false;
  }
  int current_tool() const { return tool_calls - 1; }

  void apply_text(std::string_view bytes) {
    if (bytes.empty()) return;
    switch (text_action) {
      case TextAction::content: emit_text(OutputEvent::Kind::content_delta, bytes); break;
      case TextAction::reasoning: emit_text(OutputEvent::Kind::reasoning_delta, bytes); break;
      case TextAction::to_space:
        if (!in_space_run) {
          emit_text(OutputEvent::Kind::content_delta, " ");
          in_space_run = true;
        }
        break;
      case TextAction::tool_name: tool_name += bytes; break;
      case TextAction::param_name: param_name += bytes; break;
      case TextAction::param_value:
        if (string_value) {
          std::string escaped;
          append_json_escaped(escaped, bytes);
          emit_text(OutputEvent::Kind::tool_call_arguments_delta, escaped, current_tool());
        } else {
          emit_text(OutputEvent::Kind::tool_call_arguments_delta, bytes, current_tool());
        }
        break;
      case TextAction::skip: break;
    }
  }

  void apply_match(MatchAction action, std::string_view marker) {
    constexpr auto arguments = OutputEvent::Kind::tool_call_arguments_delta;
    in_space_run = false;
    switch (action) {
      case MatchAction::skip: break;
      case MatchAction::stop_sequence:
        stopped = true;
        stop_sequence = marker;
        break;
      case MatchAction::json_open_label: emit_text(OutputEvent::Kind::content_delta, marker); break;
      case MatchAction::tool_call_begin: tool_name.clear(); break;
      case MatchAction::tool_name_end:
        ++tool_calls;
        emit_label(OutputEvent::Kind::tool_call_start, std::move(tool_name), current_tool());
        tool_name.clear();
        break;
      case MatchAction::param_begin:
        emit_label(arguments, leading ? "{" : ", ", current_tool());
        param_name.clear();
        break;
      case MatchAction::param_name_end: {
        std::string key = "\"";
        append_json_escaped(key, param_name);
        key += '"';
        emit_label(arguments, std::move(key), current_tool());
        emit_label(arguments, ": ", current_tool());
        break;
      }
      case MatchAction::string_value_begin: emit_label(arguments, "\"", current_tool()); break;
      case MatchAction::param_value_end:
        if (string_value) emit_label(arguments, "\"", current_tool());
        break;
      case MatchAction::arguments_end:
        emit_label(arguments, leading ? "{}" : "}", current_tool());
        break;
    }
  }

  void feed_byte(char byte) {
    held.push_back(byte);
    for (std::size_t i = 0; i < branches.size(); ++i) {
      if (!branches[i].matcher.feed(byte)) continue;
      const std::size_t marker_size = branches[i].matcher.held();
      const Stage next = branches[i].next;
      const bool next_leading = branches[i].next_leading;
      const MatchAction action = branches[i].action;
      const std::string bytes = std::move(held);
      held.clear();
      apply_text(std::string_view(bytes).substr(0, bytes.size() - marker_size));
      const bool opens_string = action == MatchAction::string_value_begin;
      apply_match(action, std::string_view(bytes).substr(bytes.size() - marker_size));
      enter(next, next_leading);
      if (next == Stage::param_value) string_value = opens_string;
      return;
    }
  }

  void flush_unheld() {
    std::size_t keep = 0;
    for (const Branch& branch : branches) keep = std::max(keep, branch.matcher.held());
    keep = std::min(keep, held.size());
    apply_text(std::string_view(held).substr(0, held.size() - keep));
    held.erase(0, held.size() - keep);
  }
};

OutputParser::OutputParser(OutputParsingOptions options)
    : state_(std::make_unique<State>(std::move(options))) {}
OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

std::vector<OutputEvent> OutputParser::feed(std::string_view text) {
  std::vector<OutputEvent> events;
  state_->out = &events;
  state_->last_event_extendable = false;
  for (const char byte : text) state_->feed_byte(byte);
  state_->flush_unheld();
  state_->out = nullptr;
  return events;
}

std::vector<OutputEvent> OutputParser::finish() {
  std::vector<OutputEvent> events;
  state_->out = &events;
  state_->last_event_extendable = false;
  const std::string rest = std::move(state_->held);
  state_->held.clear();
  state_->apply_text(rest);
  state_->branches.clear();
  state_->out = nullptr;
  return events;
}

bool OutputParser::stopped() const { return state_->stopped; }
const std::string& OutputParser::matched_stop_sequence() const { return state_->stop_sequence; }
bool OutputParser::in_reasoning() const { return state_->stage == Stage::reasoning; }
int OutputParser::tool_call_count() const { return state_->tool_calls; }

}  // namespace deepinfer::api
