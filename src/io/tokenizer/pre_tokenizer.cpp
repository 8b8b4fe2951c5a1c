#include "io/tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "io/tokenizer/byte_level.h"

namespace deepinfer::tokenizer {

PreTokenizer::PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

void PreTokenizer::run(std::string_view text, PieceSink sink) const {
  thread_local Scratch scratch;
  if (scratch.matches.size() < steps_.size()) {
    scratch.matches.resize(steps_.size());
    scratch.ranges.resize(steps_.size());
    scratch.buffers.resize(steps_.size());
  }
  run_step(0, text, false, scratch, sink);
}

void PreTokenizer::run_step(std::size_t index, std::string_view piece, bool byte_level, Scratch& scratch,
                            PieceSink sink) const {
  if (piece.empty()) return;  // the library drops empty pieces after every step
  if (index == steps_.size()) {
    sink(piece, byte_level);
    return;
  }
  const PreTokenizerStep& step = steps_[index];
  std::string& buffer = scratch.buffers[index];
  if (byte_level) {
    // A step after ByteLevel sees the byte-level spelling, so spell it out now.
    buffer.clear();
    ByteLevelAlphabet::instance().encode(piece, buffer);
    piece = buffer;
  }
  if (step.kind == PreTokenizerStep::Kind::ByteLevel) {
    if (step.add_prefix_space && piece.front() != ' ') {
      std::string prefixed = " ";
      prefixed.append(piece);
      buffer = std::move(prefixed);
      piece = buffer;
    }
    if (step.regex) {
      split(step, index, piece, scratch,
            [&](std::string_view part) { run_step(index + 1, part, true, scratch, sink); });
    } else {
      run_step(index + 1, piece, true, scratch, sink);
    }
    return;
  }
  split(step, index, piece, scratch,
        [&](std::string_view part) { run_step(index + 1, part, false, scratch, sink); });
}

void PreTokenizer::split(const PreTokenizerStep& step, std::size_t index, std::string_view piece,
                         Scratch& scratch, FunctionRef<void(std::string_view)> next) const {
  const auto slice = [&](MatchRange range) { return piece.substr(range.start, range.end - range.start); };
  if (step.behavior == SplitBehavior::Isolated) {
    // Every match and every gap between matches is its own piece (invert changes nothing here).
    std::size_t previous_end = 0;
    step.regex->for_each_match(piece, [&](MatchRange match) {
      if (previous_end != match.start) next(slice({previous_end, match.start}));
      next(slice(match));
      previous_end = match.end;
    });
    if (previous_end != piece.size()) next(slice({previous_end, piece.size()}));
    return;
  }

  // (range, is_match) for matches and the gaps between them.
  auto& matches = scratch.matches[index];
  matches.clear();
  std::size_t previous_end = 0;
  step.regex->for_each_match(piece, [&](MatchRange match) {
    if (previous_end != match.start) matches.push_back({{previous_end, match.start}, false});
    matches.push_back({match, true});
    previous_end = match.end;
  });
  if (previous_end != piece.size()) matches.push_back({{previous_end, piece.size()}, false});
  if (step.invert) {
    for (auto& entry : matches) entry.second = !entry.second;
  }

  auto& ranges = scratch.ranges[index];
  ranges.clear();
  bool previous_match = false;
  switch (step.behavior) {
    case SplitBehavior::Removed:
      for (const auto& [range, is_match] : matches) {
        if (!is_match) ranges.push_back(range);
      }
      break;
    case SplitBehavior::Contiguous:
      for (const auto& [range, is_match] : matches) {
        if (is_match == previous_match && !ranges.empty()) {
          ranges.back().end = range.end;
        } else {
          ranges.push_back(range);
        }
        previous_match = is_match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const auto& [range, is_match] : matches) {
        if (is_match && !previous_match && !ranges.empty()) {
          ranges.back().end = range.end;
        } else {
          ranges.push_back(range);
        }
        previous_match = is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      // Same fold as MergedWithPrevious, walking from the end.
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        const auto& [range, is_match] = *it;
        if (is_match && !previous_match && !ranges.empty()) {
          ranges.back().start = range.start;
        } else {
          ranges.push_back(range);
        }
        previous_match = is_match;
      }
      std::reverse(ranges.begin(), ranges.end());
      break;
    case SplitBehavior::Isolated:
      break;  // handled above
  }
  // `next` may recurse into later steps, which use their own scratch slots, never this one.
  for (const MatchRange range : ranges) next(slice(range));
}

}  // namespace deepinfer::tokenizer
