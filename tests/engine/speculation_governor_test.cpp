// Scheduled speculation's governor: drafting only while it measures faster than not, with the
// other mode measured again between phases, and a phase's first step (the mode before's leftovers)
// not counted.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/speculation.h"

namespace deepinfer::engine {
namespace {

// What a step of each mode costs and makes.
struct StepCosts {
  double drafting_seconds, plain_seconds;
  int64_t drafting_tokens, plain_tokens;
};

// Runs `steps` steps of `sequences` sequences at `costs`; returns how many of them drafted.
int64_t run_at_load(SpeculationGovernor& governor, int64_t steps, int64_t sequences, const StepCosts& costs) {
  int64_t drafted = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const bool drafting = governor.drafting();
    drafted += drafting ? 1 : 0;
    governor.record(drafting ? costs.drafting_seconds : costs.plain_seconds,
                    drafting ? costs.drafting_tokens : costs.plain_tokens, sequences);
  }
  return drafted;
}

// One sequence, 0.01 s a step either way, `with` tokens a step while drafting, `without` otherwise.
int64_t run_governor(SpeculationGovernor& governor, int64_t steps, int64_t with, int64_t without) {
  return run_at_load(governor, steps, 1, {0.01, 0.01, with, without});
}

TEST(SpeculationGovernor, KeepsTheFasterModeAndKeepsMeasuringTheOther) {
  SpeculationGovernor governor(20, 5);
  EXPECT_TRUE(governor.drafting()) << "it starts by measuring drafting";
  // Drafting makes 3 tokens a step, plain 1: after both are measured it drafts, except probes.
  const int64_t drafted = run_governor(governor, 300, 3, 1);
  // Exploit phases of 20, 40, 80 .. steps drafting, probes of 5 measuring the plain engine.
  EXPECT_GE(drafted, 270);
  EXPECT_LT(drafted, 300) << "the plain mode is measured again now and then";
  EXPECT_DOUBLE_EQ(governor.rate(true), 300.0);
  EXPECT_DOUBLE_EQ(governor.rate(false), 100.0);

  // The load changes: drafting now loses. Within a few phases the governor stops drafting.
  run_governor(governor, 60, 1, 4);
  const int64_t later = run_governor(governor, 300, 1, 4);
  EXPECT_LE(later, 30);  // only the probes of drafting, ever rarer
  EXPECT_GT(later, 0);
  EXPECT_GT(governor.switches(), 4);
}

TEST(SpeculationGovernor, ProbesOfASlowModeAreShort) {
  SpeculationGovernor governor(64, 8);
  // Drafting steps take 30 times a plain step and make 2 tokens where plain makes 1 each:
  // drafting loses, and its later probes take 2 steps (an eighth of 64 plain steps' time is
  // about 2 drafting steps), not 8.
  int64_t drafted = 0;
  for (int i = 0; i < 2000; ++i) {
    const bool drafting = governor.drafting();
    if (i >= 100) drafted += drafting ? 1 : 0;
    governor.record(drafting ? 0.03 : 0.001, drafting ? 2 : 1);
  }
  EXPECT_FALSE(governor.drafting() && drafted > 40);
  EXPECT_LT(drafted, 40) << "probes of the slow mode must stay short";
  EXPECT_GT(drafted, 0);
}

TEST(SpeculationGovernor, DecidesPerLoad) {
  SpeculationGovernor governor(16, 4);
  // One sequence: drafting makes 3 tokens a step to plain's 1. Thirty-two: a drafting step makes
  // 64 tokens in the time plain makes 32 four times over. Loads alternate in runs of 40 steps.
  int64_t drafted_alone = 0, drafted_loaded = 0, steps_alone = 0, steps_loaded = 0;
  for (int run = 0; run < 40; ++run) {
    const bool loaded = run % 2 == 1;
    for (int i = 0; i < 40; ++i) {
      const bool drafting = governor.drafting();
      if (run >= 20 && i > 0) {  // settled; a run's first step still has the other load's mode
        (loaded ? drafted_loaded : drafted_alone) += drafting ? 1 : 0;
        ++(loaded ? steps_loaded : steps_alone);
      }
      if (loaded) governor.record(drafting ? 0.04 : 0.01, drafting ? 64 : 32, 32);
      else governor.record(0.01, drafting ? 3 : 1, 1);
    }
  }
  EXPECT_GT(drafted_alone, steps_alone * 8 / 10) << "alone, drafting pays";
  EXPECT_LT(drafted_loaded, steps_loaded * 2 / 10) << "at 32 sequences it does not";
  EXPECT_NEAR(governor.rate(true), 64 / 0.04, 1e-6);  // the last step's load: 32 sequences
  EXPECT_NEAR(governor.rate(false), 32 / 0.01, 1e-6);
}

// A closed loop of 8 clients runs steps of 7 and 8 sequences in turn (one request ends, the next
// one starts). The two counts sit in two loads (4-7, 8-15); without hysteresis each step would be
// the first at its load, never counted, and the governor would stay in its first probe, drafting,
// for good.
TEST(SpeculationGovernor, ALoadOnAnEdgeKeepsOneDecision) {
  SpeculationGovernor governor(16, 4);
  int64_t drafted = 0, steps = 0;
  for (int i = 0; i < 400; ++i) {
    const bool drafting = governor.drafting();
    if (i >= 200) {
      drafted += drafting ? 1 : 0;
      ++steps;
    }
    governor.record(drafting ? 0.05 : 0.01, 8, i % 2 == 0 ? 7 : 8);
  }
  EXPECT_LT(drafted, steps * 2 / 10) << "drafting is five times slower here";
  EXPECT_LT(governor.switches(), 40);
}

// A load ramping down from 32 sequences to 16: the new load starts in the mode its neighbour found
// faster, and its first probe of the other mode is short (sized from the neighbour's step times).
TEST(SpeculationGovernor, ANewLoadStartsFromItsNeighboursDecision) {
  SpeculationGovernor governor(16, 8);
  run_at_load(governor, 200, 32, {0.04, 0.01, 40, 32});  // drafting is slower at 32 sequences
  int64_t drafted = 0;
  for (int i = 0; i < 64; ++i) {  // 16 sequences, the same costs halved in tokens
    const bool drafting = governor.drafting();
    if (i == 1) {
      EXPECT_FALSE(drafting) << "the new load starts plain, as its neighbour decided";
    }
    drafted += drafting ? 1 : 0;
    governor.record(drafting ? 0.04 : 0.01, drafting ? 20 : 16, 16);
  }
  // Exploit 16, probe 2, exploit 32, probe 2: no first probe of 8 drafting steps.
  EXPECT_LE(drafted, 4);
  EXPECT_FALSE(governor.drafting());
}

// A neighbour's "drafting pays" does not carry over: the new load probes both modes first.
TEST(SpeculationGovernor, ANewLoadAboveADraftingLoadProbesFirst) {
  SpeculationGovernor governor(16, 8);
  run_at_load(governor, 100, 8, {0.02, 0.01, 24, 8});  // drafting is faster at 8 sequences
  int64_t drafted = 0;
  for (int i = 0; i < 9; ++i) {  // 16 sequences: the first probe, of drafting, is 8 steps
    if (i > 0) drafted += governor.drafting() ? 1 : 0;
    governor.record(0.02, 24, 16);
  }
  EXPECT_EQ(drafted, 8);
}

TEST(SpeculationGovernor, APhasesFirstStepIsNotCounted) {
  SpeculationGovernor governor(4, 3);
  // Probe of drafting: steps 1-3; the first (leftover of before) says 100 tokens, ignored.
  governor.record(0.01, 100);
  governor.record(0.01, 2);
  governor.record(0.01, 2);
  EXPECT_DOUBLE_EQ(governor.rate(true), 200.0);
  EXPECT_FALSE(governor.drafting());
  EXPECT_THROW(SpeculationGovernor(1, 3), Error);
}

}  // namespace
}  // namespace deepinfer::engine
