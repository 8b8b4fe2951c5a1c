#pragma once
// Read-only memory map of a whole file. Checkpoints are mapped, never read into heap memory,
// so loading costs page faults only for the tensors actually touched.
#include <cstddef>
#include <span>
#include <string>

namespace deepinfer {

class MappedFile {
 public:
  // Throws deepinfer::Error naming the path when the file cannot be opened or mapped.
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Whole file into a string, for small text files (config.json, tokenizer.json).
std::string read_text_file(const std::string& path);

}  // namespace deepinfer
