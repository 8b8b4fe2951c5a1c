// `deepinfer grammar`: compile a constraint (JSON schema, regex, GBNF, Lark) the way the server
// would, print what it cost, and with --check walk instances through it token by token with the
// model's tokenizer, timing every mask: llguidance's and XGrammar's test harnesses, for grammar
// work without a server.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "grammar/tokenizer_vocabulary.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kGrammarUsage =
    "usage: deepinfer grammar (--json-schema FILE | --regex TEXT | --ebnf FILE | --lark FILE)\n"
    "                         [--tokenizer PATH] [--check FILE.jsonl [--pretty]] [--strict]\n"
    "                         [--lenient] [--dump]\n"
    "\n"
    "Compiles the constraint and prints one JSON line: compile time, rules and symbols, and\n"
    "for a lenient schema the keywords not enforced (not_enforced: pointer and message). A\n"
    "constraint the server would refuse prints the error (what the server answers 400 with)\n"
    "and exits 1.\n"
    "\n"
    "options:\n"
    "  --json-schema FILE  a JSON schema (response_format json_schema)\n"
    "  --regex TEXT        a regular expression the whole output must match\n"
    "  --ebnf FILE         a GBNF grammar (llama.cpp's syntax; start rule `root`)\n"
    "  --lark FILE         a Lark-style grammar (llguidance's syntax; start rule `start`)\n"
    "  --tokenizer PATH    tokenizer.json or a model folder (default: the bundled DeepSeek-V4.1 one)\n"
    "  --check FILE        one instance a line (a JSON value for a schema; a JSON string for the\n"
    "                      others): walk its tokens through the matcher and print, per line,\n"
    "                      {\"accepted\", \"rejected_at_byte\", \"mask_us\": [p50, p99]}\n"
    "  --pretty            with --check and a schema: indent the instance (json.dump(2))\n"
    "  --strict            a schema's objects allow no keys beyond `properties`\n"
    "  --lenient           do not enforce schema keywords that cannot be, instead of refusing\n"
    "                      (as the schema's own \"x-guidance\": {\"lenient\": true} does)\n"
    "  --dump              print the compiled grammar's rules to stderr\n"
    "\n"
    "exit codes: 0 done, 1 the constraint is refused or a file is unreadable, 2 bad command line\n";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(q * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

// One instance through the matcher: every token's mask timed, then the token checked against it.
nlohmann::json check_line(const std::shared_ptr<const grammar::CompiledGrammar>& compiled,
                          const std::shared_ptr<const grammar::Vocabulary>& vocabulary, const Tokenizer& tokenizer,
                          const std::string& text) {
  grammar::Matcher matcher(compiled, vocabulary);
  std::vector<uint64_t> mask(static_cast<std::size_t>((vocabulary->size() + 63) / 64));
  std::vector<double> mask_us;
  const auto allowed = [&](int32_t id) { return (mask[static_cast<std::size_t>(id) / 64] >> (id % 64)) & 1; };
  const auto timed_mask = [&] {
    const auto start = std::chrono::steady_clock::now();
    matcher.fill_mask(mask);
    mask_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  };
  int64_t consumed = 0;
  nlohmann::json rejected_at = nullptr;
  for (TokenId id : tokenizer.encode_plain(text)) {
    timed_mask();
    if (!allowed(id)) {
      int64_t within = 0;
      grammar::Matcher probe = grammar::Matcher(compiled, nullptr);
      probe.accept_bytes(text.substr(0, static_cast<std::size_t>(consumed)));
      probe.accept_bytes(tokenizer.token_bytes(id), &within);
      rejected_at = consumed + within;
      break;
    }
    matcher.accept_token(id);
    consumed += static_cast<int64_t>(tokenizer.token_bytes(id).size());
  }
  bool accepted = rejected_at.is_null();
  if (accepted) {
    timed_mask();
    accepted = vocabulary->eos() >= 0 ? allowed(vocabulary->eos()) != 0 : matcher.accepting();
    if (!accepted) rejected_at = consumed;  // the output stops short of a whole sentence
  }
  return {{"accepted", accepted},
          {"rejected_at_byte", rejected_at},
          {"mask_us", {percentile(mask_us, 0.5), percentile(mask_us, 0.99)}}};
}

}  // namespace

