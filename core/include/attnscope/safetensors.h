// Memory-mapped safetensors files, sharded checkpoints, and an atomic writer.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/safetensors_header.h"

namespace attnscope {

// One file, mapped read-only for the object's lifetime. Tensors returned by `tensor()` are views
// into the mapping when no conversion is needed; they keep the mapping alive.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws Error naming the file

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const TensorEntry* find(const std::string& name) const;  // nullptr when absent
  bool contains(const std::string& name) const { return find(name) != nullptr; }

  // The tensor in its stored dtype (F16/BF16/F32/I64/...); throws when the name is absent.
  at::Tensor tensor(const std::string& name) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> map_;
  SafetensorsHeader header_;
};

// The weights of a model: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json` ({"weight_map": {tensor: file}}). Files are opened lazily.
class WeightStore {
 public:
  // `path` is a model directory, a .safetensors file, or an index .json. Throws Error.
  explicit WeightStore(const std::string& path);

  bool contains(const std::string& name) const;
  // Converted to float32; checks the shape when `shape` is given. Throws Error naming file+tensor.
  at::Tensor get(const std::string& name, const std::vector<int64_t>& shape = {}) const;
  std::vector<std::string> names() const;
  std::vector<std::string> files() const;
  // Opens every file so a broken shard fails now, not mid-forward.
  void validate_all() const;

 private:
  const SafetensorsFile& file_for(const std::string& name) const;
  std::string dir_;
  std::map<std::string, std::string> weight_map_;  // tensor -> file name
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes tensors (made contiguous, CPU, stored dtype kept) to `path` via `path.tmp` + rename, so an
// existing file is never left half-written. Throws Error.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace attnscope
