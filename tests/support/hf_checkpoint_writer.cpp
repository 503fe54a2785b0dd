#include "hf_checkpoint_writer.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

namespace attnscope::test {

namespace {

struct Gen {
  std::mt19937 rng;
  explicit Gen(uint32_t seed) : rng(seed) {}
  RefTensor normal(std::vector<int64_t> shape, double mean, double stddev) {
    RefTensor t;
    t.shape = std::move(shape);
    std::normal_distribution<double> dist(mean, stddev);
    t.data.resize(static_cast<size_t>(t.numel()));
    for (float& v : t.data) v = static_cast<float>(dist(rng));
    return t;
  }
  RefTensor matrix(std::vector<int64_t> shape) { return normal(std::move(shape), 0.0, 0.2); }
  RefTensor norm_weight(std::vector<int64_t> shape) { return normal(std::move(shape), 1.0, 0.1); }
  RefTensor bias(std::vector<int64_t> shape) { return normal(std::move(shape), 0.0, 0.1); }
};

RefWeights gpt2_weights(const RefConfig& c, Gen& g) {
  const int64_t D = c.d_model, F = c.d_ff;
  RefWeights w;
  w["transformer.wte.weight"] = g.matrix({c.vocab, D});
  w["transformer.wpe.weight"] = g.matrix({c.n_ctx, D});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    w[p + "ln_1.weight"] = g.norm_weight({D});
    w[p + "ln_1.bias"] = g.bias({D});
    w[p + "attn.c_attn.weight"] = g.matrix({D, 3 * D});  // Conv1D: [in, out]
    w[p + "attn.c_attn.bias"] = g.bias({3 * D});
    w[p + "attn.c_proj.weight"] = g.matrix({D, D});
    w[p + "attn.c_proj.bias"] = g.bias({D});
    w[p + "ln_2.weight"] = g.norm_weight({D});
    w[p + "ln_2.bias"] = g.bias({D});
    w[p + "mlp.c_fc.weight"] = g.matrix({D, F});
    w[p + "mlp.c_fc.bias"] = g.bias({F});
    w[p + "mlp.c_proj.weight"] = g.matrix({F, D});
    w[p + "mlp.c_proj.bias"] = g.bias({D});
  }
  w["transformer.ln_f.weight"] = g.norm_weight({D});
  w["transformer.ln_f.bias"] = g.bias({D});
  return w;  // no lm_head.weight: GPT2LMHeadModel ties it to wte
}

RefWeights neox_weights(const RefConfig& c, Gen& g) {
  const int64_t D = c.d_model, F = c.d_ff;
  RefWeights w;
  w["gpt_neox.embed_in.weight"] = g.matrix({c.vocab, D});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "gpt_neox.layers." + std::to_string(l) + ".";
    w[p + "input_layernorm.weight"] = g.norm_weight({D});
    w[p + "input_layernorm.bias"] = g.bias({D});
    w[p + "post_attention_layernorm.weight"] = g.norm_weight({D});
    w[p + "post_attention_layernorm.bias"] = g.bias({D});
    w[p + "attention.query_key_value.weight"] = g.matrix({3 * D, D});  // nn.Linear: [out, in]
    w[p + "attention.query_key_value.bias"] = g.bias({3 * D});
    w[p + "attention.dense.weight"] = g.matrix({D, D});
    w[p + "attention.dense.bias"] = g.bias({D});
    w[p + "mlp.dense_h_to_4h.weight"] = g.matrix({F, D});
    w[p + "mlp.dense_h_to_4h.bias"] = g.bias({F});
    w[p + "mlp.dense_4h_to_h.weight"] = g.matrix({D, F});
    w[p + "mlp.dense_4h_to_h.bias"] = g.bias({D});
  }
  w["gpt_neox.final_layer_norm.weight"] = g.norm_weight({D});
  w["gpt_neox.final_layer_norm.bias"] = g.bias({D});
  w["embed_out.weight"] = g.matrix({c.vocab, D});
  return w;
}

