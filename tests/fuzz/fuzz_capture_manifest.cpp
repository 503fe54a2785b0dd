// libFuzzer entry point for a capture store's manifest.json (parse_capture_manifest): any input must
// either parse or throw attnscope::Error. A parsed manifest must give the sizes CaptureStore and the
// analyses index with ([T, H, L, d] tensors, H heads sharing n_kv_head key/value heads).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "capture/capture_manifest.h"
#include "attnscope/base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attnscope::CaptureManifest m;
  try {
    m = attnscope::parse_capture_manifest(std::string_view(reinterpret_cast<const char*>(data), size),
                                          "manifest.json");
  } catch (const attnscope::Error&) {
    return 0;  // a clear rejection is the expected outcome for malformed input
  }
  for (int v : {m.n_layer, m.n_head, m.n_kv_head, m.head_dim, m.vocab_size, m.num_seqs})
    if (v < 1) std::abort();
  if (m.seq_len < 2) std::abort();  // captures need at least two tokens per window
  if (m.n_head % m.n_kv_head != 0) std::abort();
  if (m.sliding_window < 0) std::abort();  // 0 = none; a window is a number of keys
  return 0;
}
