// Single-thread tokenizer throughput: load time, encode MB/s over a corpus of documents, and
// pathological long inputs. Usage:
//   tokenizer_bench [tokenizer.json] [corpus file: documents separated by NUL bytes]
// Without a corpus file a mixed corpus is generated (compare against the library with
// tools/tokenizer_bench_reference.mjs on the same file: --write-corpus PATH writes it).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::string> generated_corpus() {
  const std::vector<std::string> fragments = {
      "The quick brown fox jumps over the lazy dog. ", "It's what we'll do, isn't it? ",
      "In 2024, revenue grew 12.5% to $3,141,592. ", "def encode(self, text):\n    return self.model(text)\n",
      "for (int i = 0; i < n; ++i) { sum += a[i]; }\n", "深度学习模型的推理引擎需要高效的分词器。",
      "日本語のテキストとカタカナ、ひらがな。", "Привет, как дела? Всё хорошо. ", "Ünïcödé naïve café straße. ",
      "😀 👍🏽 emoji 👨‍👩‍👧 text. ", "\n\n", "    indented line\n", "\t tabs\tand  spaces  ",
      "<｜User｜>Hello<｜Assistant｜>", "مرحبا بالعالم ", "1234567890 ", "a=b+c*d/e-f%g^h|i&j~k\n"};
  std::mt19937 random(7);
  std::vector<std::string> documents;
  std::size_t total = 0;
  while (total < 4'000'000) {
    std::string document;
    const std::size_t size = 1000 + random() % 9000;
    while (document.size() < size) document += fragments[random() % fragments.size()];
    total += document.size();
    documents.push_back(std::move(document));
  }
  return documents;
}

std::vector<std::string> read_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<std::string> documents;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    documents.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return documents;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : DEEPINFER_ASSET_DIR "/tokenizer/deepseek_v41_tokenizer.json";
  std::vector<std::string> documents;
  if (argc > 3 && std::string(argv[2]) == "--write-corpus") {
    documents = generated_corpus();
    std::ofstream out(argv[3], std::ios::binary);
    for (const auto& document : documents) out << document << '\0';
    std::printf("wrote %zu documents to %s\n", documents.size(), argv[3]);
    return 0;
  }
  documents = argc > 2 ? read_corpus(argv[2]) : generated_corpus();

  auto start = Clock::now();
  const deepinfer::Tokenizer tokenizer = deepinfer::Tokenizer::from_file(path);
  std::printf("load %s: %.3f s\n", path.c_str(), seconds_since(start));

  std::size_t bytes = 0, tokens = 0;
  for (const auto& document : documents) bytes += document.size();
  for (int pass = 0; pass < 3; ++pass) {  // the first pass fills the word cache
    tokens = 0;
    start = Clock::now();
    for (const auto& document : documents) tokens += tokenizer.encode(document).size();
    const double elapsed = seconds_since(start);
    std::printf("pass %d: %zu documents, %.2f MB, %zu tokens, %.3f s, %.1f MB/s\n", pass, documents.size(),
                bytes / 1e6, tokens, elapsed, bytes / 1e6 / elapsed);
  }

  const std::vector<std::pair<std::string, std::string>> long_inputs = {
      {"1 MB of 'a'", std::string(1'000'000, 'a')},
      {"1 MB of spaces", std::string(1'000'000, ' ')},
      {"1 MB of newlines", std::string(1'000'000, '\n')},
      {"1 MB of digits", std::string(1'000'000, '7')},
      {"100 KB word 'ab'", [] { std::string s; while (s.size() < 100'000) s += "ab"; return s; }()},
      {"1 MB of '你'", [] { std::string s; while (s.size() < 1'000'000) s += "你"; return s; }()},
  };
  for (const auto& [name, text] : long_inputs) {
    start = Clock::now();
    const std::size_t count = tokenizer.encode(text).size();
    std::printf("%-18s: %zu tokens in %.3f s\n", name.c_str(), count, seconds_since(start));
  }
  return 0;
}
