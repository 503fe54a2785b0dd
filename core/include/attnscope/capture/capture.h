// The capture store (SPEC section 4): per-layer q, k, v of T windows x L tokens of sample text.
//
//   DIR/manifest.json         model (its sliding window too), texts, tokenization, T, L, seed, dtype, heads, kv heads, d
//   DIR/ids.safetensors       "ids" int64 [T, L]
//   DIR/layer_{s}.safetensors "q", "k", "v" [T, H, L, d] (kv heads expanded to the H query heads)
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/base/dtype.h"
#include "attnscope/model/model.h"
#include "attnscope/base/progress.h"
#include "attnscope/io/text_source.h"

namespace attnscope {

struct CaptureOptions {
  int seq_len = 256;   // L
  int num_seqs = 8;    // T
  uint64_t seed = 0;
  DType dtype = DType::F32;  // F32 or F16 on disk
  bool pre_rope = false;     // store q, k before RoPE instead of after
  int batch = 4;             // windows per forward pass
  // T is a most, not a must: a text with fewer windows (at least one) gives them all. For callers
  // whose T is a default the user never chose (the workbench); `capture --num-seqs T` stays strict.
  bool fewer_windows_ok = false;
};

// Tokenizes the documents into one stream (each document followed by EOS when the tokenizer has
// one), cuts it into non-overlapping windows of L tokens (L-1 after a leading BOS for models that
// expect one), and draws T of them with a seeded shuffle (all of them when there are fewer and
// fewer_windows_ok). Throws Error when L exceeds the context length, or the corpus has fewer than T
// windows (not even one with fewer_windows_ok), saying what would fit.
std::vector<std::vector<int64_t>> draw_windows(const Tokenizer& tok, int n_ctx,
                                               const std::vector<TextDocument>& docs,
                                               const CaptureOptions& opt);

class CaptureStore;

// Runs the model over the windows and writes the store to `out_dir` (OutputDir: an existing
// `out_dir` is replaced only when the capture succeeded); returns it opened for reading.
CaptureStore capture_to_dir(const LoadedModel& m, const std::vector<TextDocument>& docs,
                    const CaptureOptions& opt, const std::string& out_dir,
                    const ProgressFn& progress = nullptr);

// Read side: memory-mapped, one layer at a time.
class CaptureStore {
 public:
  explicit CaptureStore(const std::string& dir);  // validates the manifest and files; throws Error

  const std::string& dir() const { return dir_; }
  int num_layers() const { return n_layer_; }
  int num_heads() const { return n_head_; }
  int num_kv_heads() const { return n_kv_head_; }
  int head_dim() const { return head_dim_; }
  int seq_len() const { return seq_len_; }
  int num_seqs() const { return num_seqs_; }
  const std::string& manifest_json() const { return manifest_text_; }
  const std::string& model_path() const { return model_path_; }  // as recorded at capture time
  // The model's sliding window (ModelConfig::sliding_window; 0 = none): query i of the captured
  // softmax attention saw key j only when i - j < it. Every softmax map rebuilt from the store's
  // q and k (analysis, maps, distillation targets) applies it.
  int sliding_window() const { return sliding_window_; }
  // The layer inputs' width (the model's d_model); 0 for a capture without them (older stores).
  int d_model() const { return d_model_; }

  at::Tensor ids() const;  // int64 [T, L]
  // The tokenizer the capture was made with (for token labels); throws Error when it has moved.
  std::unique_ptr<Tokenizer> load_tokenizer() const;
  // "q", "k" or "v" of layer s as float32 [T, H, L, d]. Throws Error naming the file, layer and
  // head when any value is NaN or infinite.
  at::Tensor layer_tensor(int layer, const std::string& which) const;
  // Layer s's input x (the normed hidden state its projections read) as float32 [T, L, d_model]:
  // what gated decays are computed from. Throws Error naming the store when it has none (a
  // capture made before attnscope stored them) or a value is NaN or infinite.
  at::Tensor layer_inputs(int layer) const;

 private:
  std::string dir_, manifest_text_, model_path_, tokenizer_kind_, tokenizer_path_;
  int vocab_size_ = 0, sliding_window_ = 0, d_model_ = 0;
  int n_layer_ = 0, n_head_ = 0, n_kv_head_ = 0, head_dim_ = 0, seq_len_ = 0, num_seqs_ = 0;
};

}  // namespace attnscope
