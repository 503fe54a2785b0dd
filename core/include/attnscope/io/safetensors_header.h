// Parsing and validation of a safetensors header. Torch-free, so the fuzz target links only this.
//
// File layout: u64 little-endian N, then N bytes of UTF-8 JSON {name: {dtype, shape, data_offsets},
// "__metadata__": {str: str}}, then the data buffer. Offsets are relative to the buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnscope/base/dtype.h"

namespace attnscope {

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;            // sorted by begin offset
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t data_offset = 0;                     // 8 + N: where the buffer starts in the file
};

// Validates everything that can be checked from the bytes: header length within the file, valid
// JSON object, known dtype, non-negative shape, shape x dtype size == byte span, offsets within the
// buffer, no two tensors overlapping. `file` names the file in error messages. Throws Error.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, std::size_t size,
                                           const std::string& file);

}  // namespace attnscope
