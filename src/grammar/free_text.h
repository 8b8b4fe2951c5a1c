#pragma once
// Free text that excludes several markers at once (compile.h's text_without excludes one).
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

// Any valid UTF-8 text that contains none of `excluded` (reasoning, which neither ends nor opens a
// tool-call block before its marker).
Grammar text_without_any(const std::vector<std::string>& excluded);

}  // namespace deepinfer::grammar
