// Encode throughput of deepinfer::Tokenizer on one thread, measured the same way as
// bench/tokenizer_peer.mjs measures the Hugging Face library, with the same one-line JSON output.
//
//   tokenizer_throughput --corpus build/bench/tokenizer_corpus.jsonl [--tokenizer FILE] [--reps 5]
//                        [--expect-tokens N] [--expect-checksum N]
//
// The corpus holds one JSON string per line. Given the peer's total token count and id checksum, the
// run fails unless both match, so the two speeds are for the same work.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/tokenizer/tokenizer.h"

// CMake defines it for every bench; the fallback lets a bare compile from the repository root work.
#ifndef DEEPINFER_ASSET_DIR
#define DEEPINFER_ASSET_DIR "assets"
#endif

namespace {

struct Options {
  std::string tokenizer = DEEPINFER_ASSET_DIR "/tokenizer/deepseek_v41_tokenizer.json";
  std::string corpus;
  int reps = 5;
  std::optional<std::uint64_t> expect_tokens;
  std::optional<std::uint32_t> expect_checksum;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "tokenizer_throughput: " << problem << "\n"
            << "usage: tokenizer_throughput --corpus FILE [--tokenizer FILE] [--reps N]"
               " [--expect-tokens N] [--expect-checksum N]\n";
  std::exit(2);
}

std::uint64_t parse_number(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    const unsigned long long value = std::stoull(text, &used);
    if (used != text.size()) usage(flag + " wants a number, got '" + text + "'");
    return value;
  } catch (const std::exception&) {
    usage(flag + " wants a number, got '" + text + "'");
  }
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--tokenizer") {
      options.tokenizer = value;
    } else if (flag == "--corpus") {
      options.corpus = value;
    } else if (flag == "--reps") {
      options.reps = static_cast<int>(parse_number(flag, value));
    } else if (flag == "--expect-tokens") {
      options.expect_tokens = parse_number(flag, value);
    } else if (flag == "--expect-checksum") {
      options.expect_checksum = static_cast<std::uint32_t>(parse_number(flag, value));
    } else {
      usage("unknown option " + flag);
    }
  }
  if (options.corpus.empty()) usage("missing --corpus");
  if (options.reps < 1) usage("--reps must be at least 1");
  return options;
}

std::vector<std::string> read_documents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) usage("cannot open corpus " + path);
  std::vector<std::string> documents;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    try {
      documents.push_back(nlohmann::json::parse(line).get<std::string>());
    } catch (const std::exception& e) {
      usage(path + " line " + std::to_string(number) + " is not a JSON string: " + e.what());
    }
  }
  return documents;
}

// FNV-1a over each id's four little-endian bytes, in corpus order: the peer computes the same.
std::uint32_t add_to_checksum(std::uint32_t hash, const std::vector<deepinfer::TokenId>& ids) {
  for (const deepinfer::TokenId id : ids) {
    const auto bits = static_cast<std::uint32_t>(id);
    for (int shift = 0; shift < 32; shift += 8) {
      hash = (hash ^ ((bits >> shift) & 0xffu)) * 16777619u;
    }
  }
  return hash;
}

double process_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

std::string tail_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  const std::vector<std::string> documents = read_documents(options.corpus);
  std::uint64_t corpus_bytes = 0;
  for (const std::string& document : documents) corpus_bytes += document.size();

  try {
    const deepinfer::Tokenizer tokenizer = deepinfer::Tokenizer::from_file(options.tokenizer);

    // Untimed first pass, as in the peer: warms caches, gives the count and checksum to compare.
    std::uint64_t total_tokens = 0;
    std::uint32_t checksum = 0x811c9dc5u;
    for (const std::string& document : documents) {
      const std::vector<deepinfer::TokenId> ids = tokenizer.encode(document);
      total_tokens += ids.size();
      checksum = add_to_checksum(checksum, ids);
    }
    if (options.expect_tokens && *options.expect_tokens != total_tokens) {
      std::cerr << "tokenizer_throughput: " << total_tokens << " tokens, the library made " << *options.expect_tokens
                << ": not the same work, no comparison\n";
      return 1;
    }
    if (options.expect_checksum && *options.expect_checksum != checksum) {
      std::cerr << "tokenizer_throughput: id checksum " << checksum << ", the library's " << *options.expect_checksum
                << ": the ids differ somewhere, no comparison\n";
      return 1;
    }

    std::vector<double> rates;
    std::size_t sink = 0;  // keeps the encodes observable
    const double cpu_start = process_cpu_seconds();
    const auto wall_start = std::chrono::steady_clock::now();
    for (int rep = 0; rep < options.reps; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      for (const std::string& document : documents) sink += tokenizer.encode(document).size();
      const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
      rates.push_back(static_cast<double>(corpus_bytes) / 1e6 / seconds.count());
    }
    const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - wall_start;
    const double cpu = process_cpu_seconds() - cpu_start;
    if (sink != total_tokens * static_cast<std::size_t>(options.reps)) {
      std::cerr << "tokenizer_throughput: timed passes made " << sink << " tokens in all, expected "
                << total_tokens * static_cast<std::uint64_t>(options.reps) << "\n";
      return 1;
    }

    std::vector<double> sorted = rates;
    std::sort(sorted.begin(), sorted.end());
    nlohmann::json report = {
        {"impl", "deepinfer"},
        {"tokenizer", tail_name(options.tokenizer)},
        {"documents", documents.size()},
        {"corpus_bytes", corpus_bytes},
        {"reps", options.reps},
        {"median_mb_per_s", sorted[sorted.size() / 2]},
        {"mb_per_s", rates},
        {"total_tokens", total_tokens},
        {"ids_fnv1a32", checksum},
        {"cpu_per_wall", cpu / wall.count()},
    };
    std::cout << report.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_throughput: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