RefWeights llama_weights(const RefConfig& c, Gen& g) {
  const int64_t D = c.d_model, F = c.d_ff, d = c.head_dim();
  RefWeights w;
  w["model.embed_tokens.weight"] = g.matrix({c.vocab, D});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w[p + "input_layernorm.weight"] = g.norm_weight({D});
    w[p + "self_attn.q_proj.weight"] = g.matrix({c.n_head * d, D});
    w[p + "self_attn.k_proj.weight"] = g.matrix({c.n_kv_head * d, D});
    w[p + "self_attn.v_proj.weight"] = g.matrix({c.n_kv_head * d, D});
    w[p + "self_attn.o_proj.weight"] = g.matrix({D, c.n_head * d});
    // Biases: Qwen2 on q/k/v always (o_proj none); Llama and Qwen3 on all four with attention_bias.
    const bool flag = (c.arch == RefArch::Llama || c.arch == RefArch::Qwen3) && c.attention_bias;
    if (c.arch == RefArch::Qwen2 || flag) {
      w[p + "self_attn.q_proj.bias"] = g.bias({c.n_head * d});
      w[p + "self_attn.k_proj.bias"] = g.bias({c.n_kv_head * d});
      w[p + "self_attn.v_proj.bias"] = g.bias({c.n_kv_head * d});
    }
    if (flag) w[p + "self_attn.o_proj.bias"] = g.bias({D});
    if (c.arch == RefArch::Qwen3) {  // per-head RMSNorm weights, [head_dim]
      w[p + "self_attn.q_norm.weight"] = g.norm_weight({d});
      w[p + "self_attn.k_norm.weight"] = g.norm_weight({d});
    }
    w[p + "post_attention_layernorm.weight"] = g.norm_weight({D});
    w[p + "mlp.gate_proj.weight"] = g.matrix({F, D});
    w[p + "mlp.up_proj.weight"] = g.matrix({F, D});
    w[p + "mlp.down_proj.weight"] = g.matrix({D, F});
  }
  w["model.norm.weight"] = g.norm_weight({D});
  if (!c.tied) w["lm_head.weight"] = g.matrix({c.vocab, D});
  return w;
}

RefWeights llama2c_weights(const RefConfig& c, Gen& g) {
  const int64_t D = c.d_model, F = c.d_ff, NL = c.n_layer, hs = c.head_dim();
  const int64_t kv_dim = c.n_kv_head * hs;
  RefWeights w;
  w["token_embedding_table"] = g.matrix({c.vocab, D});
  w["rms_att_weight"] = g.norm_weight({NL, D});
  w["wq"] = g.matrix({NL, D, D});
  w["wk"] = g.matrix({NL, kv_dim, D});
  w["wv"] = g.matrix({NL, kv_dim, D});
  w["wo"] = g.matrix({NL, D, D});
  w["rms_ffn_weight"] = g.norm_weight({NL, D});
  w["w1"] = g.matrix({NL, F, D});
  w["w2"] = g.matrix({NL, D, F});
  w["w3"] = g.matrix({NL, F, D});
  w["rms_final_weight"] = g.norm_weight({D});
  // The legacy RoPE tables, filled as llama2.c's export wrote them (cos/sin of pos * freq). Loaders
  // are told to ignore them and compute RoPE themselves; they are here so the file has the real
  // layout and size.
  RefTensor re, im;
  re.shape = im.shape = {c.n_ctx, hs / 2};
  for (int64_t pos = 0; pos < c.n_ctx; ++pos)
    for (int64_t j = 0; j < hs / 2; ++j) {
      const double angle = pos / std::pow(10000.0, (2.0 * j) / hs);
      re.data.push_back(static_cast<float>(std::cos(angle)));
      im.data.push_back(static_cast<float>(std::sin(angle)));
    }
  w["freq_cis_real"] = std::move(re);
  w["freq_cis_imag"] = std::move(im);
  if (!c.tied) w["wcls"] = g.matrix({c.vocab, D});
  return w;
}

void write_floats(std::ofstream& f, const std::vector<float>& v) {
  // x86/ARM hosts are little-endian, which both formats require.
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

}  // namespace

RefWeights random_weights(const RefConfig& c, uint32_t seed) {
  Gen g(seed);
  switch (c.arch) {
    case RefArch::GPT2:
      return gpt2_weights(c, g);
    case RefArch::GPTNeoX:
      return neox_weights(c, g);
    case RefArch::Llama:
    case RefArch::Mistral:
    case RefArch::Qwen2:
    case RefArch::Qwen3:
      return llama_weights(c, g);
    case RefArch::Llama2C:
      return llama2c_weights(c, g);
  }
  throw std::runtime_error("random_weights: unknown architecture");
}