int run_grammar(const std::vector<std::string>& argv) {
  try {
    Args args(argv, {"--help", "--pretty", "--strict", "--lenient", "--dump"},
              {"--json-schema", "--regex", "--ebnf", "--lark", "--tokenizer", "--check"});
    if (args.has("--help")) {
      std::fputs(kGrammarUsage, stdout);
      return kExitOk;
    }
    if (!args.positionals().empty()) throw UsageError{"unexpected argument " + args.positionals().front()};
    const int sources = static_cast<int>(args.get("--json-schema").has_value()) +
                        static_cast<int>(args.get("--regex").has_value()) +
                        static_cast<int>(args.get("--ebnf").has_value()) +
                        static_cast<int>(args.get("--lark").has_value());
    if (sources != 1) throw UsageError{"give exactly one of --json-schema, --regex, --ebnf, --lark"};
    if (args.has("--pretty") && !args.get("--json-schema")) throw UsageError{"--pretty needs --json-schema"};

    const auto start = std::chrono::steady_clock::now();
    grammar::Grammar compiled_grammar;
    const bool schema = args.get("--json-schema").has_value();
    try {
      if (schema) {
        // Ordered: a schema's property order is the order the grammar asks for.
        const nlohmann::ordered_json parsed =
            nlohmann::ordered_json::parse(read_file(*args.get("--json-schema")), nullptr, false);
        if (parsed.is_discarded()) fail(*args.get("--json-schema"), ": not JSON");
        grammar::JsonSchemaOptions options;
        options.strict = args.has("--strict");
        options.lenient = args.has("--lenient");
        compiled_grammar = grammar::compile_json_schema(parsed, options);
      } else if (args.get("--regex")) {
        compiled_grammar = grammar::compile_regex(*args.get("--regex"));
      } else if (args.get("--ebnf")) {
        compiled_grammar = grammar::compile_gbnf(read_file(*args.get("--ebnf")));
      } else {
        compiled_grammar = grammar::compile_lark(read_file(*args.get("--lark")));
      }
    } catch (const grammar::CompileError& error) {
      std::fprintf(stderr, "deepinfer grammar: refused: %s\n", error.what());
      return kExitFailure;
    }
    const int64_t symbols = compiled_grammar.size();
    const int32_t rules = compiled_grammar.rule_count();
    if (args.has("--dump")) std::fputs(compiled_grammar.to_string().c_str(), stderr);
    const auto compiled = grammar::prepare(std::move(compiled_grammar));
    const double compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    nlohmann::json summary{{"compile_ms", compile_ms}, {"rules", rules}, {"symbols", symbols}};
    // What a lenient schema asked for and the grammar does not enforce.
    if (!grammar::relaxations(*compiled).empty()) {
      summary["not_enforced"] = nlohmann::json::array();
      for (const grammar::Grammar::Relaxation& relaxation : grammar::relaxations(*compiled))
        summary["not_enforced"].push_back({{"pointer", relaxation.where}, {"message", relaxation.what}});
    }
    std::cout << summary.dump() << '\n';

    if (const auto check = args.get("--check")) {
      const Tokenizer tokenizer = Tokenizer::from_file(
          args.get("--tokenizer").value_or(asset_dir() + "/tokenizer/deepseek_v41_tokenizer.json"));
      const auto vocabulary = grammar::vocabulary_for(tokenizer);
      std::ifstream in(*check);
      if (!in) fail("cannot read ", *check);
      std::string line;
      for (std::size_t number = 1; std::getline(in, line); ++number) {
        // Ordered: the instance keeps its key order, which a schema's property order may constrain.
        const nlohmann::ordered_json instance = nlohmann::ordered_json::parse(line, nullptr, false);
        if (instance.is_discarded()) fail(*check, " line ", number, ": not JSON");
        std::string text;
        if (schema) text = instance.dump(args.has("--pretty") ? 2 : -1, ' ', false, nlohmann::json::error_handler_t::replace);
        else if (instance.is_string()) text = instance.get<std::string>();
        else fail(*check, " line ", number, ": expected a JSON string for a regex or grammar");
        std::cout << check_line(compiled, vocabulary, tokenizer, text).dump() << '\n';
      }
    }
    return kExitOk;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer grammar: %s\n\n%s", e.message.c_str(), kGrammarUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer grammar: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli
