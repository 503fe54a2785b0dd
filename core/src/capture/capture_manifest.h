// The manifest.json of a capture store (capture.h, SPEC section 4): what the reader needs from it,
// parsed and checked without touching the file system or LibTorch (so it can be fuzzed alone).
#pragma once
#include <string>
#include <string_view>

namespace attnscope {

inline constexpr const char* kCaptureFormat = "attnscope-capture";  // manifest "format"
inline constexpr int kCaptureFormatVersion = 2;                     // manifest "version" (1 is read too)

struct CaptureManifest {
  int n_layer = 0;     // "model"."layers" (version 1: top-level "layers")
  int n_head = 0;      // "model"."heads" (version 1: "model"."n_head")
  int n_kv_head = 0;   // "model"."kv_heads" (version 1: "model"."n_kv_head")
  int head_dim = 0;    // "model"."head_dim"
  int vocab_size = 0;  // "model"."vocab_size"
  // "model"."sliding_window": the model's softmax window (ModelConfig::sliding_window), which every
  // softmax map computed from the capture applies; 0 = none (also when absent: captures made
  // before it was recorded, of models without a window).
  int sliding_window = 0;
  // "model"."d_model": the layer inputs' width (the "x" tensors gated decays train from); 0 when
  // absent (captures made before attnscope stored the inputs).
  int d_model = 0;
  int seq_len = 0;     // "seq_len" (L)
  int num_seqs = 0;    // "num_seqs" (T)
  std::string tokenizer_kind;  // "tokenization"."tokenizer"
  std::string tokenizer_path;  // "tokenization"."tokenizer_path" ("" when absent)
  std::string model_path;      // "model"."path" ("" when absent)
};

// Parses the text of a manifest.json; throws Error naming `where` for anything malformed.
CaptureManifest parse_capture_manifest(std::string_view text, const std::string& where);

}  // namespace attnscope
