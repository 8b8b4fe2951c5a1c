#pragma once
// A model's weights as one name -> tensor table, whether stored in one .safetensors file or sharded
// across many. Every shard is mapped and validated at open (mapping is cheap; only touched pages
// are read), so a broken shard or an index that disagrees with the shards fails before inference
// starts, with an error naming the index, shard and tensor.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor_view.h"
#include "io/safetensors.h"

namespace deepinfer {

class Checkpoint {
 public:
  struct Tensor {
    const TensorInfo* info;  // name, dtype, stored shape, byte range
    const SafetensorsFile* shard;
  };

  // path: a folder or a single .safetensors file. A folder with model.safetensors.index.json opens
  // exactly the shards its weight_map names, and index and shards must agree tensor for tensor;
  // without an index every *.safetensors file in the folder is a shard. A tensor may live in only
  // one shard.
  static Checkpoint open(const std::string& path);

  const std::string& path() const { return path_; }
  std::span<const SafetensorsFile> shards() const { return shards_; }
  // Sorted by name.
  std::span<const Tensor> tensors() const { return tensors_; }
  const Tensor* find(std::string_view name) const;
  // Points into the shard's mapping; throws naming the checkpoint and tensor when absent.
  TensorView view(std::string_view name) const;
  // The index's "metadata" object (e.g. total_size); null without an index.
  const nlohmann::json& index_metadata() const { return index_metadata_; }

 private:
  Checkpoint() = default;
  void open_indexed(const std::string& index_file);
  void collect_tensors();

  std::string path_;
  std::vector<SafetensorsFile> shards_;
  std::vector<Tensor> tensors_;
  nlohmann::json index_metadata_;
};

}  // namespace deepinfer
