// Unit tests of the tokenizer's pieces: UTF-8 repair, byte alphabet, regex dialect, BPE merges,
// added-token matching rules, decoding and streaming decode, loading errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/tokenizer/byte_level.h"
#include "io/tokenizer/regex.h"
#include "io/tokenizer/tokenizer.h"
#include "io/tokenizer/utf8.h"

namespace deepinfer {
namespace {

using tokenizer::ByteLevelAlphabet;
using nlohmann::json;

const std::string kV41 = std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json";

const Tokenizer& v41() {
  static const Tokenizer tokenizer = Tokenizer::from_file(kV41);
  return tokenizer;
}

std::string spelled(std::string_view raw) {
  std::string out;
  ByteLevelAlphabet::instance().encode(raw, out);
  return out;
}

// A byte-level BPE over all 256 bytes (ids 0..255 in byte order) plus the given merges, whose
// results get the next ids, plus added tokens.
json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges, json added = json::array(),
                    json pre_tokenizer = json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spelled(std::string(1, static_cast<char>(b)))] = b;
  json merge_list = json::array();
  for (const auto& [left, right] : merges) {
    merge_list.push_back(spelled(left) + " " + spelled(right));
    if (!vocab.contains(spelled(left + right))) vocab[spelled(left + right)] = static_cast<int>(vocab.size());
  }
  return json{{"version", "1.0"}, {"added_tokens", added}, {"normalizer", nullptr}, {"pre_tokenizer", pre_tokenizer},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

json added_token(const std::string& content, int id, json flags) {
  json token = {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                {"normalized", false}, {"special", false}};
  token.update(flags);
  return token;
}

// ---- UTF-8 ----

TEST(TokenizerUtf8Test, LossyRepairReplacesEachMaximalSubpart) {
  using tokenizer::utf8_lossy;
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("plain ascii"), "plain ascii");
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98\x80z"), "a\xF0\x9F\x98\x80z");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), fffd);               // truncated 4-byte: one replacement
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98" "a"), fffd + "a");
  EXPECT_EQ(utf8_lossy("\xE0\x80"), fffd + fffd);            // E0 needs A0..BF next
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), fffd + fffd + fffd);  // surrogate
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // above U+10FFFF
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), fffd + fffd);            // overlong
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), fffd + fffd);
  EXPECT_EQ(utf8_lossy("\xE4\xBD" "\xE4\xBD\xA0"), fffd + "\xE4\xBD\xA0");
  EXPECT_EQ(utf8_lossy(std::string("\0x", 2)), std::string("\0x", 2));
}

TEST(TokenizerUtf8Test, IncompleteSuffixOnlyCountsSequencesThatCanStillComplete) {
  using tokenizer::incomplete_utf8_suffix;
  EXPECT_EQ(incomplete_utf8_suffix("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE4"), 1u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE4\xBD"), 2u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE4\xBD\xA0"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xFF"), 0u);       // can never complete
  EXPECT_EQ(incomplete_utf8_suffix("a\xE0\x80"), 0u);   // already broken
  EXPECT_EQ(incomplete_utf8_suffix("\xBD"), 0u);
}

// ---- byte alphabet ----

TEST(TokenizerByteLevelTest, AlphabetIsGpt2s) {
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::instance();
  EXPECT_EQ(alphabet.char_for_byte(' '), U'\u0120');  // 'Ġ'
  EXPECT_EQ(alphabet.char_for_byte('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(alphabet.char_for_byte(0), U'\u0100');
  EXPECT_EQ(alphabet.char_for_byte(0x7F), U'\u0121');
  EXPECT_EQ(alphabet.char_for_byte(0xAD), U'\u0143');
  EXPECT_EQ(alphabet.char_for_byte('A'), U'A');
  EXPECT_EQ(alphabet.char_for_byte(0xE9), U'\u00E9');
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(alphabet.byte_for_char(alphabet.char_for_byte(static_cast<unsigned char>(b))), b);
  }
  std::string out;
  EXPECT_TRUE(alphabet.decode("\xC4\xA0hi", out));
  EXPECT_EQ(out, " hi");
  EXPECT_FALSE(alphabet.decode("\xE4\xBD\xA0", out));  // '你' is not in the alphabet
  EXPECT_EQ(out, " hi");
}

// ---- regex dialect ----

std::vector<std::pair<std::size_t, std::size_t>> matches(const tokenizer::Regex& regex, std::string_view text) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  regex.for_each_match(text, [&](tokenizer::MatchRange m) { out.emplace_back(m.start, m.end); });
  return out;
}

TEST(TokenizerRegexTest, EmptyMatchesFollowOniguruma) {
  const tokenizer::Regex regex("a*", "test");
  using P = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(matches(regex, "baaac"), (std::vector<P>{{0, 0}, {1, 4}, {5, 5}}));
  EXPECT_EQ(matches(regex, ""), (std::vector<P>{{0, 0}}));
}

TEST(TokenizerRegexTest, OnigurumaEscapesAreTranslated) {
  const tokenizer::Regex hex("\\h+", "test");  // Oniguruma: hex digits, not horizontal space
  EXPECT_EQ(matches(hex, "x 1aF g").size(), 1u);
  const tokenizer::Regex word("\\w+", "test");  // the library's \w: marks and every number ('²'), not '-'
  using P = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(matches(word, "e\xCC\x81x\xC2\xB2-"), (std::vector<P>{{0, 6}}));
  const tokenizer::Regex space("\\s", "test");  // White_Space includes NEL and U+3000
  EXPECT_EQ(matches(space, "\xC2\x85" "a\xE3\x80\x80").size(), 2u);
  EXPECT_THROW(tokenizer::Regex("(unclosed", "test"), Error);
}

// Byte offsets of the matches of `pattern` in `text`.
std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view pattern, std::string_view text) {
  return matches(tokenizer::Regex(pattern, "test"), text);
}

