#include "attnscope/model/model_config.h"

#include <climits>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"

namespace attnscope {

namespace {

// Sizes are ints; a value that does not fit is refused rather than wrapped.
constexpr int64_t kMaxSize = INT_MAX;

// Whether an integer JSON value lies in 1..kMaxSize. nlohmann stores non-negative integers as
// unsigned (up to UINT64_MAX), negative ones as signed.
bool positive_size(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= uint64_t(kMaxSize);
  return v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= kMaxSize;
}

// Reads a required integer field, trying each alias in turn (HF renamed several over the years).
int get_int(const nlohmann::json& j, std::initializer_list<const char*> keys, const std::string& file) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it != j.end() && it->is_number_integer()) {
      if (!positive_size(*it))
        fail(file, std::string("\"") + k + "\" = " + it->dump() + " must be a positive integer up to " +
                       std::to_string(kMaxSize));
      return static_cast<int>(it->get<int64_t>());
    }
  }
  fail(file, std::string("missing integer field \"") + *keys.begin() + "\"");
}

// An optional positive integer field; `dflt` (computed by the caller in 64 bits; 0: derived later)
// when it is absent.
int get_int_or(const nlohmann::json& j, const char* key, int64_t dflt, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (dflt < 0 || dflt > kMaxSize)
      fail(file, std::string("\"") + key + "\" is absent and its default " + std::to_string(dflt) +
                     " is not a positive integer up to " + std::to_string(kMaxSize));
    return static_cast<int>(dflt);
  }
  if (!positive_size(*it))
    fail(file, std::string("\"") + key + "\" = " + it->dump() + " must be a positive integer up to " +
                   std::to_string(kMaxSize));
  return static_cast<int>(it->get<int64_t>());
}

double get_double_or(const nlohmann::json& j, const char* key, double dflt, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_number()) fail(file, std::string("\"") + key + "\" must be a number");
  return it->get<double>();
}

bool get_bool_or(const nlohmann::json& j, const char* key, bool dflt) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : dflt;
}

std::string get_string_or(const nlohmann::json& j, const char* key, const std::string& dflt,
                          const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_string()) fail(file, std::string("\"") + key + "\" must be a string, not " + it->dump());
  return it->get<std::string>();
}

// SiLU means Llama's gated SwiGLU (gate_proj); GPT-2 and GPT-NeoX have no gate projection, so for
// them only the GELUs are accepted.
Activation parse_activation(const std::string& name, bool gated, const std::string& file) {
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::GeluTanh;
  if (name == "gelu") return Activation::GeluErf;
  if (gated && (name == "silu" || name == "swish")) return Activation::SiLU;
  fail(file, "activation \"" + name + "\" is not supported (" +
                 (gated ? "silu for Llama" : "gelu or gelu_new for this architecture; silu only for Llama") +
                 ")");
}

void check_heads(ModelConfig& c, const std::string& file) {
  if (c.d_model % c.n_head != 0 && c.head_dim == 0)
    fail(file, "hidden size " + std::to_string(c.d_model) + " is not divisible by " +
                   std::to_string(c.n_head) + " heads");
  if (c.head_dim == 0) c.head_dim = c.d_model / c.n_head;
  if (c.n_head % c.n_kv_head != 0)
    fail(file, std::to_string(c.n_head) + " query heads cannot share " + std::to_string(c.n_kv_head) +
                   " key/value heads evenly");
  if (c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
    fail(file, "rotary dimension " + std::to_string(c.rotary_dim) + " must be even and at most the head dim " +
                   std::to_string(c.head_dim));
}

// Parameters in the checkpoint (tied weights counted once), in T: int64_t for n_params(), double
// for the parser's check that the int64_t count cannot overflow.
template <class T>
T parameter_count(const ModelConfig& c) {
  const T D = c.d_model, F = c.d_ff, V = c.vocab_size;
  const T q = T(c.n_head) * c.head_dim, kv = T(c.n_kv_head) * c.head_dim;
  const T norm = c.rms_norm ? D : 2 * D;
  T per_layer = D * q + 2 * D * kv + q * D + 2 * norm;
  if (c.attn_bias) per_layer += q + 2 * kv + D;
  per_layer += (c.activation == Activation::SiLU ? 3 : 2) * D * F;
  if (c.mlp_bias) per_layer += F + D;
  T total = V * D + T(c.n_layer) * per_layer + norm;
  if (c.rotary_dim == 0) total += T(c.n_ctx) * D;
  if (!c.tied_embeddings) total += V * D;
  return total;
}

}  // namespace

