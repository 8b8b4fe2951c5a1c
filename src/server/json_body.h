#pragma once
// Request bodies as order-preserving JSON, in time linear in their size and within a budget.
//
// Why: nlohmann::ordered_json's object is a vector searched linearly on every insert, so its own
// parser spends O(keys^2) on an object with many keys, before any check can look at it (100k
// keys: 15 s; the 8 MiB body limit holds ~800k). This parser builds the same ordered_json
// (duplicate keys keep their first place and their last value, as nlohmann's does) with a hash
// index per large object, and stops at the first key, value or nesting level past the budget.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace deepinfer::server {

struct JsonBudget {
  std::size_t max_keys = 1 << 14;      // object keys in the whole body (16,384: ~4,000 messages)
  std::size_t max_values = 1 << 22;    // values of any kind in the whole body (a 1M-token prompt fits)
  std::size_t max_depth = 512;         // nesting of arrays and objects
};

struct JsonBodyResult {
  enum class Status { Ok, Malformed, OverBudget };
  Status status = Status::Ok;
  nlohmann::ordered_json value;
  std::string message;  // why it was refused (OverBudget: which budget)
};

JsonBodyResult parse_json_with_budget(std::string_view text, const JsonBudget& budget = {});

}  // namespace deepinfer::server
