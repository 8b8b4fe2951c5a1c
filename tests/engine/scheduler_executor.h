#pragma once
// A model-free executor for scheduler tests that checks what a real one relies on. Its "model
// state" per sequence is the list of token ids consumed so far; each block's payload holds the ids
// of its positions (one int32 per position), each snapshot the length and a hash of the consumed
// ids. Every step it checks that a sequence continues exactly where its state ends, that every
// earlier position's block holds that position's id (shared, cached and copied blocks included),
// and that a restored snapshot is the state of exactly the prefix the plan claims.
#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include "engine/scheduler.h"

namespace deepinfer::engine::testing {

inline uint64_t hash_tokens(const std::vector<int32_t>& tokens) {
  uint64_t hash = 1469598103934665603ull;
  for (int32_t token : tokens) hash = (hash ^ static_cast<uint32_t>(token)) * 1099511628211ull;
  return hash;
}

class CheckingExecutor {
 public:
  static constexpr int64_t kSnapshotBytes = 24;  // length, hash, marker: two blocks of 16 bytes

  explicit CheckingExecutor(Scheduler& scheduler, int32_t vocab = 7) : scheduler_(scheduler), vocab_(vocab) {}

  // Runs the plan now; the returned results go to on_step_finished (at once, or one plan later).
  std::vector<StepResult> launch(const StepPlan& plan) {
    for (SequenceId id : plan.dropped) states_.erase(id);
    std::vector<StepResult> results;
    const int64_t block = scheduler_.config().block_tokens;
    for (const ScheduledSequence& item : plan.sequences) {
      if (!scheduler_.is_current(item.id, item.epoch)) continue;
      // Speculative items hold blocks for their drafts (and keep them after a rollback).
      EXPECT_GE(static_cast<int64_t>(item.block_table.size()), (item.end + item.drafts + block - 1) / block);
      std::vector<int32_t>& state = states_[item.id];
      if (item.starts) {
        state.clear();
        if (item.restore != kNoSnapshot) {
          const std::vector<int32_t> tokens = scheduler_.sequence(item.id)->tokens;
          state.assign(tokens.begin(), tokens.begin() + item.begin);
          check_snapshot(item.restore, state);
        } else {
          EXPECT_EQ(item.begin, 0);
        }
      }
      EXPECT_EQ(static_cast<int64_t>(state.size()), item.begin) << "a sequence must continue where its state ends";
      for (int64_t position = 0; position < item.begin; ++position)
        EXPECT_EQ(read(item.block_table, position), state[static_cast<std::size_t>(position)])
            << "position " << position << " of request " << item.id.request << " choice " << item.id.choice;
      for (int64_t position = item.begin; position < item.end; ++position) {
        int32_t token = item.tokens[static_cast<std::size_t>(position - item.begin)];
        if (token == kPendingToken) {
          EXPECT_EQ(position, item.end - 1);
          token = last_sample_.at(item.id);
        }
        write(item.block_table, position, token);
        state.push_back(token);
      }
      if (item.save_snapshot != kNoSnapshot) {
        EXPECT_EQ(item.end % block, 0);
        scheduler_.snapshots().write(item.save_snapshot, snapshot_bytes(state));
      }
      if (item.drafts > 0) {
        EXPECT_TRUE(item.needs_logits);
        results.push_back(verify(item, state));
      } else if (item.needs_logits) {
        results.push_back(sample(item.id, state));
      }
    }
    for (const Fork& fork : plan.forks) {
      if (!scheduler_.is_current(fork.child, fork.child_epoch)) continue;
      const std::vector<int32_t>& parent = states_.at(fork.parent);
      for (const BlockCopy& copy : fork.copies) {
        auto from = scheduler_.pool().payload(copy.from);
        std::memcpy(scheduler_.pool().payload(copy.to).data(), from.data(), from.size());
      }
      states_[fork.child] = parent;
      for (int64_t position = 0; position < static_cast<int64_t>(parent.size()); ++position)
        EXPECT_EQ(read(fork.block_table, position), parent[static_cast<std::size_t>(position)]);
      results.push_back(sample(fork.child, parent));
    }
    return results;
  }

