#include "attnscope/model/model_config.h"

#include <climits>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"
#include "attnscope/base/names.h"

namespace attnscope {

namespace {

// Every architecture with the name config.json's "architectures" gives it; llama2.c checkpoints have
// no config.json (their label is for messages and `info`).
constexpr Named<Arch> kArchs[] = {{Arch::GPT2, "GPT2LMHeadModel"},     {Arch::GPTNeoX, "GPTNeoXForCausalLM"},
                                  {Arch::Llama, "LlamaForCausalLM"},   {Arch::Mistral, "MistralForCausalLM"},
                                  {Arch::Qwen2, "Qwen2ForCausalLM"},   {Arch::Qwen3, "Qwen3ForCausalLM"},
                                  {Arch::Llama2C, "llama2.c"}};

// "GPT2LMHeadModel, ..., Qwen3ForCausalLM (and llama2.c .bin checkpoints)": what a config.json may name.
std::string supported_archs() {
  std::string out;
  for (const std::string& n : hf_arch_names()) out += (out.empty() ? "" : ", ") + n;
  return out + " (and llama2.c .bin checkpoints)";
}

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
                 (gated ? "silu for the Llama family" : "gelu or gelu_new for this architecture; silu only for the Llama family") +
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
  if (c.attn_bias) per_layer += q + 2 * kv + (c.attn_out_bias ? D : 0);
  if (c.qk_norm) per_layer += 2 * T(c.head_dim);
  per_layer += (c.activation == Activation::SiLU ? 3 : 2) * D * F;
  if (c.mlp_bias) per_layer += F + D;
  T total = V * D + T(c.n_layer) * per_layer + norm;
  if (c.rotary_dim == 0) total += T(c.n_ctx) * D;
  if (!c.tied_embeddings) total += V * D;
  return total;
}

// The architecture config.json's "architectures" names; Error naming `file` when attnscope reads
// no such architecture.
Arch hf_arch(const std::string& name, const std::string& file) {
  for (const Named<Arch>& n : kArchs)
    if (n.value != Arch::Llama2C && name == n.name) return n.value;
  fail(file, "architecture \"" + name + "\" is not supported; attnscope reads " + supported_archs());
}

// rope_scaling: null, {"rope_type": "default"} (none) or {"rope_type": "llama3", "factor",
// "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}; others are refused.
void parse_rope_scaling(const nlohmann::json& j, const std::string& file, ModelConfig& c) {
  const auto rs = j.find("rope_scaling");
  if (rs == j.end() || rs->is_null()) return;
  if (!rs->is_object()) fail(file, "rope_scaling must be an object or null, not " + rs->dump());
  std::string type = get_string_or(*rs, "rope_type", get_string_or(*rs, "type", "", file), file);
  if (type == "default") return;
  if (type != "llama3")
    fail(file, "rope_scaling of type \"" + type + "\" is not supported (only \"llama3\"; found " + rs->dump() + ")");
  auto number = [&](const char* key) {
    const auto it = rs->find(key);
    if (it == rs->end() || !it->is_number())
      fail(file, std::string("rope_scaling (llama3) needs a number \"") + key + "\" (found " + rs->dump() + ")");
    const double v = it->get<double>();
    if (!(std::isfinite(v) && v > 0)) fail(file, std::string("rope_scaling.") + key + " must be a finite number > 0");
    return v;
  };
  c.rope_llama3_factor = number("factor");
  c.rope_low_freq_factor = number("low_freq_factor");
  c.rope_high_freq_factor = number("high_freq_factor");
  const double orig = number("original_max_position_embeddings");
  if (orig > kMaxSize || orig != std::floor(orig))
    fail(file, "rope_scaling.original_max_position_embeddings must be a positive integer");
  c.rope_original_context = int(orig);
  if (!(c.rope_high_freq_factor > c.rope_low_freq_factor))
    fail(file, "rope_scaling: high_freq_factor must be larger than low_freq_factor (HF divides by their difference)");
}

// A Qwen2/Qwen3 config with use_sliding_window true: HF then windows only the layers from
// max_window_layers on, which attnscope does not implement.
void refuse_qwen_sliding_window(const nlohmann::json& j, const std::string& file) {
  if (get_bool_or(j, "use_sliding_window", false))
    fail(file, "use_sliding_window = true is not supported (Qwen's per-layer window from max_window_layers); "
               "attnscope runs these models with full causal attention only");
}

// LlamaForCausalLM and its relatives (modeling_llama / _mistral / _qwen2 / _qwen3): RMSNorm,
// SwiGLU, rotate-half RoPE over the whole head, grouped-query attention, head_dim from the config
// where given. Member differences (HF config classes and modeling files):
//   Llama    attention_bias (q/k/v/o), mlp_bias, rope_scaling llama3
//   Mistral  no biases; sliding_window (null: none)
//   Qwen2    q/k/v biases always, o_proj none; use_sliding_window refused
//   Qwen3    attention_bias (q/k/v/o); q_norm/k_norm per head before RoPE; head_dim default 128
//            (Qwen3Config's default, used when config.json omits it); use_sliding_window refused
void parse_llama_family(const nlohmann::json& j, Arch a, const std::string& file, ModelConfig& c) {
  c.arch = a;
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
  if (c.activation != Activation::SiLU) fail(file, std::string(arch_label(a)) + " models must use hidden_act silu");
  c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", false);
  c.head_dim = get_int_or(j, "head_dim", a == Arch::Qwen3 ? 128 : 0, file);
  c.rope_theta = get_double_or(j, "rope_theta", 10000.0, file);
  parse_rope_scaling(j, file, c);
  switch (a) {
    case Arch::Llama:
      c.attn_bias = get_bool_or(j, "attention_bias", false);
      c.mlp_bias = get_bool_or(j, "mlp_bias", false);
      break;
    case Arch::Mistral:
      c.sliding_window = get_int_or(j, "sliding_window", 0, file);
      break;
    case Arch::Qwen2:
      refuse_qwen_sliding_window(j, file);
      c.attn_bias = true;
      c.attn_out_bias = false;
      break;
    case Arch::Qwen3:
      refuse_qwen_sliding_window(j, file);
      c.attn_bias = get_bool_or(j, "attention_bias", false);
      c.qk_norm = true;
      break;
    default: fail(file, "not a Llama-family architecture");
  }
  if (c.head_dim == 0 && c.d_model % c.n_head == 0) c.head_dim = c.d_model / c.n_head;
  c.rotary_dim = c.head_dim;  // RoPE on the whole head: checked to be even below
}

}  // namespace

