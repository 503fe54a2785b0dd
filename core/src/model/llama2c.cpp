// llama2.c "version 0" checkpoints: int32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len}, then float32 tensors in a fixed order. A negative vocab_size means the
// classifier is stored separately at the end instead of sharing the token embedding.
#include "model/llama2c.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <fstream>

#include "attnscope/base/error.h"

namespace attnscope {

namespace {

// The header, checked against the file's length; `shared`: the classifier is the token embedding.
ModelConfig read_header(const std::string& path, std::ifstream& in, int64_t* size_out) {
  if (!in) fail(path, "cannot open llama2.c checkpoint");
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  in.seekg(0);
  int32_t h[7];
  if (size < int64_t(sizeof h) || !in.read(reinterpret_cast<char*>(h), sizeof h))
    fail(path, "too short for a llama2.c header (7 int32)");
  const int64_t D = h[0], F = h[1], nl = h[2], H = h[3], Hkv = h[4], V = std::abs(int64_t(h[5])), T = h[6];
  const bool shared = h[5] > 0;
  for (int64_t v : {D, F, nl, H, Hkv, V, T})
    if (v <= 0 || v > (1 << 20)) fail(path, "implausible llama2.c header values (is this a llama2.c .bin?)");
  if (D % H != 0 || H % Hkv != 0)
    fail(path, "header: dim " + std::to_string(D) + ", heads " + std::to_string(H) + ", kv heads " +
                   std::to_string(Hkv) + " do not divide evenly");
  const int64_t d = D / H, kv = Hkv * d;
  const int64_t body = V * D + nl * (D + D * D + 2 * kv * D + D * D + D + 3 * F * D) + D + T * d;  // + freq_cis
  const int64_t want = int64_t(sizeof h) + 4 * (body + (shared ? 0 : V * D));
  if (size != want)
    fail(path, "file has " + std::to_string(size) + " bytes but the header (dim " + std::to_string(D) +
                   ", layers " + std::to_string(nl) + ", vocab " + std::to_string(V) + ") implies " +
                   std::to_string(want) + ": truncated or not a llama2.c checkpoint");
  ModelConfig c;
  c.arch = Arch::Llama2C;
  c.arch_name = "llama2.c";
  c.n_layer = int(nl), c.n_head = int(H), c.n_kv_head = int(Hkv), c.d_model = int(D), c.head_dim = int(d);
  c.d_ff = int(F), c.vocab_size = int(V), c.n_ctx = int(T);
  c.norm_eps = 1e-5;
  c.rms_norm = true;
  c.activation = Activation::SiLU;
  c.rotary_dim = int(d);
  c.rope_theta = 10000.0;
  c.rope_interleaved = true;
  c.tied_embeddings = shared;
  *size_out = size;
  return c;
}

}  // namespace

ModelConfig read_llama2c_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int64_t size = 0;
  return read_header(path, in, &size);
}

Model load_llama2c_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int64_t size = 0;
  const ModelConfig c = read_header(path, in, &size);
  const int64_t D = c.d_model, F = c.d_ff, nl = c.n_layer, V = c.vocab_size, T = c.n_ctx, d = c.head_dim,
                kv = int64_t(c.n_kv_head) * d, header = 7 * 4;
  const bool shared = c.tied_embeddings;

  at::Tensor all = at::empty({(size - header) / 4}, at::kFloat);
  if (!in.read(reinterpret_cast<char*>(all.data_ptr<float>()), size - header))
    fail(path, "read error");
  if (!at::isfinite(all).all().item<bool>()) fail(path, "weights contain NaN or Inf");

  int64_t off = 0;
  auto take = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    at::Tensor t = all.narrow(0, off, n).view(shape);
    off += n;
    return t;
  };
  ModelWeights w;
  w.tok_emb = take({V, D});
  at::Tensor rms_att = take({nl, D}), wq = take({nl, D, D}), wk = take({nl, kv, D}), wv = take({nl, kv, D}),
             wo = take({nl, D, D}), rms_ffn = take({nl, D}), w1 = take({nl, F, D}), w2 = take({nl, D, F}),
             w3 = take({nl, F, D});
  w.lnf_w = take({D});
  off += T * d;  // freq_cis_real / freq_cis_imag: RoPE is recomputed, as the README of the format asks
  w.lm_head = shared ? w.tok_emb : take({V, D});
  for (int64_t s = 0; s < nl; ++s) {
    LayerWeights lw;
    lw.ln1_w = rms_att[s];
    lw.wq = wq[s], lw.wk = wk[s], lw.wv = wv[s], lw.wo = wo[s];
    lw.ln2_w = rms_ffn[s];
    lw.w_gate = w1[s], lw.w_down = w2[s], lw.w_up = w3[s];  // down(silu(w1 x) * w3 x)
    w.layers.push_back(std::move(lw));
  }

  return Model(c, std::move(w));
}

}  // namespace attnscope
