// A pretrained causal transformer in LibTorch: GPT-2, GPT-NeoX (Pythia), the Llama family (Llama,
// Mistral, Qwen2, Qwen3) and llama2.c models share one forward pass; loaders differ only in how they name and lay out the weights.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/model/model_config.h"
#include "attnscope/base/progress.h"
#include "attnscope/tokenize/tokenizer.h"

namespace attnscope {

// Per-layer weights in PyTorch Linear layout ([out, in]); undefined tensors are absent (no bias).
struct LayerWeights {
  at::Tensor ln1_w, ln1_b;          // pre-attention norm
  at::Tensor wq, wk, wv, wo;        // [H*d, D], [Hkv*d, D], [Hkv*d, D], [D, H*d]
  at::Tensor bq, bk, bv, bo;
  at::Tensor q_norm, k_norm;        // [d] per-head RMSNorm weights of q and k (Qwen3), before RoPE
  at::Tensor ln2_w, ln2_b;          // pre-MLP norm
  at::Tensor w_up, b_up;            // [F, D]
  at::Tensor w_gate;                // [F, D], SwiGLU only
  at::Tensor w_down, b_down;        // [D, F]
};

// Weights stay in the dtype they are stored in (a loaded checkpoint's are views of its memory-mapped
// files); the forward pass converts each layer to `compute` when it runs and drops the converted copy
// after, so a model needs its file's pages plus one layer in the compute dtype. Attention itself
// (scores, softmax, feature maps, what a capture hook sees), the norms and the logits are float32
// whatever `compute` is (float64 for a float64 model).
struct ModelWeights {
  at::ScalarType compute = at::kFloat;  // float32, bfloat16 or float16 (--dtype); float64 for exact checks
  at::Tensor tok_emb;  // [V, D]
  at::Tensor pos_emb;  // [n_ctx, D], learned positions only
  std::vector<LayerWeights> layers;
  at::Tensor lnf_w, lnf_b;
  at::Tensor lm_head;  // [V, D]; == tok_emb when tied
};

// The dtypes a model computes in, by the names --dtype takes: f32, bf16, f16, f64 (one table).
at::ScalarType parse_compute_dtype(const std::string& name);  // Error naming "compute dtype"
const char* compute_dtype_name(at::ScalarType t);
std::vector<std::string> compute_dtype_names();

// A copy of the weights on `device` (tied weights stay one tensor); the model runs where they are.
// With `dtype`, every weight is cast to it too (bench generate's float32 copy of a bf16 checkpoint).
ModelWeights weights_on(const ModelWeights& weights, const at::Device& device, std::optional<at::ScalarType> dtype = std::nullopt);

// What one attention layer saw, handed to a capture hook. Shapes [B, H, L, d] with key/value heads
// already expanded to the H query heads (GQA). q/k are after RoPE; q_pre/k_pre before it (after a q/k norm; equal to
// q/k for learned positions). probs [B, H, L, L] only when asked for (it is L^2 per head).
struct AttentionActivations {
  int layer = 0;
  at::Tensor q, k, q_pre, k_pre, v;
  at::Tensor x;      // the layer's input [B, L, D]: the normed hidden state the projections read
  at::Tensor resid;  // the residual stream entering the layer [B, L, D] (x is its norm), compute dtype
  at::Tensor out;    // per-head attention output, [B, H, L, d], before the output projection
  at::Tensor probs;  // causal softmax(q k^T / sqrt(d)) (within the sliding window, if any), undefined unless want_probs
};

struct CaptureHook {
  std::function<void(const AttentionActivations&)> on_layer;
  bool want_probs = false;
};

struct HeadFeatureMaps;  // head_feature_maps.h: the feature map of every head

// What Model::generate_greedy did, when asked (tests, benchmarks).
struct GenerationTrace {
  bool keep_logits = false;        // in: keep the logits every token was chosen from
  std::vector<at::Tensor> logits;  // out: float32 [V] on the CPU per token chosen (the stop token's too)
  // out, softmax models with the key-value cache: the most keys any layer's cache held at once
  // (at most sliding_window with a window), and the most slots any layer had allocated.
  int64_t kv_cache_tokens = 0, kv_cache_slots = 0;
};

class Model {
 public:
  Model(ModelConfig config, ModelWeights weights);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  ModelWeights& mutable_weights() { return weights_; }  // training (pretrain) updates these