int64_t ModelConfig::n_params() const { return parameter_count<int64_t>(*this); }

ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) fail(file, "config is not a JSON object");
  std::string arch;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    arch = (*a)[0].get<std::string>();
  if (arch.empty())
    fail(file, "no \"architectures\" entry; attnscope supports GPT2LMHeadModel, GPTNeoXForCausalLM, LlamaForCausalLM");

  ModelConfig c;
  c.arch_name = arch;
  if (auto t = j.find("torch_dtype"); t != j.end() && t->is_string()) c.torch_dtype = t->get<std::string>();

  if (arch == "GPT2LMHeadModel") {
    c.arch = Arch::GPT2;
    c.d_model = get_int(j, {"n_embd", "hidden_size"}, file);
    c.n_layer = get_int(j, {"n_layer", "num_hidden_layers"}, file);
    c.n_head = get_int(j, {"n_head", "num_attention_heads"}, file);
    c.n_kv_head = c.n_head;
    c.n_ctx = get_int(j, {"n_positions", "n_ctx", "max_position_embeddings"}, file);
    c.vocab_size = get_int(j, {"vocab_size"}, file);
    c.d_ff = get_int_or(j, "n_inner", 4 * int64_t(c.d_model), file);
    c.norm_eps = get_double_or(j, "layer_norm_epsilon", 1e-5, file);
    c.activation = parse_activation(get_string_or(j, "activation_function", "gelu_new", file), false, file);
    c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", true);
    c.attn_bias = c.mlp_bias = true;
    if (get_bool_or(j, "scale_attn_by_inverse_layer_idx", false))
      fail(file, "scale_attn_by_inverse_layer_idx = true is not supported");
    if (!get_bool_or(j, "scale_attn_weights", true))
      fail(file, "scale_attn_weights = false is not supported (attention must be scaled by 1/sqrt(d))");
  } else if (arch == "GPTNeoXForCausalLM") {
    c.arch = Arch::GPTNeoX;
    c.d_model = get_int(j, {"hidden_size"}, file);
    c.n_layer = get_int(j, {"num_hidden_layers"}, file);
    c.n_head = get_int(j, {"num_attention_heads"}, file);
    c.n_kv_head = c.n_head;
    c.n_ctx = get_int(j, {"max_position_embeddings"}, file);
    c.vocab_size = get_int(j, {"vocab_size"}, file);
    c.d_ff = get_int_or(j, "intermediate_size", 4 * int64_t(c.d_model), file);
    c.norm_eps = get_double_or(j, "layer_norm_eps", 1e-5, file);
    c.activation = parse_activation(get_string_or(j, "hidden_act", "gelu", file), false, file);
    c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", false);
    c.parallel_residual = get_bool_or(j, "use_parallel_residual", true);
    c.attn_bias = get_bool_or(j, "attention_bias", true);
    c.mlp_bias = true;
    // HF's GPTNeoXAttention refuses a hidden size the heads do not divide; so does check_heads.
    if (c.d_model % c.n_head == 0) c.head_dim = c.d_model / c.n_head;
    const double pct = get_double_or(j, "rotary_pct", get_double_or(j, "partial_rotary_factor", 1.0, file), file);
    if (!(pct > 0 && pct <= 1)) fail(file, "rotary_pct must be in (0, 1]");
    c.rotary_dim = static_cast<int>(c.head_dim * pct);  // HF truncates: int(head_size * rotary_pct)
    c.rope_theta = get_double_or(j, "rotary_emb_base", get_double_or(j, "rope_theta", 10000.0, file), file);
  } else if (arch == "LlamaForCausalLM") {
    c.arch = Arch::Llama;
    c.d_model = get_int(j, {"hidden_size"}, file);
    c.n_layer = get_int(j, {"num_hidden_layers"}, file);
    c.n_head = get_int(j, {"num_attention_heads"}, file);
    c.n_kv_head = get_int_or(j, "num_key_value_heads", c.n_head, file);
    c.n_ctx = get_int(j, {"max_position_embeddings"}, file);
    c.vocab_size = get_int(j, {"vocab_size"}, file);
    c.d_ff = get_int(j, {"intermediate_size"}, file);
    c.norm_eps = get_double_or(j, "rms_norm_eps", 1e-6, file);
    c.rms_norm = true;
    c.activation = parse_activation(get_string_or(j, "hidden_act", "silu", file), true, file);
    if (c.activation != Activation::SiLU) fail(file, "Llama models must use hidden_act silu");
    c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", false);
    c.attn_bias = get_bool_or(j, "attention_bias", false);
    c.mlp_bias = get_bool_or(j, "mlp_bias", false);
    c.head_dim = get_int_or(j, "head_dim", 0, file);
    c.rope_theta = get_double_or(j, "rope_theta", 10000.0, file);
    if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null())
      fail(file, "rope_scaling is not supported yet (found " + rs->dump() + ")");
  } else {
    fail(file, "architecture \"" + arch +
                   "\" is not supported; attnscope supports GPT2LMHeadModel, GPTNeoXForCausalLM, LlamaForCausalLM");
  }
  if (c.arch == Arch::Llama) {
    if (c.head_dim == 0 && c.d_model % c.n_head == 0) c.head_dim = c.d_model / c.n_head;
    c.rotary_dim = c.head_dim;  // RoPE on the whole head: checked to be even below
  }
  check_heads(c, file);
  if (c.arch != Arch::GPT2 && c.rotary_dim == 0)
    fail(file, "rotary_pct leaves 0 of the " + std::to_string(c.head_dim) +
                   " head dimensions rotated; a rotary model needs at least 2");
  if (!std::isfinite(c.norm_eps) || c.norm_eps < 0)
    fail(file, "the norm epsilon " + std::to_string(c.norm_eps) + " must be a finite number >= 0");
  if (c.rotary_dim > 0 && !(std::isfinite(c.rope_theta) && c.rope_theta > 0))
    fail(file, "the RoPE base (rope_theta) " + std::to_string(c.rope_theta) + " must be a finite number > 0");
  // Far beyond any real model (~1e12); keeps n_params() and the weight sizes within int64.
  if (const double n = parameter_count<double>(c); n > 0x1p53)
    fail(file, "the sizes give " + std::to_string(n) + " parameters, more than any checkpoint can hold");
  return c;
}

