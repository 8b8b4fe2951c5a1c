#include "grammar/grammar.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace deepinfer::grammar {

ByteSet ByteSet::of(uint8_t byte) {
  ByteSet set;
  set.add(byte);
  return set;
}

ByteSet ByteSet::range(uint8_t first, uint8_t last) {
  ByteSet set;
  set.add_range(first, last);
  return set;
}

ByteSet ByteSet::all() {
  ByteSet set;
  set.words = {~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
  return set;
}

void ByteSet::add_range(uint8_t first, uint8_t last) {
  for (unsigned byte = first; byte <= last; ++byte) add(static_cast<uint8_t>(byte));
}

void ByteSet::add(const ByteSet& other) {
  for (std::size_t i = 0; i < words.size(); ++i) words[i] |= other.words[i];
}

ByteSet ByteSet::complement() const {
  ByteSet set;
  for (std::size_t i = 0; i < words.size(); ++i) set.words[i] = ~words[i];
  return set;
}

RuleId Grammar::add_rule(std::string name) {
  name_bytes_ += static_cast<int64_t>(name.size());
  rules_.push_back({std::move(name), {}, {}});
  return static_cast<RuleId>(rules_.size() - 1);
}

void Grammar::add_alternative(RuleId rule, Sequence symbols) {
  if (rule < 0 || rule >= rule_count()) fail("grammar: alternative for rule ", rule, " of ", rule_count());
  size_ += static_cast<int64_t>(symbols.size()) + 1;
  ++alternative_count_;
  rules_[static_cast<std::size_t>(rule)].alternatives.push_back(std::move(symbols));
}

Symbol Grammar::terminal(const ByteSet& set) {
  const auto [found, added] = terminal_index_.emplace(set.words, static_cast<int32_t>(terminals_.size()));
  if (added) terminals_.push_back(set);
  return {false, found->second};
}

int64_t Grammar::bytes() const {
  const auto count = [](auto n, std::size_t each) { return static_cast<int64_t>(n) * static_cast<int64_t>(each); };
  return count(size_, sizeof(Symbol)) + count(alternative_count_, sizeof(Sequence)) +
         count(rules_.size(), sizeof(Rule)) + name_bytes_ + count(terminals_.size(), sizeof(ByteSet) + 64);  // + its index entry
}

Sequence Grammar::literal(std::string_view text) {
  Sequence out;
  out.reserve(text.size());
  for (char c : text) out.push_back(terminal(ByteSet::of(static_cast<uint8_t>(c))));
  return out;
}

void Grammar::add_relaxation(Relaxation relaxation) {
  if (std::find(relaxations_.begin(), relaxations_.end(), relaxation) == relaxations_.end())
    relaxations_.push_back(std::move(relaxation));
}

void Grammar::name_relaxations(std::string_view field) {
  for (Relaxation& relaxation : relaxations_)
    if (relaxation.field.empty()) relaxation.field = field;
}

RuleId Grammar::include(const Grammar& other, std::string_view field) {
  for (Relaxation relaxation : other.relaxations_) {
    if (relaxation.field.empty()) relaxation.field = field;
    add_relaxation(std::move(relaxation));
  }
  const RuleId offset = rule_count();
  std::vector<Symbol> terminals;
  terminals.reserve(static_cast<std::size_t>(other.terminal_count()));
  for (int32_t t = 0; t < other.terminal_count(); ++t) terminals.push_back(terminal(other.terminal_set(t)));
  const int32_t families = family_count_;
  family_count_ += other.family_count_;
  for (RuleId r = 0; r < other.rule_count(); ++r) {
    add_rule(other.rule_name(r));
    Counted counted = other.counted(r);
    if (counted.family >= 0) counted.family += families;
    set_counted(offset + r, counted);
  }
  for (RuleId r = 0; r < other.rule_count(); ++r) {
    for (const Sequence& sequence : other.alternatives(r)) {
      Sequence copy;
      copy.reserve(sequence.size());
      for (const Symbol& s : sequence)
        copy.push_back(s.is_rule ? rule(s.index + offset) : terminals[static_cast<std::size_t>(s.index)]);
      add_alternative(offset + r, std::move(copy));
    }
  }
  return offset + other.start();
}

void Grammar::validate() const {
  if (start_ < 0 || start_ >= rule_count()) fail("grammar: no start rule");
  for (RuleId r = 0; r < rule_count(); ++r) {
    if (rules_[static_cast<std::size_t>(r)].alternatives.empty())
      fail("grammar: rule ", rule_name(r), " has no alternative");
    for (const Sequence& alternative : alternatives(r))
      for (const Symbol& symbol : alternative) {
        const int32_t bound = symbol.is_rule ? rule_count() : terminal_count();
        if (symbol.index < 0 || symbol.index >= bound)
          fail("grammar: rule ", rule_name(r), " names ", symbol.is_rule ? "rule " : "terminal ", symbol.index,
               ", which does not exist");
      }
  }
}

namespace {

std::string describe(const ByteSet& set) {
  std::string out = "[";
  for (unsigned b = 0; b < 256; ++b) {
    if (!set.contains(static_cast<uint8_t>(b))) continue;
    unsigned e = b;
    while (e + 1 < 256 && set.contains(static_cast<uint8_t>(e + 1))) ++e;
    const auto put = [&](unsigned v) {
      char text[8];
      if (v >= 0x21 && v < 0x7f && v != '\\' && v != ']' && v != '-') {
        out += static_cast<char>(v);
      } else {
        std::snprintf(text, sizeof text, "\\x%02X", v);
        out += text;
      }
    };
    put(b);
    if (e > b) {
      out += '-';
      put(e);
    }
    b = e;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  const auto name_of = [&](RuleId r) {
    if (!rule_name(r).empty()) return rule_name(r);
    std::string name(1, 'r');
    name += std::to_string(r);
    return name;
  };
  std::string out;
  for (RuleId r = 0; r < rule_count(); ++r) {
    out += name_of(r);
    out += r == start_ ? " (start) ::=" : " ::=";
    bool first = true;
    for (const Sequence& alternative : alternatives(r)) {
      out += first ? " " : " | ";
      first = false;
      if (alternative.empty()) out += "\"\"";
      for (std::size_t i = 0; i < alternative.size(); ++i) {
        if (i > 0) out += ' ';
        const Symbol& s = alternative[i];
        out += s.is_rule ? name_of(s.index) : describe(terminal_set(s.index));
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace deepinfer::grammar