  // Marks sampled tokens as stops with probability `stop_percent` (decided by the caller's rng).
  template <typename Rng>
  void decide_stops(std::vector<StepResult>& results, Rng& rng, int stop_percent) {
    for (StepResult& result : results) result.stop = static_cast<int>(rng() % 100) < stop_percent;
  }

  std::vector<std::byte> snapshot_bytes(const std::vector<int32_t>& state) const {
    std::vector<std::byte> bytes(kSnapshotBytes);
    const int64_t length = static_cast<int64_t>(state.size());
    const uint64_t hash = hash_tokens(state);
    const uint64_t marker = 0x5eed5eed5eed5eedull;
    std::memcpy(bytes.data(), &length, 8);
    std::memcpy(bytes.data() + 8, &hash, 8);
    std::memcpy(bytes.data() + 16, &marker, 8);
    return bytes;
  }

  int64_t restores = 0;
  // Speculative decoding: how many of an item's drafts are the target's own tokens (the rest are
  // wrong); none when unset. The executor writes the drafts' ids, keeps the right ones, adds the
  // bonus token, and rolls its state back to the item's begin when it rejected one.
  std::function<int32_t(SequenceId, int32_t drafts)> right_drafts;
  int64_t rollbacks = 0;
  int64_t kept_drafts = 0;

  // What the target samples after `state` (the same function sample() draws with).
  int32_t target_token(SequenceId id, const std::vector<int32_t>& state) const {
    std::vector<int32_t> key = state;
    key.push_back(id.choice);
    return static_cast<int32_t>(hash_tokens(key) % static_cast<uint64_t>(vocab_));
  }

 private:
  void check_snapshot(SnapshotHandle handle, const std::vector<int32_t>& prefix) {
    ++restores;
    EXPECT_EQ(scheduler_.snapshots().load(handle), snapshot_bytes(prefix)) << "restored the wrong state";
  }
  int32_t read(const std::vector<BlockId>& table, int64_t position) const {
    const int64_t block = scheduler_.config().block_tokens;
    int32_t token = 0;
    std::memcpy(&token, scheduler_.pool().payload(table.at(static_cast<std::size_t>(position / block))).data() +
                            (position % block) * 4, 4);
    return token;
  }
  void write(const std::vector<BlockId>& table, int64_t position, int32_t token) {
    const int64_t block = scheduler_.config().block_tokens;
    std::memcpy(scheduler_.pool().payload(table.at(static_cast<std::size_t>(position / block))).data() +
                    (position % block) * 4, &token, 4);
  }
  StepResult sample(SequenceId id, const std::vector<int32_t>& state) {
    const int32_t token = target_token(id, state);
    last_sample_[id] = token;
    return {id, token, false, {}};
  }
  StepResult verify(const ScheduledSequence& item, std::vector<int32_t>& state) {
    const int32_t right = std::clamp(right_drafts ? right_drafts(item.id, item.drafts) : 0, 0, item.drafts);
    std::vector<int32_t> verified = state;  // through the item's end, then its kept drafts
    for (int32_t k = 0; k < item.drafts; ++k) {
      const int32_t target = target_token(item.id, verified);
      const int32_t draft = k < right ? target : (target + 1) % vocab_;
      write(item.block_table, item.end + k, draft);
      if (k < right) verified.push_back(draft);
    }
    std::vector<int32_t> produced(verified.begin() + static_cast<std::ptrdiff_t>(state.size()), verified.end());
    produced.push_back(target_token(item.id, verified));
    kept_drafts += right;
    StepResult result{item.id, produced.front(), false, std::vector<int32_t>(produced.begin() + 1, produced.end())};
    if (right == item.drafts) {
      state = verified;
      result.computed = item.end + item.drafts;
    } else {
      state.resize(static_cast<std::size_t>(item.begin));
      result.computed = item.begin;
      ++rollbacks;
    }
    last_sample_[item.id] = produced.back();
    return result;
  }

  Scheduler& scheduler_;
  int32_t vocab_;
  std::map<SequenceId, std::vector<int32_t>> states_;
  std::map<SequenceId, int32_t> last_sample_;
};

}  // namespace deepinfer::engine::testing