bool is_llama_family(Arch a) { return a == Arch::Llama || a == Arch::Mistral || a == Arch::Qwen2 || a == Arch::Qwen3; }

std::vector<std::string> hf_arch_names() {
  std::vector<std::string> out;
  for (const Named<Arch>& n : kArchs)
    if (n.value != Arch::Llama2C) out.push_back(n.name);
  return out;
}

int64_t ModelConfig::n_params() const { return parameter_count<int64_t>(*this); }

ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) fail(file, "config is not a JSON object");
  std::string arch;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    arch = (*a)[0].get<std::string>();
  if (arch.empty())
    fail(file, "no \"architectures\" entry; attnscope reads " + supported_archs());

  ModelConfig c;
  c.arch_name = arch;
  c.arch = hf_arch(arch, file);
  if (auto t = j.find("torch_dtype"); t != j.end() && t->is_string()) c.torch_dtype = t->get<std::string>();

  if (c.arch == Arch::GPT2) {
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
  } else if (c.arch == Arch::GPTNeoX) {
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
  } else {
    parse_llama_family(j, c.arch, file, c);
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

const char* arch_label(Arch a) { return name_of(kArchs, a); }

nlohmann::ordered_json model_shape_json(const ModelConfig& c) {
  nlohmann::ordered_json j = {{"architecture", c.arch_name}, {"layers", c.n_layer},   {"heads", c.n_head},
                              {"kv_heads", c.n_kv_head},     {"head_dim", c.head_dim}, {"d_model", c.d_model},
                              {"vocab_size", c.vocab_size},  {"context_length", c.n_ctx}};
  // Only where there is one (Mistral): a capture's readers take a missing one as 0.
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  return j;
}

}  // namespace attnscope