  // A converted model (SPEC 7): every attention layer runs causal linear attention with its heads'
  // feature maps instead of softmax; everything else is unchanged. Null (the default) = softmax.
  // Throws Error when the maps do not fit the model (layers, heads, head dimension).
  void set_feature_maps(std::shared_ptr<const HeadFeatureMaps> maps);
  const HeadFeatureMaps* feature_maps() const { return linear_.get(); }

  // The recurrent form of a converted model: one token at a time, per head a state
  // S = sum phi(k) v^T [M, d_v] and z = sum phi(k) [M] of constant size. Equals forward() up to
  // float rounding; generate_greedy() decodes this way. Throws Error for a softmax model.
  at::Tensor forward_recurrent(const at::Tensor& ids) const;

  // ids: int64 [B, L] with L <= n_ctx. Returns float32 logits [B, L, V]. Autograd is recorded only
  // when weights require grad; capture runs under inference mode by the caller's choice.
  at::Tensor forward(const at::Tensor& ids, const CaptureHook* hook = nullptr) const;
  // The same pass without the language-model head: the final hidden states [B, L, D] in the compute
  // dtype. For capture, which wants only what the hook sees (the head of a 128K vocabulary is the
  // costliest matrix of a small model).
  at::Tensor hidden_states(const at::Tensor& ids, const CaptureHook* hook = nullptr) const;

  // Layer s's output, the residual stream after its attention and MLP [B, L, D] (compute dtype),
  // from the residual stream entering it, resid [B, L, D], and its heads' attention outputs y
  // [B, H, L, d] before the output projection: the model's own layer with y in place of its
  // attention. Differentiable in y (and resid). The block loss (distill.h) compares two of them.
  at::Tensor layer_output(int layer, const at::Tensor& resid, const at::Tensor& y) const;

  // Mean next-token cross-entropy (nats) over a token sequence, in windows of `seq_len`.
  double mean_loss(const std::vector<int64_t>& ids, int seq_len, const ProgressFn& progress = nullptr) const;
  // The same losses token by token: per non-overlapping window of `seq_len` tokens (the last may be
  // shorter), element p - 1 is the loss of predicting the token at position p (1..n-1).
  std::vector<std::vector<double>> window_losses(const std::vector<int64_t>& ids, int seq_len,
                                                 const ProgressFn& progress = nullptr) const;

  // Greedy decoding: appends up to `steps` tokens to `prompt`; stops early at `stop_id` (>= 0),
  // which is not appended. `on_token` sees the sequence after each new token (for streaming). The
  // prompt is read in one batch forward, then each token is one step: a converted model steps its
  // recurrent state; a softmax model keeps a key-value cache, as every runtime does (kv_cache =
  // false re-runs the whole window for every token instead: only for the benchmarks' labelled
  // "no cache" column). Past n_ctx tokens, both restart on the last n_ctx. With a sliding window
  // (Mistral) the cache keeps only the last sliding_window keys and values of each layer (a ring),
  // so its memory is bounded by the window however long the generation. `trace` (optional)
  // receives the logits and the cache's size.
  std::vector<int64_t> generate_greedy(
      std::vector<int64_t> prompt, int steps, int64_t stop_id = -1,
      const std::function<void(const std::vector<int64_t>&)>& on_token = nullptr, bool kv_cache = true,
      GenerationTrace* trace = nullptr) const;
  // Greedy decoding of B prompts as one batch (a key-value cache of B sequences, or a recurrent
  // state of B): each sequence appends up to `steps` tokens and stops at `stop_id` on its own
  // (on_token(b, sequence b) after each of its tokens). Prompts of different lengths: the shortest
  // length is read in one batch forward and each longer prompt's remaining tokens go in with the
  // steps (that sequence generates once its prompt is read), so every sequence is at the same
  // position at every step. Each sequence is what generate_greedy makes of its prompt alone, up to
  // float rounding. `trace` records the first sequence's logits and the cache's size.
  std::vector<std::vector<int64_t>> generate_greedy_batch(
      std::vector<std::vector<int64_t>> prompts, int steps, int64_t stop_id = -1,
      const std::function<void(size_t, const std::vector<int64_t>&)>& on_token = nullptr,
      GenerationTrace* trace = nullptr) const;

