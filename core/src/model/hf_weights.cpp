// Hugging Face checkpoint naming, per architecture, mapped onto LayerWeights ([out, in] layout).
// Weights stay in their stored dtype as views of the memory-mapped files (WeightStore::stored);
// the forward pass converts each layer to the compute dtype when it runs.
#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"
#include "attnscope/base/text_file.h"
#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/base/shape_str.h"

namespace attnscope {

namespace {

using Shape = std::vector<int64_t>;

// GPT-2 checkpoints exist with and without the "transformer." prefix.
std::string gpt2_prefix(const WeightStore& st) {
  return st.contains("transformer.wte.weight") ? "transformer." : "";
}

ModelWeights load_gpt2(const ModelConfig& c, const WeightStore& st) {
  const std::string p = gpt2_prefix(st);
  const int64_t D = c.d_model, F = c.d_ff;
  ModelWeights w;
  w.tok_emb = st.stored(p + "wte.weight", {c.vocab_size, D});
  w.pos_emb = st.stored(p + "wpe.weight", {c.n_ctx, D});
  for (int s = 0; s < c.n_layer; ++s) {
    const std::string l = p + "h." + std::to_string(s) + ".";
    LayerWeights lw;
    lw.ln1_w = st.stored(l + "ln_1.weight", {D});
    lw.ln1_b = st.stored(l + "ln_1.bias", {D});
    // Conv1D stores [in, out] (y = x W + b): transpose to Linear's [out, in]; q, k, v in order.
    // Kept as transposed views of the mapping (linear reads any strides): no copy of the weights.
    at::Tensor qkv = st.stored(l + "attn.c_attn.weight", {D, 3 * D}).t();
    at::Tensor qkv_b = st.stored(l + "attn.c_attn.bias", {3 * D});
    auto parts = qkv.chunk(3, 0);
    auto bparts = qkv_b.chunk(3, 0);
    lw.wq = parts[0], lw.wk = parts[1], lw.wv = parts[2];
    lw.bq = bparts[0], lw.bk = bparts[1], lw.bv = bparts[2];
    lw.wo = st.stored(l + "attn.c_proj.weight", {D, D}).t();
    lw.bo = st.stored(l + "attn.c_proj.bias", {D});
    lw.ln2_w = st.stored(l + "ln_2.weight", {D});
    lw.ln2_b = st.stored(l + "ln_2.bias", {D});
    lw.w_up = st.stored(l + "mlp.c_fc.weight", {D, F}).t();
    lw.b_up = st.stored(l + "mlp.c_fc.bias", {F});
    lw.w_down = st.stored(l + "mlp.c_proj.weight", {F, D}).t();
    lw.b_down = st.stored(l + "mlp.c_proj.bias", {D});
    w.layers.push_back(std::move(lw));
  }
  w.lnf_w = st.stored(p + "ln_f.weight", {D});
  w.lnf_b = st.stored(p + "ln_f.bias", {D});
  w.lm_head = (!c.tied_embeddings && st.contains("lm_head.weight")) ? st.stored("lm_head.weight", {c.vocab_size, D})
                                                                      : w.tok_emb;
  return w;
}

ModelWeights load_neox(const ModelConfig& c, const WeightStore& st) {
  const int64_t D = c.d_model, F = c.d_ff, H = c.n_head, d = c.head_dim;
  ModelWeights w;
  w.tok_emb = st.stored("gpt_neox.embed_in.weight", {c.vocab_size, D});
  for (int s = 0; s < c.n_layer; ++s) {
    const std::string l = "gpt_neox.layers." + std::to_string(s) + ".";
    LayerWeights lw;
    lw.ln1_w = st.stored(l + "input_layernorm.weight", {D});
    lw.ln1_b = st.stored(l + "input_layernorm.bias", {D});
    // The fused projection's output is laid out per head as [H, 3, d] (q, k, v of head 0, ...).
    at::Tensor qkv = st.stored(l + "attention.query_key_value.weight", {3 * H * d, D}).view({H, 3, d, D});
    lw.wq = qkv.select(1, 0).reshape({H * d, D}).contiguous();
    lw.wk = qkv.select(1, 1).reshape({H * d, D}).contiguous();
    lw.wv = qkv.select(1, 2).reshape({H * d, D}).contiguous();
    if (c.attn_bias) {
      at::Tensor b = st.stored(l + "attention.query_key_value.bias", {3 * H * d}).view({H, 3, d});
      lw.bq = b.select(1, 0).reshape({H * d}).contiguous();
      lw.bk = b.select(1, 1).reshape({H * d}).contiguous();
      lw.bv = b.select(1, 2).reshape({H * d}).contiguous();
      lw.bo = st.stored(l + "attention.dense.bias", {D});
    }
    lw.wo = st.stored(l + "attention.dense.weight", {D, H * d});
    lw.ln2_w = st.stored(l + "post_attention_layernorm.weight", {D});
    lw.ln2_b = st.stored(l + "post_attention_layernorm.bias", {D});
    lw.w_up = st.stored(l + "mlp.dense_h_to_4h.weight", {F, D});
    lw.b_up = st.stored(l + "mlp.dense_h_to_4h.bias", {F});
    lw.w_down = st.stored(l + "mlp.dense_4h_to_h.weight", {D, F});
    lw.b_down = st.stored(l + "mlp.dense_4h_to_h.bias", {D});
    w.layers.push_back(std::move(lw));
  }
  w.lnf_w = st.stored("gpt_neox.final_layer_norm.weight", {D});
  w.lnf_b = st.stored("gpt_neox.final_layer_norm.bias", {D});
  w.lm_head = c.tied_embeddings ? w.tok_emb : st.stored("embed_out.weight", {c.vocab_size, D});
  return w;
}

// The Llama family (Llama, Mistral, Qwen2, Qwen3): one layout; the config says which optional
// tensors a member has (q/k/v and o biases, Qwen3's per-head q_norm/k_norm [head_dim]). A tensor
// the config calls for must be there; shapes follow the config's head_dim, so a head_dim that
// disagrees with the checkpoint is refused by st.get naming the tensor and both shapes.
ModelWeights load_llama(const ModelConfig& c, const WeightStore& st) {
  const int64_t D = c.d_model, F = c.d_ff, q = int64_t(c.n_head) * c.head_dim,
                kv = int64_t(c.n_kv_head) * c.head_dim, d = c.head_dim;
  ModelWeights w;
  w.tok_emb = st.stored("model.embed_tokens.weight", {c.vocab_size, D});
  auto opt = [&](const std::string& name, const Shape& shape) {
    return st.contains(name) ? st.stored(name, shape) : at::Tensor();
  };
  // The attention tensors' shapes come from config.json's head counts and head_dim: a mismatch is
  // named as such (a wrong head_dim is the usual cause), with the file, the tensor and both shapes.
  auto attn = [&](const std::string& name, const Shape& shape) {
    at::Tensor t = st.stored(name);
    if (!t.sizes().equals(shape))
      fail(st.source(), "tensor '" + name + "' has shape " + shape_str(t.sizes()) + ", but config.json's " +
                            std::to_string(c.n_head) + " attention heads and " + std::to_string(c.n_kv_head) +
                            " key/value heads of head_dim " + std::to_string(c.head_dim) + " need " +
                            shape_str(shape) + " (does head_dim match the checkpoint?)");
    return t;
  };
  for (int s = 0; s < c.n_layer; ++s) {
    const std::string l = "model.layers." + std::to_string(s) + ".";
    LayerWeights lw;
    lw.ln1_w = st.stored(l + "input_layernorm.weight", {D});
    lw.wq = attn(l + "self_attn.q_proj.weight", {q, D});
    lw.wk = attn(l + "self_attn.k_proj.weight", {kv, D});
    lw.wv = attn(l + "self_attn.v_proj.weight", {kv, D});
    lw.wo = attn(l + "self_attn.o_proj.weight", {D, q});
    if (c.attn_bias) {
      lw.bq = attn(l + "self_attn.q_proj.bias", {q});
      lw.bk = attn(l + "self_attn.k_proj.bias", {kv});
      lw.bv = attn(l + "self_attn.v_proj.bias", {kv});
      if (c.attn_out_bias) lw.bo = st.stored(l + "self_attn.o_proj.bias", {D});
    }
    if (c.qk_norm) {
      lw.q_norm = attn(l + "self_attn.q_norm.weight", {d});
      lw.k_norm = attn(l + "self_attn.k_norm.weight", {d});
    }
    lw.ln2_w = st.stored(l + "post_attention_layernorm.weight", {D});
    lw.w_gate = st.stored(l + "mlp.gate_proj.weight", {F, D});
    lw.w_up = st.stored(l + "mlp.up_proj.weight", {F, D});
    lw.w_down = st.stored(l + "mlp.down_proj.weight", {D, F});
    if (c.mlp_bias) {
      lw.b_up = opt(l + "mlp.up_proj.bias", {F});
      lw.b_down = opt(l + "mlp.down_proj.bias", {D});
    }
    w.layers.push_back(std::move(lw));
  }
  w.lnf_w = st.stored("model.norm.weight", {D});
  w.lm_head = (c.tied_embeddings || !st.contains("lm_head.weight")) ? w.tok_emb
                                                                     : st.stored("lm_head.weight", {c.vocab_size, D});
  return w;
}

}  // namespace

ModelWeights load_hf_weights(const ModelConfig& c, const WeightStore& store) {
  switch (c.arch) {
    case Arch::GPT2: return load_gpt2(c, store);
    case Arch::GPTNeoX: return load_neox(c, store);
    case Arch::Llama:
    case Arch::Mistral:
    case Arch::Qwen2:
    case Arch::Qwen3: return load_llama(c, store);
    case Arch::Llama2C: break;
  }
  fail("weights", "llama2.c checkpoints are loaded with load_llama2c_model");
}

std::vector<std::pair<std::string, std::vector<int64_t>>> hf_tensor_shapes(const ModelConfig& c) {
  const int64_t D = c.d_model, F = c.d_ff, V = c.vocab_size, q = int64_t(c.n_head) * c.head_dim,
                kv = int64_t(c.n_kv_head) * c.head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  switch (c.arch) {
    case Arch::GPT2:  // as the Hub's gpt2 stores them: no "transformer." prefix, Conv1D [in, out]
      out = {{"wte.weight", {V, D}}, {"wpe.weight", {c.n_ctx, D}}};
      for (int s = 0; s < c.n_layer; ++s) {
        const std::string l = "h." + std::to_string(s) + ".";
        for (auto& e : std::vector<std::pair<std::string, std::vector<int64_t>>>{
                 {"ln_1.weight", {D}},        {"ln_1.bias", {D}},         {"attn.c_attn.weight", {D, 3 * D}},
                 {"attn.c_attn.bias", {3 * D}}, {"attn.c_proj.weight", {D, D}}, {"attn.c_proj.bias", {D}},
                 {"ln_2.weight", {D}},        {"ln_2.bias", {D}},         {"mlp.c_fc.weight", {D, F}},
                 {"mlp.c_fc.bias", {F}},      {"mlp.c_proj.weight", {F, D}}, {"mlp.c_proj.bias", {D}}})
          out.emplace_back(l + e.first, e.second);
      }
      out.push_back({"ln_f.weight", {D}});
      out.push_back({"ln_f.bias", {D}});
      if (!c.tied_embeddings) out.push_back({"lm_head.weight", {V, D}});
      return out;
    case Arch::Llama:
      if (c.attn_bias || c.mlp_bias) break;
      out = {{"model.embed_tokens.weight", {V, D}}};
      for (int s = 0; s < c.n_layer; ++s) {
        const std::string l = "model.layers." + std::to_string(s) + ".";
        for (auto& e : std::vector<std::pair<std::string, std::vector<int64_t>>>{
                 {"input_layernorm.weight", {D}}, {"self_attn.q_proj.weight", {q, D}}, {"self_attn.k_proj.weight", {kv, D}},
                 {"self_attn.v_proj.weight", {kv, D}}, {"self_attn.o_proj.weight", {D, q}},
                 {"post_attention_layernorm.weight", {D}}, {"mlp.gate_proj.weight", {F, D}}, {"mlp.up_proj.weight", {F, D}},
                 {"mlp.down_proj.weight", {D, F}}})
          out.emplace_back(l + e.first, e.second);
      }
      out.push_back({"model.norm.weight", {D}});
      if (!c.tied_embeddings) out.push_back({"lm_head.weight", {V, D}});
      return out;
    default: break;
  }
  fail(c.arch_name, "writing the tensor list is implemented for GPT-2 and bias-free Llama models only");
}

NamedTensors hf_weights_with_attention(const ModelConfig& c, const WeightStore& st, const ModelWeights& w) {
  if (int(w.layers.size()) != c.n_layer) fail(st.source(), "weights of another layer count");
  auto cpu = [](const at::Tensor& t) { return t.detach().to(at::kCPU, at::kFloat).contiguous(); };
  std::map<std::string, at::Tensor> replaced;  // HF name -> tensor in that checkpoint's layout
  for (int s = 0; s < c.n_layer; ++s) {
    const LayerWeights& lw = w.layers[size_t(s)];
    switch (c.arch) {
      case Arch::GPT2: {
        const std::string l = gpt2_prefix(st) + "h." + std::to_string(s) + ".";
        replaced[l + "attn.c_attn.weight"] = cpu(at::cat({lw.wq, lw.wk, lw.wv}, 0).t());
        replaced[l + "attn.c_attn.bias"] = cpu(at::cat({lw.bq, lw.bk, lw.bv}, 0));
        replaced[l + "attn.c_proj.weight"] = cpu(lw.wo.t());
        replaced[l + "attn.c_proj.bias"] = cpu(lw.bo);
        break;
      }
      case Arch::GPTNeoX: {
        const std::string l = "gpt_neox.layers." + std::to_string(s) + ".";
        const int64_t H = c.n_head, d = c.head_dim, D = c.d_model;
        const auto per_head = [&](const at::Tensor& t) { return t.reshape({H, 1, d, -1}); };
        replaced[l + "attention.query_key_value.weight"] =
            cpu(at::cat({per_head(lw.wq), per_head(lw.wk), per_head(lw.wv)}, 1).reshape({3 * H * d, D}));
        if (c.attn_bias) {
          replaced[l + "attention.query_key_value.bias"] =
              cpu(at::cat({per_head(lw.bq), per_head(lw.bk), per_head(lw.bv)}, 1).reshape({3 * H * d}));
          replaced[l + "attention.dense.bias"] = cpu(lw.bo);
        }
        replaced[l + "attention.dense.weight"] = cpu(lw.wo);
        break;
      }
      case Arch::Llama:
      case Arch::Mistral:
      case Arch::Qwen2:
      case Arch::Qwen3: {  // q_norm / k_norm (Qwen3) are not attention projections: kept as stored
        const std::string l = "model.layers." + std::to_string(s) + ".self_attn.";
        replaced[l + "q_proj.weight"] = cpu(lw.wq);
        replaced[l + "k_proj.weight"] = cpu(lw.wk);
        replaced[l + "v_proj.weight"] = cpu(lw.wv);
        replaced[l + "o_proj.weight"] = cpu(lw.wo);
        for (const auto& [name, b] : {std::pair<const char*, const at::Tensor*>{"q_proj.bias", &lw.bq},
                                      {"k_proj.bias", &lw.bk}, {"v_proj.bias", &lw.bv}, {"o_proj.bias", &lw.bo}})
          if (b->defined() && st.contains(l + name)) replaced[l + name] = cpu(*b);
        break;
      }
      case Arch::Llama2C: fail(st.source(), "llama2.c checkpoints are written in Hugging Face layout by convert");
    }
  }
  // Every tensor keeps the checkpoint's stored dtype (a bf16 model is written back as bf16).
  NamedTensors out;
  for (const std::string& name : st.names()) {
    const at::Tensor stored = st.as_stored(name);
    const auto it = replaced.find(name);
    out.emplace_back(name, it != replaced.end() ? it->second.to(stored.scalar_type()) : stored.contiguous());
  }
  for (const auto& [name, t] : replaced)
    if (!st.contains(name)) fail(st.source(), "has no tensor " + name + " to write the attention weights into");
  return out;
}

void save_gpt2_model(const Model& m, const std::string& dir) {
  const ModelConfig& c = m.config();
  if (c.arch != Arch::GPT2) fail(dir, "only GPT-2 models can be saved in Hugging Face layout");
  const ModelWeights& w = m.weights();
  auto cpu = [](const at::Tensor& t) { return t.detach().to(at::kCPU, at::kFloat).contiguous(); };
  NamedTensors out;
  out.emplace_back("transformer.wte.weight", cpu(w.tok_emb));
  out.emplace_back("transformer.wpe.weight", cpu(w.pos_emb));
  for (int s = 0; s < c.n_layer; ++s) {
    const LayerWeights& lw = w.layers[s];
    const std::string l = "transformer.h." + std::to_string(s) + ".";
    out.emplace_back(l + "ln_1.weight", cpu(lw.ln1_w));
    out.emplace_back(l + "ln_1.bias", cpu(lw.ln1_b));
    out.emplace_back(l + "attn.c_attn.weight", cpu(at::cat({lw.wq, lw.wk, lw.wv}, 0).t()));
    out.emplace_back(l + "attn.c_attn.bias", cpu(at::cat({lw.bq, lw.bk, lw.bv}, 0)));
    out.emplace_back(l + "attn.c_proj.weight", cpu(lw.wo.t()));
    out.emplace_back(l + "attn.c_proj.bias", cpu(lw.bo));
    out.emplace_back(l + "ln_2.weight", cpu(lw.ln2_w));
    out.emplace_back(l + "ln_2.bias", cpu(lw.ln2_b));
    out.emplace_back(l + "mlp.c_fc.weight", cpu(lw.w_up.t()));
    out.emplace_back(l + "mlp.c_fc.bias", cpu(lw.b_up));
    out.emplace_back(l + "mlp.c_proj.weight", cpu(lw.w_down.t()));
    out.emplace_back(l + "mlp.c_proj.bias", cpu(lw.b_down));
  }
  out.emplace_back("transformer.ln_f.weight", cpu(w.lnf_w));
  out.emplace_back("transformer.ln_f.bias", cpu(w.lnf_b));
  if (!c.tied_embeddings) out.emplace_back("lm_head.weight", cpu(w.lm_head));

  std::filesystem::create_directories(dir);
  write_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}});
  write_text_file(dir + "/config.json", to_hf_config(c).dump(2) + "\n");
}

}  // namespace attnscope
