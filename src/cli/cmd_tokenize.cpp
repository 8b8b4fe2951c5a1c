// `deepinfer tokenize`: text <-> token ids with a checkpoint's tokenizer (the bundled DeepSeek-V4.1
// one by default), for scripts and for checking prompts by hand.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json_output.h"
#include "core/error.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kTokenizeUsage =
    "usage: deepinfer tokenize [--tokenizer FILE_OR_MODEL_DIR] [--text TEXT] [--jsonl]\n"
    "                          [--add-bos] [--decode [--skip-special]]\n"
    "\n"
    "Encodes text read from stdin (byte for byte: `echo` adds a newline, `printf %s` does not)\n"
    "and prints its token ids as a JSON array. No BOS token is added unless --add-bos.\n"
    "\n"
    "options:\n"
    "  --tokenizer PATH  tokenizer.json, or a model folder holding one\n"
    "                    (default: the bundled DeepSeek-V4.1 tokenizer)\n"
    "  --text TEXT       encode TEXT instead of reading stdin\n"
    "  --jsonl           each input line is a JSON string; print one id array per line\n"
    "  --add-bos         put the tokenizer's BOS id first\n"
    "  --decode          the way back: read a JSON array of ids (with --jsonl: one per line)\n"
    "                    and print the text (with --jsonl: one JSON string per line)\n"
    "  --skip-special    with --decode: leave out special tokens\n"
    "\n"
    "exit codes: 0 done, 1 bad input or tokenizer file, 2 bad command line\n";

std::vector<TokenId> encode(const Tokenizer& tokenizer, std::string_view text, bool add_bos) {
  std::vector<TokenId> ids;
  if (add_bos) {
    auto bos = tokenizer.bos_id();
    if (!bos) fail("--add-bos: this tokenizer has no BOS token");
    ids.push_back(*bos);
  }
  auto encoded = tokenizer.encode(text);
  ids.insert(ids.end(), encoded.begin(), encoded.end());
  return ids;
}

std::vector<TokenId> parse_ids(const std::string& text, const std::string& where) {
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) fail(where, ": expected a JSON array of token ids");
  std::vector<TokenId> ids;
  for (const auto& id : parsed) {
    if (!id.is_number_integer()) fail(where, ": token ids must be integers, got ", id.dump());
    auto value = id.get<int64_t>();
    if (value < 0 || value > INT32_MAX) fail(where, ": token id ", value, " is out of range");
    ids.push_back(static_cast<TokenId>(value));
  }
  return ids;
}

int run_lines(const Tokenizer& tokenizer, const Args& args) {
  std::string line;
  for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
    std::string where = "stdin line " + std::to_string(number);
    if (args.has("--decode")) {
      auto ids = parse_ids(line, where);
      std::cout << utf8_json(tokenizer.decode(ids, args.has("--skip-special"))) << '\n';
    } else {
      nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
      if (!parsed.is_string()) fail(where, ": expected a JSON string");
      std::cout << nlohmann::json(encode(tokenizer, parsed.get<std::string>(), args.has("--add-bos"))).dump()
                << '\n';
    }
  }
  return kExitOk;
}

}  // namespace

int run_tokenize(const std::vector<std::string>& argv) {
  try {
    Args args(argv, {"--help", "--jsonl", "--add-bos", "--decode", "--skip-special"}, {"--tokenizer", "--text"});
    if (args.has("--help")) {
      std::fputs(kTokenizeUsage, stdout);
      return kExitOk;
    }
    if (!args.positionals().empty()) throw UsageError{"unexpected argument " + args.positionals().front()};
    if (args.has("--skip-special") && !args.has("--decode")) throw UsageError{"--skip-special needs --decode"};
    if (args.get("--text") && args.has("--jsonl")) throw UsageError{"--text and --jsonl exclude each other"};

    Tokenizer tokenizer = Tokenizer::from_file(
        args.get("--tokenizer").value_or(asset_dir() + "/tokenizer/deepseek_v41_tokenizer.json"));
    if (args.has("--jsonl")) return run_lines(tokenizer, args);

    std::string input = args.get("--text").value_or(
        std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()));
    if (args.has("--decode")) {
      std::cout << tokenizer.decode(parse_ids(input, args.get("--text") ? "--text" : "stdin"),
                                    args.has("--skip-special"));
    } else {
      std::cout << nlohmann::json(encode(tokenizer, input, args.has("--add-bos"))).dump() << '\n';
    }
    return kExitOk;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer tokenize: %s\n\n%s", e.message.c_str(), kTokenizeUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer tokenize: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli
