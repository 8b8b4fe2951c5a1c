#pragma once
// Open-addressing hash map from token string to id, keys packed in one arena: loading 128K
// vocabulary entries into std::unordered_map costs a node allocation each and dominated load time.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

class StringIdMap {
 public:
  void reserve(std::size_t entries);
  // Replaces the id of a key already present.
  void insert_or_assign(std::string_view key, int32_t id);
  std::optional<int32_t> find(std::string_view key) const;
  std::size_t size() const { return size_; }

  static uint64_t hash(std::string_view key);

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
    int32_t id = -1;  // -1: empty
  };
  std::size_t probe(std::string_view key, uint64_t h) const;
  std::vector<Slot> slots_;
  std::string arena_;
  std::size_t size_ = 0;
};

}  // namespace deepinfer::tokenizer
