// text_without (compile.h): free text as an automaton, so the marker it excludes is caught at
// every position and the grammar stays right-linear (each automaton state one rule, whose mask
// the matcher's cache keeps).
#include "grammar/free_text.h"

#include "grammar/compile.h"
#include "grammar/json_schema_dfa.h"

namespace deepinfer::grammar {

Grammar text_without(std::string_view excluded) {
  Grammar grammar;
  schema::Dfa text = schema::utf8_dfa();
  if (!excluded.empty()) text = schema::complement(schema::containing(excluded), schema::DfaLimits{});
  grammar.set_start(schema::emit_dfa(grammar, text, schema::DfaEncoding::raw, {}, "text"));
  grammar.validate();
  return grammar;
}

Grammar text_without_any(const std::vector<std::string>& excluded) {
  schema::Dfa found;
  bool any = false;
  for (const std::string& marker : excluded) {
    if (marker.empty()) continue;
    found = any ? schema::unite(found, schema::containing(marker), schema::DfaLimits{}) : schema::containing(marker);
    any = true;
  }
  Grammar grammar;
  const schema::Dfa text = any ? schema::complement(found, schema::DfaLimits{}) : schema::utf8_dfa();
  grammar.set_start(schema::emit_dfa(grammar, text, schema::DfaEncoding::raw, {}, "text"));
  grammar.validate();
  return grammar;
}

}  // namespace deepinfer::grammar
