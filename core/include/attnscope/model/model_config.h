// The architecture of a model, read from Hugging Face config.json or a llama2.c header, in one
// struct the forward pass reads top to bottom.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope {

// The families attnscope reads. The Llama family (Llama, Mistral, Qwen2, Qwen3) shares one layout
// and one loader; what differs between its members is in the config fields below (biases, q/k norm,
// sliding window), so the forward pass never asks for the architecture. Names: kArchs in
// model_config.cpp (arch_label, hf_arch_names).
enum class Arch { GPT2, GPTNeoX, Llama, Mistral, Qwen2, Qwen3, Llama2C };

// Llama, Mistral, Qwen2 and Qwen3: Hugging Face "model.layers.N.self_attn.q_proj" layout.
bool is_llama_family(Arch a);

enum class Activation { GeluTanh, GeluErf, SiLU };  // SiLU means SwiGLU (gate * up)

struct ModelConfig {
  Arch arch = Arch::GPT2;
  std::string arch_name;  // "GPT2LMHeadModel", ...
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;  // == n_head unless grouped-query attention
  int d_model = 0;
  int head_dim = 0;
  int d_ff = 0;
  int vocab_size = 0;
  int n_ctx = 0;  // context length (max positions)
  double norm_eps = 1e-5;
  bool rms_norm = false;  // RMSNorm (Llama) instead of LayerNorm with bias
  Activation activation = Activation::GeluTanh;
  // Positions: learned (GPT-2) when rotary_dim == 0, else RoPE on the first rotary_dim dims of
  // each head. interleaved: rotate pairs (2i, 2i+1) (llama2.c); else rotate-half (HF NeoX/Llama).
  int rotary_dim = 0;
  double rope_theta = 10000.0;
  bool rope_interleaved = false;
  bool parallel_residual = false;  // GPT-NeoX: x + attn(ln1 x) + mlp(ln2 x)
  bool tied_embeddings = false;    // lm_head shares the token embedding
  bool attn_bias = false;          // q/k/v biases (and o, unless attn_out_bias is false)
  bool attn_out_bias = true;       // with attn_bias: o_proj has a bias too (false: Qwen2)
  bool mlp_bias = false;
  // Qwen3: RMSNorm over each head's dims (weights q_norm/k_norm [head_dim], eps norm_eps) on q and
  // k after the projection and before RoPE.
  bool qk_norm = false;
  // Mistral: softmax attention of query i sees key j only when i - j < sliding_window (HF's
  // sliding_window_overlay: kv_idx > q_idx - sliding_window); 0 = no window. A converted model's
  // heads replace softmax with feature maps, so it does not apply to them.
  int sliding_window = 0;
  // rope_scaling {"rope_type": "llama3"} (Llama 3.1/3.2): inverse frequencies rescaled as HF's
  // _compute_llama3_parameters. rope_llama3_factor 0 = no scaling.
  double rope_llama3_factor = 0;
  double rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  int rope_original_context = 0;  // original_max_position_embeddings
  std::string torch_dtype = "float32";  // as declared by config.json

  int64_t n_params() const;  // parameters in the checkpoint (tied weights counted once)
};

// Parses config.json; throws Error naming `file` for an unknown architecture or a missing field.
ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& file);
// The same from the text of a config.json (no file system; for fuzzing). `file` names it in errors.
ModelConfig parse_hf_config_text(std::string_view text, const std::string& file);
ModelConfig load_hf_config(const std::string& config_json_path);
nlohmann::json to_hf_config(const ModelConfig& c);  // for writing models attnscope creates
// The model's shape in the user's terms, as `info --json` and the capture manifest write it:
// architecture, layers, heads, kv_heads, head_dim, d_model, vocab_size, context_length, and
// sliding_window where the model has one.
nlohmann::ordered_json model_shape_json(const ModelConfig& c);

// The name of an architecture as config.json's "architectures" spells it ("llama2.c" for Llama2C).
const char* arch_label(Arch a);
// The config.json architectures attnscope reads, in kArchs' order ("GPT2LMHeadModel", ...).
std::vector<std::string> hf_arch_names();

}  // namespace attnscope
