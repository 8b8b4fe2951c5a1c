// Parity with the Hugging Face `tokenizers` library: every line of tests/data/tokenizer_parity/*.jsonl
// holds an input (base64 bytes) and what the library produced for it: ids, decode, decode without
// special tokens. All must agree exactly, and streaming decode must agree with decode.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
const fs::path kParityDir = fs::path(DEEPINFER_TEST_DATA_DIR) / "tokenizer_parity";

std::string base64_decode(std::string_view text) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (const char c : text) {
    if (c == '=') break;
    const std::size_t value = alphabet.find(c);
    if (value == std::string::npos) throw std::runtime_error("bad base64");
    buffer = (buffer << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return out;
}

TEST(TokenizerParityTest, Base64DecodesKnownText) {
  EXPECT_EQ(base64_decode("aGVsbG8gd29ybGQ="), "hello world");
  EXPECT_EQ(base64_decode("//79"), "\xFF\xFE\xFD");
}

std::string ids_text(const std::vector<TokenId>& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

const Tokenizer& tokenizer_named(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) {
    fs::path path = fs::path(DEEPINFER_ASSET_DIR) / "tokenizer" / name;
    if (!fs::exists(path)) path = kParityDir / name;
    slot = std::make_unique<Tokenizer>(Tokenizer::from_file(path.string()));
  }
  return *slot;
}

TEST(TokenizerParityTest, EveryCorpusLineMatchesTheLibrary) {
  std::vector<fs::path> files;
  if (fs::is_directory(kParityDir)) {
    for (const auto& entry : fs::directory_iterator(kParityDir)) {
      if (entry.path().extension() == ".jsonl") files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << "no parity corpus (*.jsonl) in " << kParityDir;

  std::size_t lines = 0;
  std::map<std::string, std::size_t> failures_by_category;
  std::size_t failures = 0;
  std::ostringstream shown;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    std::string line;
    std::size_t line_number = 0;
    while (std::getline(in, line)) {
      ++line_number;
      if (line.empty()) continue;
      ++lines;
      const auto record = nlohmann::json::parse(line);
      const std::string category = record.at("category").get<std::string>();
      const Tokenizer& tokenizer = tokenizer_named(record.at("tokenizer").get<std::string>());
      const std::string input = base64_decode(record.at("input_b64").get<std::string>());
      const auto expected_ids = record.at("ids").get<std::vector<TokenId>>();
      const auto expected_decoded = record.at("decoded").get<std::string>();
      const auto expected_skip = record.at("decoded_skip_special").get<std::string>();

      std::ostringstream problems;
      const std::vector<TokenId> ids = tokenizer.encode(input);
      if (ids != expected_ids) problems << "\n  ids      " << ids_text(ids) << "\n  expected " << ids_text(expected_ids);
      const std::string decoded = tokenizer.decode(expected_ids);
      if (decoded != expected_decoded) problems << "\n  decode: got \"" << decoded << "\" expected \"" << expected_decoded << "\"";
      const std::string skipped = tokenizer.decode(expected_ids, true);
      if (skipped != expected_skip) problems << "\n  decode(skip_special): got \"" << skipped << "\" expected \"" << expected_skip << "\"";
      IncrementalDetokenizer stream(tokenizer);
      std::string streamed;
      for (const TokenId id : expected_ids) streamed += stream.push(id);
      streamed += stream.finish();
      if (streamed != expected_decoded) problems << "\n  streamed decode differs: \"" << streamed << "\"";

      if (!problems.str().empty()) {
        ++failures;
        ++failures_by_category[category];
        if (failures <= 10) {
          shown << file.filename().string() << ":" << line_number << " [" << category << "] input_b64="
                << record.at("input_b64").get<std::string>().substr(0, 200) << problems.str() << "\n";
        }
      }
    }
  }
  std::ostringstream counts;
  for (const auto& [category, count] : failures_by_category) counts << "  " << category << ": " << count << "\n";
  EXPECT_EQ(failures, 0u) << failures << " of " << lines << " lines differ; by category:\n"
                          << counts.str() << "first failures:\n" << shown.str();
  EXPECT_GT(lines, 0u);
}

}  // namespace
}  // namespace deepinfer
