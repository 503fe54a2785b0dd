// A safetensors file written in pieces: the header (all names, dtypes and shapes) first, then
// blocks of each tensor at their offsets. Lets a capture stream batches to disk without holding a
// whole layer in memory. Writes to `path.tmp`; finish() renames it into place.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnscope/io/safetensors_header.h"

namespace attnscope {

class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(std::string path, const std::vector<TensorEntry>& layout,
                          const std::map<std::string, std::string>& metadata);
  ~SafetensorsStreamWriter();  // removes the .tmp file unless finish() ran
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  // Writes `bytes` bytes at byte `offset` within tensor `name`.
  void write(const std::string& name, uint64_t offset, const void* data, uint64_t bytes);
  void finish();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorEntry> entries_;
};

}  // namespace attnscope
