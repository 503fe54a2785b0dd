// Memory-mapped safetensors files, sharded checkpoints, and an atomic writer.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attnscope/io/safetensors_header.h"

namespace attnscope {

// One file, mapped for the object's lifetime. Tensors returned by `tensor()` are views into the
// mapping when no conversion is needed; they keep the mapping alive.
//
// The mapping is private copy-on-write: writing a view (an in-place op) copies the touched pages
// and never changes the file, and views of other tensors of the same file stay as they were.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws Error naming the file

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const TensorEntry* find(const std::string& name) const;  // nullptr when absent
  bool contains(const std::string& name) const { return find(name) != nullptr; }

  // The tensor in its stored dtype (F16/BF16/F32/I64/...); throws when the name is absent.
  // A view of the mapping, or a copy when the data is not aligned for its element type
  // (safetensors does not promise alignment) or holds no elements.
  at::Tensor tensor(const std::string& name) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> map_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, std::size_t> by_name_;  // name -> index in header_.tensors
};

// The weights of a model: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json` ({"weight_map": {tensor: file}}). Shards are opened lazily, so
// the store is not safe to share between threads without a lock.
// Pickle checkpoints (pytorch_model.bin, *.pt, ...) are refused: unpickling executes code.
class WeightStore {
 public:
  // `path` is a model directory, a .safetensors file, or an index .json. Throws Error.
  explicit WeightStore(const std::string& path);

  // The file or index the weights come from (named in error messages).
  const std::string& source() const { return source_; }
  bool contains(const std::string& name) const;
  // Converted to float32; checks the shape when `shape` is non-empty (so a 0-d shape cannot be
  // asked for); refuses NaN/Inf. Throws Error naming file+tensor. A float32 tensor stored aligned
  // comes back as a copy-on-write view of the mapping (see SafetensorsFile).
  at::Tensor get(const std::string& name, const std::vector<int64_t>& shape = {}) const;
  // A weight in its stored dtype (F32, F16 or BF16; F64 comes back as float32): a copy-on-write view
  // of the mapping, so a model's weights take no memory beyond the file's pages, which the kernel
  // can drop and read again (a model larger than RAM streams from the file). Checked as get() is:
  // shape, NaN/Inf (read in the stored dtype, without a converted copy); integer tensors are refused.
  at::Tensor stored(const std::string& name, const std::vector<int64_t>& shape = {}) const;
  // Any tensor exactly as stored (integers too), checked as get() is: for copying a checkpoint.
  at::Tensor as_stored(const std::string& name, const std::vector<int64_t>& shape = {}) const;
  // Every tensor's header entry (name, dtype, shape, bytes), by name: opens every shard and reads
  // its header only, not its data.
  std::vector<TensorEntry> entries() const;
  std::vector<std::string> names() const;  // sorted
  std::vector<std::string> files() const;  // full paths of the distinct files, sorted
  // Opens every file so a broken shard fails now, not mid-forward.
  void validate_all() const;

 private:
  const SafetensorsFile& file_for(const std::string& name) const;
  at::Tensor checked(const std::string& name, const std::vector<int64_t>& shape, std::string* where) const;
  std::string source_;
  std::string dir_;
  std::map<std::string, std::string> weight_map_;  // tensor -> file name
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes tensors (made contiguous, CPU, stored dtype kept) to `path` via `path.tmp` + rename, so an
// existing file is never left half-written. Supported dtypes: float64/32/16, bfloat16, int64/32/16/8,
// uint8, bool. Tensors are laid out by descending element size so every one is aligned without
// gaps (as Hugging Face's writer does); the header is padded with spaces to a multiple of 8 bytes.
// Throws Error (unsupported dtype, duplicate or reserved name, I/O failure).
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace attnscope
