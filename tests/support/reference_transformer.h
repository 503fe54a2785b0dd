// An independent float64 reference forward pass for the checkpoint families attnscope reads:
// GPT-2, GPT-NeoX (Pythia), Llama, Mistral, Qwen2, Qwen3 (Hugging Face layouts) and llama2.c. It is written in plain loops
// over std::vector<double> straight from the raw named weights, as the Hugging Face transformers
// modules and karpathy/llama2.c's run.c compute them, and shares no code with attnscope's core: a
// convention error in core cannot be mirrored here by reuse.
//
// Conventions confirmed against the upstream sources (see reference_transformer.cpp for each one at
// the place it is used):
//   transformers/models/gpt2/modeling_gpt2.py, transformers/models/gpt_neox/modeling_gpt_neox.py,
//   transformers/models/llama/modeling_llama.py, transformers/models/mistral/modeling_mistral.py,
//   transformers/models/qwen2/modeling_qwen2.py, transformers/models/qwen3/modeling_qwen3.py,
//   transformers/masking_utils.py (sliding_window_overlay), transformers/modeling_rope_utils.py
//   (_compute_llama3_parameters), transformers/activations.py, llama2.c/run.c.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnscope::test {

// One tensor exactly as a test writes it to disk: float32 values, row-major, with its shape. The
// reference reads these same float32 values (widened to double), so the model under test and the
// reference start from bit-identical weights.
struct RefTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t numel() const;
};

// Checkpoint tensors by their on-disk name (Hugging Face names, or llama2.c field names).
using RefWeights = std::map<std::string, RefTensor>;

enum class RefArch { GPT2, GPTNeoX, Llama, Llama2C, Mistral, Qwen2, Qwen3 };

// The architecture of a small random test model, in the terms of its config.json / .bin header.
struct RefConfig {
  RefArch arch = RefArch::GPT2;
  int n_layer = 2;
  int n_head = 4;
  int n_kv_head = 4;  // Llama num_key_value_heads / llama2.c n_kv_heads; == n_head elsewhere
  int d_model = 32;
  int d_ff = 128;  // GPT-2 n_inner (4*D when null), NeoX/Llama intermediate_size, llama2.c hidden_dim
  int vocab = 50;
  int n_ctx = 64;  // n_positions / max_position_embeddings / seq_len
  double norm_eps = 1e-5;           // layer_norm_epsilon / layer_norm_eps / rms_norm_eps
  double rotary_pct = 1.0;          // GPT-NeoX rotary_pct
  double rope_theta = 10000.0;      // NeoX rotary_emb_base, Llama rope_theta (llama2.c: always 1e4)
  bool parallel_residual = true;    // GPT-NeoX use_parallel_residual
  bool tied = false;                // Llama tie_word_embeddings; llama2.c positive vocab_size
  int head_dim_override = 0;        // Llama family "head_dim" in config.json; 0: d_model / n_head
  bool attention_bias = false;      // Llama / Qwen3 attention_bias (q, k, v and o biases)
  int sliding_window = 0;           // Mistral sliding_window (0: null)
  // Llama rope_scaling {"rope_type": "llama3", ...}; llama3_factor 0: rope_scaling null.
  double llama3_factor = 0, llama3_low = 1, llama3_high = 4;
  int llama3_original_context = 0;

  int head_dim() const { return head_dim_override > 0 ? head_dim_override : d_model / n_head; }
  // GPT-NeoX: rotary_ndims = int(head_size * rotary_pct); Llama/llama2.c: the whole head; GPT-2: 0.
  int rotary_dim() const;
};

// Deliberately wrong conventions. The reference never uses these for the real comparison; the tests
// run them to prove that the comparison would notice each mistake (the check has power).
struct RefOptions {
  bool swap_rope_style = false;  // interleaved pairs (2i, 2i+1) where rotate-half is right, and back
  bool tile_kv_heads = false;    // query head h reads kv head h % n_kv instead of h / group
  bool swap_qkv_layout = false;  // GPT-2 fused qkv read per head, NeoX fused qkv read as [q|k|v]
  bool swap_gelu = false;        // erf GELU where the tanh approximation is right, and back
  bool swap_residual = false;    // GPT-NeoX parallel <-> sequential residual
  bool full_rotary = false;      // GPT-NeoX: rotate the whole head, not the first rotary_ndims dims
  bool swap_classifier = false;  // untied models: logits from the token embedding, not the head
  bool qk_norm_after_rope = false;  // Qwen3: q/k norm after RoPE instead of before
  bool drop_attn_bias = false;      // Qwen2 (and attention_bias models): ignore the q/k/v/o biases
  bool no_sliding_window = false;   // Mistral: full causal attention past the window
  bool window_one_wider = false;    // Mistral: key j visible when i - j <= W (one key too many)
  bool no_rope_scaling = false;     // Llama 3: plain inverse frequencies, rope_scaling ignored
};

// What one attention layer computed. All per-head tensors are [H][L][d], flattened with index
// (h * L + t) * d + i, with key/value heads already expanded to the H query heads.
struct RefLayerCapture {
  std::vector<double> q, k;          // after RoPE
  std::vector<double> q_pre, k_pre;  // before RoPE (== q, k for learned positions)
  std::vector<double> v;
  std::vector<double> out;    // per-head attention output, before the output projection
  std::vector<double> probs;  // [H][L][L]: causal softmax(q k^T / sqrt(d)), zero above the diagonal
                              // and outside a sliding window
};

struct RefResult {
  int L = 0, V = 0, H = 0, d = 0;
  std::vector<double> logits;  // [L][V]
  std::vector<RefLayerCapture> layers;
  double logit(int t, int v) const { return logits[static_cast<size_t>(t) * V + v]; }
};

// The reference forward pass of one sequence (batch 1). Throws std::runtime_error when a weight is
// missing or has the wrong shape, so a writer/reference mismatch cannot pass silently.
RefResult reference_forward(const RefConfig& c, const RefWeights& w, const std::vector<int64_t>& ids,
                            const RefOptions& opt = {});

// Mean next-token cross-entropy (nats) of ids[1..] given ids[..-1], from reference logits.
double reference_mean_loss(const RefConfig& c, const RefWeights& w, const std::vector<int64_t>& ids);

// Greedy decoding with the reference: each step runs the full sequence and appends the argmax of
// the last position. `min_margin` receives the smallest gap, over the steps, between the best and
// second-best logit divided by the largest |logit| of that step (how safe the argmax is against
// float32 rounding in the model under test). Stops after appending `stop_id` (>= 0).
std::vector<int64_t> reference_greedy(const RefConfig& c, const RefWeights& w,
                                      std::vector<int64_t> prompt, int steps, int64_t stop_id,
                                      double* min_margin);

}  // namespace attnscope::test
