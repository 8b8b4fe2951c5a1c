// Arbitrary bytes -> a regex, GBNF or Lark grammar (the first byte picks which) -> the grammar
// compiled, then the matcher run over the rest of the input split in two: bytes, then a mask
// over a small vocabulary and a rollback. A constraint compiles or is refused with CompileError
// within the limits; nothing else may escape, and the matcher never throws on bytes. The mask
// comes from the automaton walk and must equal the reference Earley walk, and again (from the
// cache) after each allowed token is accepted and rolled back. The vocabulary holds plain-text
// tokens of every slice level (up to 8 bytes, up to 16, longer), a partial and a stray UTF-8 byte,
// and tokens that leave a string. Jump-forward's tokens (a greedy longest-match encoder standing
// in for the tokenizer) spell a prefix of the forced bytes, and rolling them back restores the state.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compile.h"
#include "grammar/jump_forward.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t half = input.size() / 2;
  const std::string_view source = input.substr(0, half);
  const std::string_view text = input.substr(half);
  deepinfer::grammar::CompileLimits limits;
  limits.max_symbols = 1 << 16;
  limits.max_repeat = 64;
  deepinfer::grammar::Grammar grammar;
  try {
    switch (data[0] % 3) {
      case 0: grammar = deepinfer::grammar::compile_regex(source, data[0] & 4, limits); break;
      case 1: grammar = deepinfer::grammar::compile_gbnf(source, limits); break;
      default: grammar = deepinfer::grammar::compile_lark(source, limits); break;
    }
  } catch (const deepinfer::grammar::CompileError&) {
    return 0;
  }
  auto vocabulary = std::make_shared<const deepinfer::grammar::Vocabulary>(
      std::vector<std::string>{"a", "b", "ab", "{", "}", "\"", " ", "0", "1", "é", "\xff", "", "hello wor",
                               "abababababababab", "a b a b a b a b a", "\xc3", "\xa9", "a\"", "\\n", "\":", "\n"},
      std::vector<int32_t>{}, 11);
  deepinfer::grammar::Matcher matcher(deepinfer::grammar::prepare(std::move(grammar)), vocabulary);
  int64_t rejected_at = 0;
  (void)matcher.accept_bytes(text.substr(0, std::min<std::size_t>(text.size(), 256)), &rejected_at);
  std::vector<uint64_t> mask(1), walked(1);
  matcher.fill_mask(mask);
  matcher.fill_mask(walked, /*cached=*/false);
  if (mask != walked) __builtin_trap();  // the automaton walk disagrees with the reference
  (void)matcher.forced_bytes();
  for (int32_t id = 0; id < vocabulary->size(); ++id)
    if ((mask[0] >> id) & 1) {
      if (!matcher.accept_token(id)) __builtin_trap();  // the mask promised it
      matcher.fill_mask(walked);
      matcher.rollback(1);
    }
  matcher.fill_mask(walked);
  if (mask != walked) __builtin_trap();  // rollback restored the state the mask was for
  const std::string forced = matcher.forced_bytes();
  const deepinfer::grammar::TextEncoder encode = [&](std::string_view bytes) {
    std::vector<int32_t> out;
    while (!bytes.empty()) {
      int32_t best = -1;
      for (int32_t id = 0; id < vocabulary->size(); ++id) {
        const std::string& token = vocabulary->bytes(id);
        if (!token.empty() && bytes.substr(0, token.size()) == token &&
            (best < 0 || token.size() > vocabulary->bytes(best).size()))
          best = id;
      }
      if (best < 0) break;
      out.push_back(best);
      bytes.remove_prefix(vocabulary->bytes(best).size());
    }
    return out;
  };
  const std::vector<int32_t> run = deepinfer::grammar::jump_forward(matcher, *vocabulary, encode, 8);
  std::string spelled;
  for (int32_t id : run) spelled += vocabulary->bytes(id);
  if (run.size() > 8 || forced.compare(0, spelled.size(), spelled) != 0) __builtin_trap();  // not the forced bytes
  matcher.rollback(static_cast<int32_t>(run.size()));
  matcher.fill_mask(walked);
  if (mask != walked) __builtin_trap();  // the run was taken as tokens, and rolled back
  return 0;
}
