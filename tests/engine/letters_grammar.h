#pragma once
// The engine tests' small constraint: the tiny model's ids read as letters, and a grammar over
// them with room for sampling to wander (shared by the constrained and overlap-schedule tests).
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "tiny_model.h"

namespace deepinfer::engine::testing {

// The tiny model's 512 ids as bytes: id i is the letter 'a' + i % 26, except EOS and the trigger.
inline std::shared_ptr<const grammar::Vocabulary> letters() {
  std::vector<std::string> bytes(512);
  for (int i = 0; i < 512; ++i) bytes[static_cast<std::size_t>(i)] = std::string(1, static_cast<char>('a' + i % 26));
  bytes[kEos] = "";
  bytes[kTrigger] = "";
  return std::make_shared<const grammar::Vocabulary>(bytes, std::vector<int32_t>{kTrigger}, kEos);
}

// "a" "b"* "c": three letters' worth of choices, so sampling has room to wander.
inline grammar::Grammar abc() {
  grammar::Grammar g;
  const grammar::RuleId s = g.add_rule("s");
  const grammar::RuleId bs = g.add_rule("bs");
  grammar::Sequence top = g.literal("a");
  top.push_back(grammar::Grammar::rule(bs));
  const grammar::Sequence c = g.literal("c");
  top.insert(top.end(), c.begin(), c.end());
  g.add_alternative(s, top);
  grammar::Sequence more = g.literal("b");
  more.push_back(grammar::Grammar::rule(bs));
  g.add_alternative(bs, more);
  g.add_alternative(bs, {});
  g.set_start(s);
  return g;
}

}  // namespace deepinfer::engine::testing
