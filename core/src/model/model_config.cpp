#include "attnscope/model_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/error.h"

namespace attnscope {

namespace {

// Reads a required integer field, trying each alias in turn (HF renamed several over the years).
int get_int(const nlohmann::json& j, std::initializer_list<const char*> keys, const std::string& file) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it != j.end() && it->is_number_integer()) {
      const int64_t v = it->get<int64_t>();
      if (v <= 0 || v > (1ll << 31)) fail(file, std::string("\"") + k + "\" must be a positive integer");
      return static_cast<int>(v);
    }
  }
  fail(file, std::string("missing integer field \"") + *keys.begin() + "\"");
}

int get_int_or(const nlohmann::json& j, const char* key, int dflt, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    fail(file, std::string("\"") + key + "\" must be a positive integer");
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

Activation parse_activation(const std::string& name, const std::string& file) {
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::GeluTanh;
  if (name == "gelu") return Activation::GeluErf;
  if (name == "silu" || name == "swish") return Activation::SiLU;
  fail(file, "activation \"" + name + "\" is not supported (gelu, gelu_new, silu)");
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

}  // namespace

int64_t ModelConfig::n_params() const {
  const int64_t D = d_model, F = d_ff, V = vocab_size;
  const int64_t q = int64_t(n_head) * head_dim, kv = int64_t(n_kv_head) * head_dim;
  const int64_t norm = rms_norm ? D : 2 * D;
  int64_t per_layer = D * q + 2 * D * kv + q * D + 2 * norm;
  if (attn_bias) per_layer += q + 2 * kv + D;
  per_layer += (activation == Activation::SiLU ? 3 : 2) * D * F;
  if (mlp_bias) per_layer += F + D;
  int64_t total = V * D + n_layer * per_layer + norm;
  if (rotary_dim == 0) total += int64_t(n_ctx) * D;
  if (!tied_embeddings) total += V * D;
  return total;
}

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
    c.d_ff = get_int_or(j, "n_inner", 4 * c.d_model, file);
    c.norm_eps = get_double_or(j, "layer_norm_epsilon", 1e-5, file);
    c.activation = parse_activation(j.value("activation_function", std::string("gelu_new")), file);
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
    c.d_ff = get_int_or(j, "intermediate_size", 4 * c.d_model, file);
    c.norm_eps = get_double_or(j, "layer_norm_eps", 1e-5, file);
    c.activation = parse_activation(j.value("hidden_act", std::string("gelu")), file);
    c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", false);
    c.parallel_residual = get_bool_or(j, "use_parallel_residual", true);
    c.attn_bias = get_bool_or(j, "attention_bias", true);
    c.mlp_bias = true;
    c.head_dim = c.d_model / c.n_head;
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
    c.activation = parse_activation(j.value("hidden_act", std::string("silu")), file);
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
  check_heads(c, file);
  if (c.arch == Arch::Llama) c.rotary_dim = c.head_dim;
  return c;
}

ModelConfig load_hf_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open config.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) fail(path, "not valid JSON");
  return parse_hf_config(j, path);
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

}  // namespace attnscope