std::string utf8_of(char32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
  return out;
}

const std::string kMongolianVowelSeparator = "\xE1\xA0\x8E";  // U+180E: Cf, not White_Space
const std::string kJellyfish = "\xF0\x9F\xAA\xBC";               // U+1FABC: So since Unicode 15
const std::string kFingerprint = "\xF0\x9F\xAB\x86";             // U+1FAC6: So since Unicode 16

TEST(TokenizerRegexTest, WhiteSpaceIsTheLibrarysNotPcre2s) {
  using P = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(matches("\\s+", "a" + kMongolianVowelSeparator + " \xE3\x80\x80" "b"), (std::vector<P>{{4, 8}}));
  EXPECT_EQ(matches("\\S+", "a" + kMongolianVowelSeparator + " "), (std::vector<P>{{0, 4}}));
  EXPECT_EQ(matches("[\\s]+", kMongolianVowelSeparator + "\t\xC2\x85"), (std::vector<P>{{3, 6}}));
}

TEST(TokenizerRegexTest, SymbolsIncludeCharactersNewerThanPcre2) {
  using P = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(matches("\\p{S}+", "x" + kJellyfish + kFingerprint + "y"), (std::vector<P>{{1, 9}}));
  EXPECT_EQ(matches("\\P{S}+", "x" + kJellyfish), (std::vector<P>{{0, 1}}));
  EXPECT_EQ(matches("\\p{^S}+", "x" + kJellyfish), (std::vector<P>{{0, 1}}));
  EXPECT_EQ(matches("\\p{So}", kFingerprint), (std::vector<P>{{0, 4}}));
  EXPECT_EQ(matches("\\p{ other_Symbol }", kFingerprint), (std::vector<P>{{0, 4}}));  // Oniguruma spelling
}

TEST(TokenizerRegexTest, NegatedClassOfPropertiesUsesTheNewData) {
  // The DeepSeek V4 word rule: a new emoji is \p{S}, so it may not lead the word; U+180E may.
  const std::string word_rule = "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+";
  using P = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(matches(word_rule, kJellyfish + "abc"), (std::vector<P>{{4, 7}}));
  EXPECT_EQ(matches(word_rule, kFingerprint + "abc"), (std::vector<P>{{4, 7}}));
  EXPECT_EQ(matches(word_rule, kMongolianVowelSeparator + "abc"), (std::vector<P>{{0, 6}}));
  EXPECT_EQ(matches(word_rule, "\nabc"), (std::vector<P>{{1, 4}}));
}

