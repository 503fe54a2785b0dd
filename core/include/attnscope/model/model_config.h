// The architecture of a model, read from Hugging Face config.json or a llama2.c header, in one
// struct the forward pass reads top to bottom.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace attnscope {

enum class Arch { GPT2, GPTNeoX, Llama, Llama2C };

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
  bool attn_bias = false;          // q/k/v/o biases
  bool mlp_bias = false;
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
// architecture, layers, heads, kv_heads, head_dim, d_model, vocab_size, context_length.
nlohmann::ordered_json model_shape_json(const ModelConfig& c);

const char* arch_label(Arch a);

}  // namespace attnscope