 private:
  ModelConfig config_;
  ModelWeights weights_;
  std::shared_ptr<const HeadFeatureMaps> linear_;
};

// A model with its tokenizer and where it came from.
struct LoadedModel {
  std::string path;  // resolved directory or .bin file
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::string> weight_files;
  std::string tokenizer_path;  // the tokenizer file or directory actually loaded
  std::string note;            // "" or, for a run directory given as the model, which model it stands for
};

// `spec` is a Hugging Face model directory, a bare name in the HF cache ($HF_HOME or
// ~/.cache/huggingface: hub/models--ORG--NAME/snapshots/*/), a run directory of a job that makes a
// model (linearize, finetune: its final model RUN/model; Error saying so while it is unfinished;
// `note` says which model was taken), or a llama2.c .bin checkpoint
// (`tokenizer`: its tokenizer.bin; empty = a tok*.bin / tokenizer.bin beside it). Validates every
// weight file and the tokenizer. Pickle checkpoints are refused. Throws Error.
// Weights stay as stored (see ModelWeights); `compute` is the dtype each layer runs in.
LoadedModel load_model(const std::string& spec, const std::string& tokenizer = "", at::ScalarType compute = at::kFloat);

// What a model is without reading a weight: config.json (or the llama2.c header), the safetensors
// headers of every shard, the tokenizer, and a converted model's feature maps. For `info`: it takes
// milliseconds and no memory for a model of any size. Throws Error as load_model does.
struct ModelInfo {
  std::string path;
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_path;
  std::vector<std::string> weight_files;
  std::map<std::string, int64_t> stored_bytes;    // safetensors dtype name ("BF16") -> bytes of tensors in it
  std::shared_ptr<const HeadFeatureMaps> feature_maps;  // converted models; null for softmax ones
  std::string note;  // as LoadedModel's
};
ModelInfo inspect_model(const std::string& spec, const std::string& tokenizer = "");

// The model directory a spec names (the resolution step of load_model, exposed for `info`).
std::string resolve_model_path(const std::string& spec);

// Loads weights of an already-parsed config from a Hugging Face weight store (by architecture).
ModelWeights load_hf_weights(const ModelConfig& c, const class WeightStore& store);

// Every tensor of `store` (a Hugging Face checkpoint of c's architecture) in its stored dtype, with the
// attention projections (q, k, v, o weights and biases) taken from `weights` in the checkpoint's own
// names and layout: how finetuned attention is written back. Throws Error naming the store.
std::vector<std::pair<std::string, at::Tensor>> hf_weights_with_attention(const ModelConfig& c, const class WeightStore& store,
                                                                       const ModelWeights& weights);

// The name and shape of every tensor a Hugging Face checkpoint of `c` holds, in the Hub's order
// (GPT-2, and Llama without biases): what load_hf_weights reads. For writing shaped checkpoints
// (bench scale). Throws Error for other architectures.
std::vector<std::pair<std::string, std::vector<int64_t>>> hf_tensor_shapes(const ModelConfig& c);

// Writes a model in Hugging Face layout (config.json + model.safetensors), GPT-2 naming (only for
// Arch::GPT2). Used by `pretrain` and by tests that need a checkpoint. Atomic per file.
void save_gpt2_model(const Model& m, const std::string& dir);

}  // namespace attnscope
