#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>

#include "core/error.h"
#include "io/json_file.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kIndexFileName = "model.safetensors.index.json";

// weight_map values come from a downloaded file; a shard name like "../../etc/x" must not make us
// map files outside the checkpoint. Checked lexically, so symlinked shards (the Hugging Face cache
// links snapshot files to blobs elsewhere) still work.
// Returns the name normalized ("./a" and "a" are one shard).
std::string shard_inside_folder(const std::string& shard, const std::string& tensor, const std::string& index_file) {
  const fs::path relative(shard);
  const fs::path normal = relative.lexically_normal();
  if (shard.empty() || relative.is_absolute() || relative.has_root_name() || *normal.begin() == "..")
    fail(index_file, ": tensor '", tensor, "' is mapped to shard '", shard, "', which is not inside the checkpoint folder");
  return normal.generic_string();
}

std::vector<std::string> safetensors_files_in(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    std::error_code entry_error;
    if (it->path().extension() == ".safetensors" && it->is_regular_file(entry_error))
      names.push_back(it->path().filename().string());
  }
  if (error) fail(folder, ": cannot list folder: ", error.message());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint checkpoint;
  checkpoint.path_ = path;
  std::error_code error;
  const auto status = fs::status(path, error);
  if (!fs::exists(status)) fail(path, ": cannot open checkpoint: ", error ? error.message() : "no such file or folder");
  if (!fs::is_directory(status)) {
    checkpoint.shards_.push_back(SafetensorsFile::open(path));
    checkpoint.collect_tensors();
    return checkpoint;
  }
  const fs::path index_path = fs::path(path) / kIndexFileName;
  if (fs::exists(index_path, error)) {
    checkpoint.open_indexed(index_path.string());
  } else {
    const auto names = safetensors_files_in(path);
    if (names.empty()) fail(path, ": folder holds no .safetensors files and no ", kIndexFileName);
    for (const auto& name : names) checkpoint.shards_.push_back(SafetensorsFile::open((fs::path(path) / name).string()));
    checkpoint.collect_tensors();
  }
  return checkpoint;
}

void Checkpoint::open_indexed(const std::string& index_file) {
  const json index = read_json_file(index_file);
  if (!index.is_object()) fail(index_file, ": is a JSON ", index.type_name(), ", expected an object with \"weight_map\"");
  if (auto metadata = index.find("metadata"); metadata != index.end()) {
    if (!metadata->is_object()) fail(index_file, ": \"metadata\" is a JSON ", metadata->type_name(), ", expected an object");
    index_metadata_ = *metadata;
  }
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end()) fail(index_file, ": missing \"weight_map\"");
  if (!weight_map->is_object()) fail(index_file, ": \"weight_map\" is a JSON ", weight_map->type_name(), ", expected an object");

  // shard name -> first tensor the index places there (for naming it when the shard is missing)
  std::map<std::string, std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string())
      fail(index_file, ": weight_map entry for tensor '", tensor, "' is a JSON ", shard.type_name(), ", expected a shard file name");
    shard_names.emplace(shard_inside_folder(shard.get_ref<const std::string&>(), tensor, index_file), tensor);
  }
  for (const auto& [shard_name, tensor] : shard_names) {
    const fs::path shard_path = fs::path(path_) / shard_name;
    std::error_code error;
    if (!fs::is_regular_file(shard_path, error))
      fail(index_file, ": shard '", shard_name, "' (holding tensor '", tensor, "' among others) is missing: no file ",
           shard_path.string());
    shards_.push_back(SafetensorsFile::open(shard_path.string()));
  }
  collect_tensors();

  auto name_of = [&](const SafetensorsFile* shard) { return std::next(shard_names.begin(), shard - shards_.data())->first; };
  for (const auto& [tensor, shard] : weight_map->items()) {
    const std::string shard_name = fs::path(shard.get_ref<const std::string&>()).lexically_normal().generic_string();
    const Tensor* found = find(tensor);
    if (found == nullptr)
      fail(index_file, ": says tensor '", tensor, "' is in shard '", shard_name, "', but that shard has no such tensor");
    if (name_of(found->shard) != shard_name)
      fail(index_file, ": says tensor '", tensor, "' is in shard '", shard_name, "', but it is in shard '",
           name_of(found->shard), "'");
  }
  if (tensors_.size() != weight_map->size()) {
    for (const Tensor& tensor : tensors_)
      if (!weight_map->contains(tensor.info->name))
        fail(index_file, ": shard '", name_of(tensor.shard), "' holds tensor '", tensor.info->name,
             "', which the index does not list");
  }
}

// Called once all shards are in place: Tensor keeps pointers into shards_, which must not move again.
void Checkpoint::collect_tensors() {
  for (const SafetensorsFile& shard : shards_)
    for (const TensorInfo& info : shard.tensors()) tensors_.push_back(Tensor{&info, &shard});
  std::sort(tensors_.begin(), tensors_.end(),
            [](const Tensor& a, const Tensor& b) { return a.info->name < b.info->name; });
  auto duplicate = std::adjacent_find(tensors_.begin(), tensors_.end(),
                                      [](const Tensor& a, const Tensor& b) { return a.info->name == b.info->name; });
  if (duplicate != tensors_.end())
    fail(path_, ": tensor '", duplicate->info->name, "' appears in two shards: ", duplicate->shard->path(), " and ",
         std::next(duplicate)->shard->path());
}

const Checkpoint::Tensor* Checkpoint::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const Tensor& tensor, std::string_view key) { return tensor.info->name < key; });
  return it != tensors_.end() && it->info->name == name ? &*it : nullptr;
}

TensorView Checkpoint::view(std::string_view name) const {
  const Tensor* tensor = find(name);
  if (tensor == nullptr) fail(path_, ": checkpoint has no tensor named '", name, "'");
  return tensor->shard->view(name);
}

}  // namespace deepinfer