TEST(TokenizerRegexTest, NegatedEscapesInsideClassesAreComplements) {
  using P = std::pair<std::size_t, std::size_t>;
  // [\S\n] : everything but white space, plus newline; U+180E is not white space.
  EXPECT_EQ(matches("[\\S\\n]+", "a" + kMongolianVowelSeparator + "\nb c"), (std::vector<P>{{0, 6}, {7, 8}}));
  EXPECT_EQ(matches("[^\\S]+", "a \xE3\x80\x80" + kMongolianVowelSeparator), (std::vector<P>{{1, 5}}));
  EXPECT_EQ(matches("[x\\D]+", "1x2a" + kJellyfish + "3"), (std::vector<P>{{1, 2}, {3, 8}}));
  EXPECT_EQ(matches("[\\P{L}]+", "ab" + kJellyfish + "1c"), (std::vector<P>{{2, 7}}));
  // A set and its negation, in and out of a class, split every character the same way.
  const tokenizer::Regex space("\\s", "test"), in_class_not_space("[\\S]", "test"),
      doubly_negated("[^\\S]", "test"), not_letter("[^\\p{L}]", "test"), letter_complement("[\\P{L}]", "test");
  for (char32_t code_point = 0; code_point <= 0x10FFFF; code_point += code_point < 0x3100 ? 1 : 97) {
    if (code_point >= 0xD800 && code_point <= 0xDFFF) continue;
    const std::string text = utf8_of(code_point);
    const bool is_space = !matches(space, text).empty();
    EXPECT_EQ(matches(in_class_not_space, text).empty(), is_space) << std::hex << static_cast<unsigned>(code_point);
    EXPECT_EQ(matches(doubly_negated, text).empty(), !is_space) << std::hex << static_cast<unsigned>(code_point);
    EXPECT_EQ(matches(not_letter, text), matches(letter_complement, text)) << std::hex << static_cast<unsigned>(code_point);
  }
}

TEST(TokenizerRegexTest, OnigurumaEscapeFormsAndFallbacks) {
  using P = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(matches("\\pL", "apLb"), (std::vector<P>{{1, 3}}));  // no brace: the letter p, as Oniguruma
  EXPECT_EQ(matches("\\p{Han}+", "ab\xE4\xB8\xAD\xE6\x96\x87"), (std::vector<P>{{2, 8}}));  // PCRE2's scripts
  EXPECT_NE(tokenizer::translate_oniguruma_pattern("\\p{Han}").find("\\p{Han}"), std::string::npos);
  EXPECT_EQ(tokenizer::translate_oniguruma_pattern("\\p{L}").find("\\p"), std::string::npos);
  EXPECT_EQ(tokenizer::translate_oniguruma_pattern("a\\\\s"), "a\\\\s");  // an escaped backslash, then 's'
}

TEST(TokenizerRegexTest, CaseInsensitiveGroupsStillWork) {
  using P = std::pair<std::size_t, std::size_t>;
  const std::string contractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|\\p{L}+";
  EXPECT_EQ(matches(contractions, "IT'S we'RE"), (std::vector<P>{{0, 2}, {2, 4}, {5, 7}, {7, 10}}));
  // Oniguruma folds case for properties too: (?i)\p{Lu} matches 'a' in the library.
  EXPECT_EQ(matches("(?i:\\p{Lu})+", "aB1"), (std::vector<P>{{0, 2}}));
}

// ---- BPE ----

TEST(TokenizerBpeTest, MergesApplyByRankThenLeftmost) {
  // ids: bytes 0..255, then "ab"=256, "bc"=257, "abc"=258, "aa"=259
  const Tokenizer tokenizer = Tokenizer::from_json(
      tiny_tokenizer({{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "a"}}).dump());
  EXPECT_EQ(tokenizer.encode("abc"), (std::vector<TokenId>{258}));
  EXPECT_EQ(tokenizer.encode("bc"), (std::vector<TokenId>{257}));
  EXPECT_EQ(tokenizer.encode("aaa"), (std::vector<TokenId>{259, 'a'}));  // leftmost pair wins a tie
  EXPECT_EQ(tokenizer.encode("abbc"), (std::vector<TokenId>{256, 257}));
  EXPECT_EQ(tokenizer.encode("xabc"), (std::vector<TokenId>{'x', 258}));
  EXPECT_EQ(tokenizer.encode(""), (std::vector<TokenId>{}));
  // Cached words give the same answer the second time.
  EXPECT_EQ(tokenizer.encode("abc abc"), (std::vector<TokenId>{258, ' ', 258}));
  EXPECT_EQ(tokenizer.encode("abc abc"), (std::vector<TokenId>{258, ' ', 258}));
}

