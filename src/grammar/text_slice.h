#pragma once
// Plain string text as a byte automaton: well-formed UTF-8 (RFC 3629, no surrogates, nothing past
// U+10FFFF) of characters a JSON string takes unescaped, less DEL: no '"', no '\\', no control
// byte. A token lies in the slice when its bytes run here from the start without dying (it may
// end inside a character). Most of a vocabulary does, and a parse state inside a free string takes
// every such token, so a mask walk checks the slice once per state and adds its tokens at once
// (mask_walk.cpp) instead of walking them: llguidance's "slices", for the one slice that matters
// to JSON.
#include <array>
#include <cstddef>
#include <cstdint>

namespace deepinfer::grammar::text_slice {

constexpr int kStart = 0;   // between characters
constexpr int kStates = 8;  // kStart and the states inside a multi-byte character
constexpr int kDead = -1;

// The slice in levels by token length, so a string whose length is bounded (minLength, maxLength,
// a counted pattern) still takes the short text tokens at once where the long ones need a walk.
// Level l holds the text tokens of at most kLevelBytes[l] bytes; level 0 is none, the last all.
constexpr int kLevels = 5;
constexpr std::array<std::size_t, kLevels + 1> kLevelBytes = {0, 8, 16, 32, 64, SIZE_MAX};

constexpr int next(int state, uint8_t byte) {
  const bool continuation = byte >= 0x80 && byte <= 0xBF;
  switch (state) {
    case 0:
      if (byte >= 0x20 && byte <= 0x7E) return byte == '"' || byte == '\\' ? kDead : 0;
      if (byte >= 0xC2 && byte <= 0xDF) return 1;
      if (byte == 0xE0) return 4;
      if (byte == 0xED) return 5;
      if (byte >= 0xE1 && byte <= 0xEF) return 2;
      if (byte == 0xF0) return 6;
      if (byte >= 0xF1 && byte <= 0xF3) return 3;
      if (byte == 0xF4) return 7;
      return kDead;
    case 1: return continuation ? 0 : kDead;                     // one continuation byte left
    case 2: return continuation ? 1 : kDead;                     // two left
    case 3: return continuation ? 2 : kDead;                     // three left
    case 4: return byte >= 0xA0 && byte <= 0xBF ? 1 : kDead;     // after E0: no overlong form
    case 5: return byte >= 0x80 && byte <= 0x9F ? 1 : kDead;     // after ED: no surrogate
    case 6: return byte >= 0x90 && byte <= 0xBF ? 2 : kDead;     // after F0: no overlong form
    case 7: return byte >= 0x80 && byte <= 0x8F ? 2 : kDead;     // after F4: nothing past U+10FFFF
    default: return kDead;
  }
}

}  // namespace deepinfer::grammar::text_slice
