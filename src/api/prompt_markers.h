#pragma once
// The control-token spellings of DeepSeek V4 / V4.1 prompts and their V4.1 ids (recipe §1.1).
// Every marker uses U+FF5C FULLWIDTH VERTICAL LINE and U+2581 LOWER ONE EIGHTH BLOCK.
#include <array>
#include <string_view>

#include "io/tokenizer/tokenizer.h"

namespace deepinfer::api::markers {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kSystem = "<｜System｜>";  // V4.1 only
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";  // the template supplies "<", "</" and ">"
inline constexpr std::string_view kImage = "<｜image｜>";

struct Marker {
  std::string_view text;
  TokenId id;
};

inline constexpr std::array<Marker, 10> kAll = {{
    {kBos, 0},
    {kEos, 1},
    {kSystem, 128799},
    {kUser, 128803},
    {kAssistant, 128804},
    {kLatestReminder, 128828},
    {kThinkStart, 128821},
    {kThinkEnd, 128822},
    {kDsml, 128825},
    {kImage, 129264},
}};

}  // namespace deepinfer::api::markers