TEST(TokenizerBpeTest, LongWordsAreNotQuadratic) {
  const Tokenizer tokenizer = Tokenizer::from_json(tiny_tokenizer({{"a", "b"}, {"a", "a"}}).dump());
  std::string word;
  while (word.size() < 100'000) word += "ab";
  EXPECT_EQ(tokenizer.encode(word).size(), 50'000u);
  EXPECT_EQ(v41().encode(std::string(200'000, 'a')).size(), 25'000u);
  EXPECT_FALSE(v41().encode(std::string(200'000, ' ')).empty());
}

TEST(TokenizerBpeTest, LoadingRejectsWhatItCannotReproduce) {
  json with_dropout = tiny_tokenizer({});
  with_dropout["model"]["dropout"] = 0.1;
  EXPECT_THROW(Tokenizer::from_json(with_dropout.dump()), Error);

  json nfc = tiny_tokenizer({});
  nfc["normalizer"] = {{"type", "NFC"}};
  try {
    Tokenizer::from_json(nfc.dump(), "my.json");
    FAIL() << "NFC accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported normalizer NFC in my.json"), std::string::npos) << e.what();
  }

  json bad_merge = tiny_tokenizer({});
  bad_merge["model"]["merges"].push_back("zz q");
  EXPECT_THROW(Tokenizer::from_json(bad_merge.dump()), Error);
  EXPECT_THROW(Tokenizer::from_json("{not json"), Error);
  EXPECT_THROW(Tokenizer::from_json("[]"), Error);
  EXPECT_THROW(Tokenizer::from_json(R"({"version": 1e400})"), Error);  // nlohmann's out_of_range

  json empty_sequence = tiny_tokenizer({});
  empty_sequence["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
  EXPECT_NO_THROW(Tokenizer::from_json(empty_sequence.dump()));
}

// ---- added tokens ----

TEST(TokenizerAddedTokensTest, StripAndSingleWordRules) {
  const json added = json::array({added_token("<l>", 300, {{"lstrip", true}}),
                                  added_token("<r>", 301, {{"rstrip", true}}),
                                  added_token("cat", 302, {{"single_word", true}}),
                                  added_token("ab", 303, json::object()), added_token("abc", 304, json::object())});
  const Tokenizer tokenizer = Tokenizer::from_json(tiny_tokenizer({}, added).dump());
  using V = std::vector<TokenId>;
  EXPECT_EQ(tokenizer.encode("x \t<l>y"), (V{'x', 300, 'y'}));
  EXPECT_EQ(tokenizer.encode("x<r> \n y"), (V{'x', 301, 'y'}));
  EXPECT_EQ(tokenizer.encode("cat"), (V{302}));
  EXPECT_EQ(tokenizer.encode("a cat."), (V{'a', ' ', 302, '.'}));
  EXPECT_EQ(tokenizer.encode("concat"), (V{'c', 'o', 'n', 'c', 'a', 't'}));
  EXPECT_EQ(tokenizer.encode("cats"), (V{'c', 'a', 't', 's'}));
  EXPECT_EQ(tokenizer.encode("xabcx"), (V{'x', 304, 'x'}));  // leftmost-longest
  EXPECT_EQ(tokenizer.encode("abab"), (V{303, 303}));
}

TEST(TokenizerAddedTokensTest, RawTokensAreMatchedBeforeNormalizedOnes) {
  const json added = json::array({added_token("bc", 300, {{"normalized", false}}),
                                  added_token("abcd", 301, {{"normalized", true}})});
  const Tokenizer tokenizer = Tokenizer::from_json(tiny_tokenizer({}, added).dump());
  EXPECT_EQ(tokenizer.encode("abcd"), (std::vector<TokenId>{'a', 300, 'd'}));
  EXPECT_EQ(tokenizer.encode("xabcd"), (std::vector<TokenId>{'x', 'a', 300, 'd'}));
}

TEST(TokenizerAddedTokensTest, DeclaredIdsAreKept) {
  EXPECT_EQ(v41().token_to_id("<think>"), 128821);
  EXPECT_EQ(v41().token_to_id("<｜image｜>"), 129264);
  EXPECT_EQ(v41().encode("<think>x</think>"), (std::vector<TokenId>{128821, *v41().token_to_id("x"), 128822}));
  EXPECT_EQ(v41().vocab_size(), 129265u);
  EXPECT_EQ(v41().id_to_token(128821), "<think>");
  EXPECT_EQ(v41().id_to_token(223), "\xC4\xA0");  // 'Ġ'
  EXPECT_EQ(v41().id_to_token(129000), std::nullopt);  // a gap in the added ids
  EXPECT_EQ(v41().bos_id(), 0);
  EXPECT_EQ(v41().eos_id(), 1);
  EXPECT_TRUE(v41().is_special(0));
  EXPECT_FALSE(v41().is_special(128821));
  EXPECT_FALSE(v41().is_special(19923));
}

TEST(TokenizerAddedTokensTest, TokenizerConfigNamesBosAndEos) {
  const auto dir = std::filesystem::temp_directory_path() / "deepinfer_tokenizer_config_test";
  std::filesystem::create_directories(dir);
  const json added = json::array({added_token("<s>", 300, {{"special", true}}),
                                  added_token("</s>", 301, {{"special", true}})});
  std::ofstream(dir / "tokenizer.json") << tiny_tokenizer({}, added).dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>"})";
  const Tokenizer tokenizer = Tokenizer::from_file(dir.string());
  EXPECT_EQ(tokenizer.bos_id(), 300);
  EXPECT_EQ(tokenizer.eos_id(), 301);
  std::filesystem::remove_all(dir);
}

TEST(TokenizerAddedTokensTest, FuzzSeedTokenizerMatchesTheLibrary) {
  // Split String + MergedWithNext, Digits, ByteLevel and an lstrip token; ids from the library.
  const Tokenizer tokenizer = Tokenizer::from_file(
      std::string(DEEPINFER_ASSET_DIR) + "/../fuzz/corpus/fuzz_tokenizer_json/small_tokenizer.json");
  EXPECT_EQ(tokenizer.encode("hello world <s> 12345"),
            (std::vector<TokenId>{258, 111, 259, 111, 114, 108, 100, 260, 32, 49, 50, 51, 52, 53}));
}

// ---- decoding ----

TEST(TokenizerDecodeTest, DecodesBytesAndSkipsSpecialTokens) {
  const Tokenizer& tokenizer = v41();
  const std::vector<TokenId> ids = {0, 19923, 14, 2058, 3, 1};
  EXPECT_EQ(tokenizer.decode(ids), "<｜begin▁of▁sentence｜>Hello, world!<｜end▁of▁sentence｜>");
  EXPECT_EQ(tokenizer.decode(ids, true), "Hello, world!");
  EXPECT_EQ(tokenizer.decode(std::vector<TokenId>{128821}, true), "<think>");  // not special
  EXPECT_EQ(tokenizer.decode(std::vector<TokenId>{129000}), "");  // unassigned id inside the range
  EXPECT_THROW(tokenizer.decode(std::vector<TokenId>{-1}), Error);
  EXPECT_THROW(tokenizer.decode(std::vector<TokenId>{static_cast<TokenId>(tokenizer.vocab_size())}), Error);
  // A lone byte of a multi-byte character decodes to U+FFFD.
  const TokenId e4 = *tokenizer.token_to_id(spelled("\xE4"));
  EXPECT_EQ(tokenizer.decode(std::vector<TokenId>{e4, *tokenizer.token_to_id("x")}), "\xEF\xBF\xBDx");
}

TEST(TokenizerDecodeTest, RoundTripsAnyBytesToTheirLossyForm) {
  std::mt19937 random(1);
  for (int i = 0; i < 300; ++i) {
    std::string bytes(random() % 40, '\0');
    for (char& c : bytes) c = static_cast<char>(random() % 4 == 0 ? random() % 256 : "a \n你<｜>"[random() % 10]);
    EXPECT_EQ(v41().decode(v41().encode(bytes)), tokenizer::utf8_lossy(bytes));
  }
}

TEST(TokenizerDecodeTest, StreamingEqualsWholeDecode) {
  const Tokenizer& tokenizer = v41();
  std::vector<TokenId> interesting;
  for (const char* raw : {"\xE4", "\xBD", "\xA0", "\xF0", "\x9F", "\x98", "\x80", "\xFF", "\xC0", "a", " "}) {
    interesting.push_back(*tokenizer.token_to_id(spelled(raw)));
  }
  for (const TokenId id : {0, 1, 128803, 128821, 30594, 19923}) interesting.push_back(id);
  std::mt19937 random(2);
  for (int round = 0; round < 400; ++round) {
    std::vector<TokenId> ids(random() % 20);
    for (TokenId& id : ids) {
      id = random() % 3 ? interesting[random() % interesting.size()]
                        : static_cast<TokenId>(random() % tokenizer.vocab_size());
    }
    for (const bool skip : {false, true}) {
      IncrementalDetokenizer stream(tokenizer, skip);
      std::string streamed;
      for (const TokenId id : ids) {
        const std::string piece = stream.push(id);
        EXPECT_TRUE(tokenizer::is_valid_utf8(piece));
        streamed += piece;
      }
      streamed += stream.finish();
      ASSERT_EQ(streamed, tokenizer.decode(ids, skip)) << "round " << round;
    }
  }
  // A character split over three tokens appears only once complete.
  IncrementalDetokenizer stream(tokenizer);
  EXPECT_EQ(stream.push(interesting[0]), "");
  EXPECT_EQ(stream.push(interesting[1]), "");
  EXPECT_EQ(stream.push(interesting[2]), "你");
  EXPECT_EQ(stream.finish(), "");
}

}  // namespace
}  // namespace deepinfer
