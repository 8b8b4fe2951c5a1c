#pragma once
// Engram (DeepSeek-V4.1's n-gram memory) is built on its own branch in model/engram.{h,cpp}.
// Until that file is part of the tree, DEEPINFER_HAS_ENGRAM is 0 and Model::load refuses a
// config with engram layers (it never runs such a model without them).
#if __has_include("model/engram.h")
#include "model/engram.h"
#define DEEPINFER_HAS_ENGRAM 1
#else
#define DEEPINFER_HAS_ENGRAM 0
#endif
