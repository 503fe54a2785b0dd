// libFuzzer entry point for the safetensors header parser. Any input must either parse or throw
// attnscope::Error; anything else (another exception, a sanitizer report, a broken invariant of a
// successful parse) is a crash libFuzzer records.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "attnscope/base/error.h"
#include "attnscope/io/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const attnscope::SafetensorsHeader h = attnscope::parse_safetensors_header(data, size, "fuzz");
    // What a successful parse promises to the reader, which trusts it when it hands out tensors.
    if (h.data_offset < 8 || h.data_offset > size) std::abort();
    const uint64_t buffer = size - h.data_offset;
    uint64_t previous_end = 0;
    for (const auto& t : h.tensors) {
      if (t.end < t.begin || t.end > buffer) std::abort();
      if (static_cast<uint64_t>(t.numel()) * attnscope::dtype_size(t.dtype) != t.end - t.begin)
        std::abort();
      if (t.begin < previous_end) std::abort();  // sorted and not overlapping
      previous_end = t.end;
    }
  } catch (const attnscope::Error&) {
    // A clear rejection is the expected outcome for malformed input.
  }
  return 0;
}