nlohmann::json hf_config_json(const RefConfig& c) {
  nlohmann::json j;
  j["torch_dtype"] = "float32";
  j["vocab_size"] = c.vocab;
  switch (c.arch) {
    case RefArch::GPT2:
      // GPT2Config names; n_inner null means 4 * n_embd (GPT2Block: inner_dim = n_inner or 4*D).
      j["architectures"] = {"GPT2LMHeadModel"};
      j["model_type"] = "gpt2";
      j["n_embd"] = c.d_model;
      j["n_layer"] = c.n_layer;
      j["n_head"] = c.n_head;
      j["n_positions"] = c.n_ctx;
      j["n_ctx"] = c.n_ctx;
      j["n_inner"] = c.d_ff == 4 * c.d_model ? nlohmann::json(nullptr) : nlohmann::json(c.d_ff);
      j["layer_norm_epsilon"] = c.norm_eps;
      j["activation_function"] = "gelu_new";
      j["tie_word_embeddings"] = true;
      break;
    case RefArch::GPTNeoX:
      j["architectures"] = {"GPTNeoXForCausalLM"};
      j["model_type"] = "gpt_neox";
      j["hidden_size"] = c.d_model;
      j["num_hidden_layers"] = c.n_layer;
      j["num_attention_heads"] = c.n_head;
      j["intermediate_size"] = c.d_ff;
      j["max_position_embeddings"] = c.n_ctx;
      j["layer_norm_eps"] = c.norm_eps;
      j["rotary_pct"] = c.rotary_pct;
      j["rotary_emb_base"] = c.rope_theta;
      j["use_parallel_residual"] = c.parallel_residual;
      j["hidden_act"] = "gelu";
      j["attention_bias"] = true;
      j["tie_word_embeddings"] = false;
      break;
    case RefArch::Llama:
    case RefArch::Mistral:
    case RefArch::Qwen2:
    case RefArch::Qwen3: {
      // The config classes' field names (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config).
      const char* names[][2] = {{"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"},
                                {"Qwen2ForCausalLM", "qwen2"}, {"Qwen3ForCausalLM", "qwen3"}};
      const int i = c.arch == RefArch::Llama ? 0 : c.arch == RefArch::Mistral ? 1 : c.arch == RefArch::Qwen2 ? 2 : 3;
      j["architectures"] = {names[i][0]};
      j["model_type"] = names[i][1];
      j["hidden_size"] = c.d_model;
      j["num_hidden_layers"] = c.n_layer;
      j["num_attention_heads"] = c.n_head;
      j["num_key_value_heads"] = c.n_kv_head;
      j["intermediate_size"] = c.d_ff;
      j["max_position_embeddings"] = c.n_ctx;
      j["rms_norm_eps"] = c.norm_eps;
      j["rope_theta"] = c.rope_theta;
      j["rope_scaling"] = nullptr;
      if (c.llama3_factor > 0)
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", c.llama3_factor},
                             {"low_freq_factor", c.llama3_low},
                             {"high_freq_factor", c.llama3_high},
                             {"original_max_position_embeddings", c.llama3_original_context}};
      j["hidden_act"] = "silu";
      j["tie_word_embeddings"] = c.tied;
      if (c.head_dim_override > 0 || c.arch == RefArch::Qwen3) j["head_dim"] = c.head_dim();
      switch (c.arch) {
        case RefArch::Llama:
          j["attention_bias"] = c.attention_bias;
          j["mlp_bias"] = false;
          break;
        case RefArch::Mistral:
          j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
          break;
        case RefArch::Qwen2:
          // As Qwen2.5 configs ship: a window size that is not used (use_sliding_window false); 4
          // tokens, so a loader that applied it would be caught by the comparison.
          j["use_sliding_window"] = false;
          j["sliding_window"] = 4;
          j["max_window_layers"] = c.n_layer;
          break;
        default:  // Qwen3
          j["attention_bias"] = c.attention_bias;
          j["use_sliding_window"] = false;
          j["sliding_window"] = nullptr;
          break;
      }
      break;
    }
    case RefArch::Llama2C:
      throw std::runtime_error("hf_config_json: llama2.c checkpoints have no config.json");
  }
  return j;
}

void write_safetensors_minimal(const std::string& path, const RefWeights& w) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& [name, t] : w) {
    const uint64_t bytes = t.data.size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path);
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : w) write_floats(f, t.data);  // same (sorted) order as the offsets
  if (!f) throw std::runtime_error("short write to " + path);
}

void write_hf_checkpoint(const std::string& dir, const RefConfig& c, const RefWeights& w) {
  std::ofstream cfg(dir + "/config.json", std::ios::trunc);
  cfg << hf_config_json(c).dump(2) << "\n";
  if (!cfg) throw std::runtime_error("cannot write " + dir + "/config.json");
  cfg.close();
  write_safetensors_minimal(dir + "/model.safetensors", w);
}

void write_llama2c_checkpoint(const std::string& path, const RefConfig& c, const RefWeights& w) {
  if (c.arch != RefArch::Llama2C) throw std::runtime_error("write_llama2c_checkpoint: not llama2.c");
  const int32_t header[7] = {c.d_model, c.d_ff,   c.n_layer, c.n_head,
                             c.n_kv_head, c.tied ? c.vocab : -c.vocab, c.n_ctx};
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path);
  f.write(reinterpret_cast<const char*>(header), sizeof(header));
  const char* order[] = {"token_embedding_table", "rms_att_weight", "wq", "wk", "wv", "wo",
                         "rms_ffn_weight", "w1", "w2", "w3", "rms_final_weight",
                         "freq_cis_real", "freq_cis_imag"};
  for (const char* name : order) write_floats(f, w.at(name).data);
  if (!c.tied) write_floats(f, w.at("wcls").data);
  if (!f) throw std::runtime_error("short write to " + path);
}

}  // namespace attnscope::test