ModelConfig parse_hf_config_text(std::string_view text, const std::string& file) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) fail(file, "not valid JSON");
  return parse_hf_config(j, file);
}

ModelConfig load_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "read error in config.json");
  return parse_hf_config_text(text, path);
}

nlohmann::json to_hf_config(const ModelConfig& c) {
  if (c.arch != Arch::GPT2) fail("config", "writing config.json is implemented for GPT-2 models only");
  return {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.n_ctx},
      {"n_embd", c.d_model},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_inner", c.d_ff},
      {"activation_function", c.activation == Activation::GeluErf ? "gelu" : "gelu_new"},
      {"layer_norm_epsilon", c.norm_eps},
      {"tie_word_embeddings", c.tied_embeddings},
      {"scale_attn_weights", true},
      {"torch_dtype", c.torch_dtype},
  };
}

const char* arch_label(Arch a) {
  switch (a) {
    case Arch::GPT2: return "GPT2LMHeadModel";
    case Arch::GPTNeoX: return "GPTNeoXForCausalLM";
    case Arch::Llama: return "LlamaForCausalLM";
    case Arch::Llama2C: return "llama2.c";
  }
  return "?";
}

nlohmann::ordered_json model_shape_json(const ModelConfig& c) {
  return {{"architecture", c.arch_name}, {"layers", c.n_layer},   {"heads", c.n_head},
          {"kv_heads", c.n_kv_head},     {"head_dim", c.head_dim}, {"d_model", c.d_model},
          {"vocab_size", c.vocab_size},  {"context_length", c.n_ctx}};
}

}  // namespace attnscope
