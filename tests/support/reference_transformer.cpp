// The float64 reference forward pass. Every architecture is written top to bottom as its upstream
// module computes it, from the raw checkpoint tensors, so the code reads like the Python it mirrors.
// Plain loops, no torch: the point is to be obviously right, not fast (the test models are tiny).
#include "reference_transformer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace attnscope::test {

int64_t RefTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int RefConfig::rotary_dim() const {
  switch (arch) {
    case RefArch::GPT2:
      return 0;
    case RefArch::GPTNeoX:
      // modeling_gpt_neox.py: self.rotary_ndims = int(self.head_size * config.rotary_pct)
      return static_cast<int>(head_dim() * rotary_pct);
    case RefArch::Llama:
    case RefArch::Llama2C:
    case RefArch::Mistral:
    case RefArch::Qwen2:
    case RefArch::Qwen3:
      return head_dim();
  }
  return 0;
}

namespace {

using Rows = std::vector<std::vector<double>>;  // [L][features]

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// The named tensor, checked against the shape the convention says it has.
const RefTensor& get(const RefWeights& w, const std::string& name, std::vector<int64_t> shape) {
  auto it = w.find(name);
  if (it == w.end()) throw std::runtime_error("reference: missing tensor " + name);
  if (it->second.shape != shape)
    throw std::runtime_error("reference: " + name + " has shape " + shape_str(it->second.shape) +
                             ", expected " + shape_str(shape));
  if (it->second.numel() != static_cast<int64_t>(it->second.data.size()))
    throw std::runtime_error("reference: " + name + " data size does not match its shape");
  return it->second;
}

// Layer `layer` of a llama2.c tensor stacked over layers ([n_layer][rows][cols] -> [rows][cols]).
RefTensor layer_slice(const RefTensor& stacked, int layer) {
  RefTensor t;
  t.shape.assign(stacked.shape.begin() + 1, stacked.shape.end());
  const int64_t n = t.numel();
  t.data.assign(stacked.data.begin() + layer * n, stacked.data.begin() + (layer + 1) * n);
  return t;
}

// torch.nn.Linear: weight stored [out, in]; y[o] = sum_i W[o][i] x[i] + b[o].
Rows linear(const Rows& x, const RefTensor& w, const RefTensor* b) {
  const int64_t out = w.shape[0], in = w.shape[1];
  Rows y(x.size(), std::vector<double>(out));
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? b->data[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += static_cast<double>(w.data[o * in + i]) * x[t][i];
      y[t][o] = s;
    }
  return y;
}

// transformers' Conv1D (GPT-2): weight stored [in, out] (nx, nf); y = x W + b, i.e.
// y[o] = sum_i x[i] W[i][o] + b[o] ("works like a linear layer but the weights are transposed").
Rows conv1d(const Rows& x, const RefTensor& w, const RefTensor& b) {
  const int64_t in = w.shape[0], out = w.shape[1];
  Rows y(x.size(), std::vector<double>(out));
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.data[o];
      for (int64_t i = 0; i < in; ++i) s += x[t][i] * static_cast<double>(w.data[i * out + o]);
      y[t][o] = s;
    }
  return y;
}

// torch.nn.LayerNorm over the last dim: biased variance, eps inside the square root.
Rows layer_norm(const Rows& x, const RefTensor& w, const RefTensor& b, double eps) {
  Rows y = x;
  for (auto& row : y) {
    const double n = static_cast<double>(row.size());
    double mean = 0;
    for (double v : row) mean += v;
    mean /= n;
    double var = 0;
    for (double v : row) var += (v - mean) * (v - mean);
    var /= n;
    const double inv = 1.0 / std::sqrt(var + eps);
    for (size_t i = 0; i < row.size(); ++i) row[i] = (row[i] - mean) * inv * w.data[i] + b.data[i];
  }
  return y;
}

// LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight (no mean subtraction, no bias). llama2.c's
// rmsnorm() is the same formula with eps 1e-5.
Rows rms_norm(const Rows& x, const RefTensor& w, double eps) {
  Rows y = x;
  for (auto& row : y) {
    double ss = 0;
    for (double v : row) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(row.size()) + eps);
    for (size_t i = 0; i < row.size(); ++i) row[i] = row[i] * inv * w.data[i];
  }
  return y;
}

// activations.py NewGELUActivation ("gelu_new", GPT-2):
//   0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
double gelu_tanh(double x) {
  const double pi = std::acos(-1.0);
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}
// "gelu" (GPT-NeoX hidden_act) is torch's exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))).
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
// SiLU, x * sigmoid(x): Llama's act_fn and llama2.c's w2(silu(w1 x) * w3 x).
double silu(double x) { return x / (1.0 + std::exp(-x)); }

Rows map_each(const Rows& x, double (*f)(double)) {
  Rows y = x;
  for (auto& row : y)
    for (double& v : row) v = f(v);
  return y;
}

void add_into(Rows& x, const Rows& y) {
  for (size_t t = 0; t < x.size(); ++t)
    for (size_t i = 0; i < x[t].size(); ++i) x[t][i] += y[t][i];
}

// Per-head activations [n][L][d].
struct Heads {
  int n = 0, L = 0, d = 0;
  std::vector<double> a;
  Heads(int n_, int L_, int d_) : n(n_), L(L_), d(d_), a(static_cast<size_t>(n_) * L_ * d_, 0.0) {}
  double& at(int h, int t, int i) { return a[(static_cast<size_t>(h) * L + t) * d + i]; }
  double at(int h, int t, int i) const { return a[(static_cast<size_t>(h) * L + t) * d + i]; }
};

// Hugging Face rotary embedding (GPT-NeoX and Llama), on the first `rot` dims of every head:
//   inv_freq[j] = 1 / base^(2j / rot), j < rot/2; emb = cat(freqs, freqs);
//   x_rot * cos + rotate_half(x_rot) * sin with rotate_half(x) = cat(-x2, x1),
// so dims (j, j + rot/2) rotate together by angle pos * inv_freq[j]. Dims >= rot pass through
// (NeoX partial rotary: query = cat(rope(query[..., :rotary_ndims]), query[..., rotary_ndims:])).
void rope_rotate_half(Heads& x, const std::vector<double>& inv_freq) {
  const int half = static_cast<int>(inv_freq.size());
  for (int h = 0; h < x.n; ++h)
    for (int t = 0; t < x.L; ++t)
      for (int j = 0; j < half; ++j) {
        const double angle = t * inv_freq[j], c = std::cos(angle), s = std::sin(angle);
        const double x1 = x.at(h, t, j), x2 = x.at(h, t, j + half);
        x.at(h, t, j) = x1 * c - x2 * s;
        x.at(h, t, j + half) = x2 * c + x1 * s;
      }
}

// llama2.c run.c RoPE: consecutive pairs (2j, 2j+1) of every head rotate as a complex number by
// angle pos * freq with freq = 1 / 10000^(2j / head_size) ("head_dim = i % head_size; freq =
// 1.0f / powf(10000.0f, head_dim / (float)head_size)" with i even).
void rope_interleaved(Heads& x, const std::vector<double>& freq) {
  for (int h = 0; h < x.n; ++h)
    for (int t = 0; t < x.L; ++t)
      for (int j = 0; j < static_cast<int>(freq.size()); ++j) {
        const double angle = t * freq[j], c = std::cos(angle), s = std::sin(angle);
        const double v0 = x.at(h, t, 2 * j), v1 = x.at(h, t, 2 * j + 1);
        x.at(h, t, 2 * j) = v0 * c - v1 * s;
        x.at(h, t, 2 * j + 1) = v0 * s + v1 * c;
      }
}

// 1 / base^(2j / rot) for j < rot / 2; with Llama 3's rope_scaling, each frequency rescaled as
// modeling_rope_utils._compute_llama3_parameters does, written per frequency:
//   wavelen = 2 pi / f; low_freq_wavelen = original / low_freq_factor; high_freq_wavelen = original / high_freq_factor
//   wavelen > low_freq_wavelen: f / factor;  wavelen < high_freq_wavelen: f;
//   otherwise (medium): (1 - s) f / factor + s f with s = (original / wavelen - low) / (high - low).
std::vector<double> rope_frequencies(const RefConfig& c, int rot, bool scaled) {
  std::vector<double> f(static_cast<size_t>(rot / 2));
  const double pi = std::acos(-1.0);
  for (int j = 0; j < rot / 2; ++j) {
    const double base = 1.0 / std::pow(c.rope_theta, (2.0 * j) / rot);
    f[j] = base;
    if (!scaled || c.llama3_factor == 0) continue;
    const double wavelen = 2 * pi / base, orig = c.llama3_original_context;
    if (wavelen > orig / c.llama3_low) {
      f[j] = base / c.llama3_factor;
    } else if (wavelen >= orig / c.llama3_high) {
      const double s = (orig / wavelen - c.llama3_low) / (c.llama3_high - c.llama3_low);
      f[j] = (1 - s) * base / c.llama3_factor + s * base;
    }
  }
  return f;
}

void rope(Heads& x, const std::vector<double>& freq, bool interleaved) {
  if (freq.empty()) return;
  if (interleaved)
    rope_interleaved(x, freq);
  else
    rope_rotate_half(x, freq);
}

// Qwen3RMSNorm of every head's d dims (q_norm / k_norm, weight [head_dim]).
void head_rms_norm(Heads& x, const RefTensor& w, double eps) {
  for (int h = 0; h < x.n; ++h)
    for (int t = 0; t < x.L; ++t) {
      double ss = 0;
      for (int i = 0; i < x.d; ++i) ss += x.at(h, t, i) * x.at(h, t, i);
      const double inv = 1.0 / std::sqrt(ss / x.d + eps);
      for (int i = 0; i < x.d; ++i) x.at(h, t, i) *= inv * w.data[i];
    }
}

// Splits a [L][n*d] projection into heads: head h owns features h*d .. h*d+d-1 (the `view(...,
// num_heads, head_dim)` every one of these models does).
Heads split_heads(const Rows& y, int n, int d, int offset = 0) {
  Heads x(n, static_cast<int>(y.size()), d);
  for (int h = 0; h < n; ++h)
    for (int t = 0; t < x.L; ++t)
      for (int i = 0; i < d; ++i) x.at(h, t, i) = y[t][offset + h * d + i];
  return x;
}

Rows merge_heads(const Heads& x) {
  Rows y(x.L, std::vector<double>(static_cast<size_t>(x.n) * x.d));
  for (int h = 0; h < x.n; ++h)
    for (int t = 0; t < x.L; ++t)
      for (int i = 0; i < x.d; ++i) y[t][h * x.d + i] = x.at(h, t, i);
  return y;
}

// Grouped-query attention: query head h reads kv head h / (H / Hkv). Llama's repeat_kv is "the
// equivalent of torch.repeat_interleave(x, dim=1, repeats=n_rep)"; llama2.c indexes the kv cache
// with (h / kv_mul) * head_size. The wrong variant tiles instead (h % Hkv).
Heads expand_kv(const Heads& kv, int n_head, bool tile) {
  const int group = n_head / kv.n;
  Heads x(n_head, kv.L, kv.d);
  for (int h = 0; h < n_head; ++h) {
    const int src = tile ? h % kv.n : h / group;
    for (int t = 0; t < kv.L; ++t)
      for (int i = 0; i < kv.d; ++i) x.at(h, t, i) = kv.at(src, t, i);
  }
  return x;
}

// Causal scaled dot-product attention of every head: scores q.k / sqrt(d) for keys s <= t, softmax
// over them (max-subtracted), output = sum_s p[t][s] v[s]. Positions s > t get probability 0 (the
// upstream masks fill them with finfo.min before the softmax, which underflows to exactly 0).
// With a sliding window W > 0 (Mistral), key s is visible from query t only when t - s < W
// (masking_utils.sliding_window_overlay: kv_idx > q_idx - sliding_window): the first visible key is
// first = t - W + 1; `first_shift` moves it (a deliberately wrong window for the power tests).
Heads attend(const Heads& q, const Heads& k, const Heads& v, std::vector<double>* probs, int window = 0,
             int first_shift = 0) {
  const int H = q.n, L = q.L, d = q.d;
  Heads out(H, L, d);
  probs->assign(static_cast<size_t>(H) * L * L, 0.0);
  for (int h = 0; h < H; ++h)
    for (int t = 0; t < L; ++t) {
      const int first = window > 0 ? std::max(0, t - window + 1 + first_shift) : 0;
      std::vector<double> p(t + 1);
      double mx = -INFINITY;
      for (int s = first; s <= t; ++s) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += q.at(h, t, i) * k.at(h, s, i);
        p[s] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, p[s]);
      }
      double sum = 0;
      for (int s = first; s <= t; ++s) sum += (p[s] = std::exp(p[s] - mx));
      for (int s = first; s <= t; ++s) {
        p[s] /= sum;
        (*probs)[(static_cast<size_t>(h) * L + t) * L + s] = p[s];
        for (int i = 0; i < d; ++i) out.at(h, t, i) += p[s] * v.at(h, s, i);
      }
    }
  return out;
}

// The part every architecture shares once q, k, v are projected: the per-head q/k norm (Qwen3:
// q_norm(q_proj(x).view(..., head_dim)) then apply_rotary_pos_emb), RoPE, GQA expansion, attention
// (within the sliding window, if any), and recording what a capture hook should see. Returns the
// merged per-head output [L][H*d].
struct QkNorm {
  const RefTensor* q = nullptr;
  const RefTensor* k = nullptr;
};

Rows attention_core(const RefConfig& c, const RefOptions& opt, Heads q, Heads k, const Heads& v,
                    bool interleaved_rope, RefLayerCapture* cap, QkNorm qk_norm = {}) {
  const int H = c.n_head;
  const int rot = opt.full_rotary ? c.head_dim() : c.rotary_dim();
  const bool interleaved = interleaved_rope != opt.swap_rope_style;
  const std::vector<double> freq = rope_frequencies(c, rot, !opt.no_rope_scaling);
  if (qk_norm.q && !opt.qk_norm_after_rope) {
    head_rms_norm(q, *qk_norm.q, c.norm_eps);
    head_rms_norm(k, *qk_norm.k, c.norm_eps);
  }
  cap->q_pre = q.a;
  cap->k_pre = expand_kv(k, H, opt.tile_kv_heads).a;
  rope(q, freq, interleaved);
  rope(k, freq, interleaved);
  if (qk_norm.q && opt.qk_norm_after_rope) {  // wrong on purpose
    head_rms_norm(q, *qk_norm.q, c.norm_eps);
    head_rms_norm(k, *qk_norm.k, c.norm_eps);
  }
  const Heads k_full = expand_kv(k, H, opt.tile_kv_heads);
  const Heads v_full = expand_kv(v, H, opt.tile_kv_heads);
  cap->q = q.a;
  cap->k = k_full.a;
  cap->v = v_full.a;
  const int window = c.arch == RefArch::Mistral && !opt.no_sliding_window ? c.sliding_window : 0;
  const Heads out = attend(q, k_full, v_full, &cap->probs, window, opt.window_one_wider ? -1 : 0);
  cap->out = out.a;
  return merge_heads(out);
}

// logits[t][v] = sum_i x[t][i] * E[v][i]: the classifier (tied embedding or a separate head).
std::vector<double> classify(const Rows& x, const RefTensor& e) {
  const int64_t V = e.shape[0], D = e.shape[1];
  std::vector<double> logits(x.size() * V);
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t i = 0; i < D; ++i) s += x[t][i] * static_cast<double>(e.data[v * D + i]);
      logits[t * V + v] = s;
    }
  return logits;
}

Rows embed(const RefTensor& table, const std::vector<int64_t>& ids) {
  const int64_t V = table.shape[0], D = table.shape[1];
  Rows x;
  for (int64_t id : ids) {
    if (id < 0 || id >= V) throw std::runtime_error("reference: token id out of range");
    x.emplace_back(table.data.begin() + id * D, table.data.begin() + (id + 1) * D);
  }
  return x;
}

// ---------------------------------------------------------------------------------------------
// GPT2LMHeadModel (modeling_gpt2.py). Block: x += attn(ln_1(x)); x += mlp(ln_2(x)).
// Attention: query, key, value = c_attn(h).split(embed_dim, dim=2), i.e. the 3D outputs of the
// Conv1D are [q | k | v], each then viewed as (num_heads, head_dim). Learned positions: wte + wpe.
// MLP: c_proj(gelu_new(c_fc(x))). Final ln_f; lm_head is tied to wte.
RefResult gpt2_forward(const RefConfig& c, const RefWeights& w, const std::vector<int64_t>& ids,
                       const RefOptions& opt, RefResult r) {
  const int64_t D = c.d_model, F = c.d_ff, H = c.n_head, d = c.head_dim();
  const RefTensor& wte = get(w, "transformer.wte.weight", {c.vocab, D});
  const RefTensor& wpe = get(w, "transformer.wpe.weight", {c.n_ctx, D});
  Rows x = embed(wte, ids);
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t i = 0; i < D; ++i) x[t][i] += wpe.data[t * D + i];

  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    const Rows h1 = layer_norm(x, get(w, p + "ln_1.weight", {D}), get(w, p + "ln_1.bias", {D}),
                               c.norm_eps);
    const Rows qkv = conv1d(h1, get(w, p + "attn.c_attn.weight", {D, 3 * D}),
                            get(w, p + "attn.c_attn.bias", {3 * D}));
    Heads q(H, r.L, d), k(H, r.L, d), v(H, r.L, d);
    if (!opt.swap_qkv_layout) {
      q = split_heads(qkv, H, d, 0);
      k = split_heads(qkv, H, d, D);
      v = split_heads(qkv, H, d, 2 * D);
    } else {  // wrong on purpose: the NeoX per-head [H, 3, d] layout
      for (int hh = 0; hh < H; ++hh)
        for (int t = 0; t < r.L; ++t)
          for (int i = 0; i < d; ++i) {
            q.at(hh, t, i) = qkv[t][hh * 3 * d + i];
            k.at(hh, t, i) = qkv[t][hh * 3 * d + d + i];
            v.at(hh, t, i) = qkv[t][hh * 3 * d + 2 * d + i];
          }
    }
    const Rows a = attention_core(c, opt, q, k, v, false, &r.layers[l]);
    add_into(x, conv1d(a, get(w, p + "attn.c_proj.weight", {D, D}),
                       get(w, p + "attn.c_proj.bias", {D})));

    const Rows h2 = layer_norm(x, get(w, p + "ln_2.weight", {D}), get(w, p + "ln_2.bias", {D}),
                               c.norm_eps);
    const Rows up = conv1d(h2, get(w, p + "mlp.c_fc.weight", {D, F}), get(w, p + "mlp.c_fc.bias", {F}));
    const Rows act = map_each(up, opt.swap_gelu ? gelu_erf : gelu_tanh);
    add_into(x, conv1d(act, get(w, p + "mlp.c_proj.weight", {F, D}),
                       get(w, p + "mlp.c_proj.bias", {D})));
  }
  const Rows xf = layer_norm(x, get(w, "transformer.ln_f.weight", {D}),
                             get(w, "transformer.ln_f.bias", {D}), c.norm_eps);
  r.logits = classify(xf, wte);
  return r;
}

// ---------------------------------------------------------------------------------------------
// GPTNeoXForCausalLM (modeling_gpt_neox.py).
// Attention: qkv = query_key_value(h) (nn.Linear, [3D, D]) is viewed as
// (..., num_attention_heads, 3 * head_size) and sliced [:hs], [hs:2hs], [2hs:], so output feature
// h*3*hs + s*hs + i is part s (q, k, v) of head h, dim i. RoPE (rotate-half, base rotary_emb_base)
// on the first rotary_ndims dims only. dense is the output projection.
// Layer: use_parallel_residual: x = x + attn(input_layernorm(x)) + mlp(post_attention_layernorm(x));
// else: x = x + attn(input_layernorm(x)); x = x + mlp(post_attention_layernorm(x)).
// MLP: dense_4h_to_h(act(dense_h_to_4h(x))) with hidden_act "gelu" (exact erf).
// Final final_layer_norm, classifier embed_out (not tied).
RefResult neox_forward(const RefConfig& c, const RefWeights& w, const std::vector<int64_t>& ids,
                       const RefOptions& opt, RefResult r) {
  const int64_t D = c.d_model, F = c.d_ff, H = c.n_head, d = c.head_dim();
  Rows x = embed(get(w, "gpt_neox.embed_in.weight", {c.vocab, D}), ids);
  auto mlp = [&](const std::string& p, const Rows& h) {
    const Rows up = linear(h, get(w, p + "mlp.dense_h_to_4h.weight", {F, D}),
                           &get(w, p + "mlp.dense_h_to_4h.bias", {F}));
    return linear(map_each(up, opt.swap_gelu ? gelu_tanh : gelu_erf),
                  get(w, p + "mlp.dense_4h_to_h.weight", {D, F}),
                  &get(w, p + "mlp.dense_4h_to_h.bias", {D}));
  };
  const bool parallel = c.parallel_residual != opt.swap_residual;

  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "gpt_neox.layers." + std::to_string(l) + ".";
    const Rows h1 = layer_norm(x, get(w, p + "input_layernorm.weight", {D}),
                               get(w, p + "input_layernorm.bias", {D}), c.norm_eps);
    const Rows qkv = linear(h1, get(w, p + "attention.query_key_value.weight", {3 * D, D}),
                            &get(w, p + "attention.query_key_value.bias", {3 * D}));
    Heads q(H, r.L, d), k(H, r.L, d), v(H, r.L, d);
    if (!opt.swap_qkv_layout) {
      for (int hh = 0; hh < H; ++hh)
        for (int t = 0; t < r.L; ++t)
          for (int i = 0; i < d; ++i) {
            q.at(hh, t, i) = qkv[t][hh * 3 * d + i];
            k.at(hh, t, i) = qkv[t][hh * 3 * d + d + i];
            v.at(hh, t, i) = qkv[t][hh * 3 * d + 2 * d + i];
          }
    } else {  // wrong on purpose: GPT-2's [q | k | v] blocks
      q = split_heads(qkv, H, d, 0);
      k = split_heads(qkv, H, d, D);
      v = split_heads(qkv, H, d, 2 * D);
    }
    const Rows a_heads = attention_core(c, opt, q, k, v, false, &r.layers[l]);
    const Rows attn = linear(a_heads, get(w, p + "attention.dense.weight", {D, D}),
                             &get(w, p + "attention.dense.bias", {D}));
    const RefTensor& ln2_w = get(w, p + "post_attention_layernorm.weight", {D});
    const RefTensor& ln2_b = get(w, p + "post_attention_layernorm.bias", {D});
    if (parallel) {
      const Rows m = mlp(p, layer_norm(x, ln2_w, ln2_b, c.norm_eps));  // from the layer input
      add_into(x, attn);
      add_into(x, m);
    } else {
      add_into(x, attn);
      add_into(x, mlp(p, layer_norm(x, ln2_w, ln2_b, c.norm_eps)));
    }
  }
  const Rows xf = layer_norm(x, get(w, "gpt_neox.final_layer_norm.weight", {D}),
                             get(w, "gpt_neox.final_layer_norm.bias", {D}), c.norm_eps);
  const RefTensor& head = get(w, opt.swap_classifier ? "gpt_neox.embed_in.weight" : "embed_out.weight",
                              {c.vocab, D});
  r.logits = classify(xf, head);
  return r;
}

// ---------------------------------------------------------------------------------------------
// LlamaForCausalLM (modeling_llama.py). Layer: x += o_proj(attn(input_layernorm(x)));
// x += down_proj(silu(gate_proj(h)) * up_proj(h)) with h = post_attention_layernorm(x).
// q/k/v/o projections have bias = config.attention_bias; k_proj/v_proj have num_key_value_heads *
// head_dim outputs (head_dim = config.head_dim or hidden_size / num_attention_heads), expanded
// with repeat_kv (repeat_interleave). RoPE rotate-half over the full head_dim, base rope_theta
// (rope_scaling llama3: rescaled frequencies). Final model.norm; lm_head.weight, or embed_tokens
// when tie_word_embeddings.
// The same block, per modeling file:
//   MistralForCausalLM  q/k/v/o without bias; the causal mask limited to sliding_window keys.
//   Qwen2ForCausalLM    q_proj/k_proj/v_proj with bias=True, o_proj bias=False.
//   Qwen3ForCausalLM    q/k/v/o bias = attention_bias; q_norm, k_norm = Qwen3RMSNorm(head_dim,
//                       eps=rms_norm_eps) on q_proj(x).view(hidden_shape) before RoPE.
RefResult llama_forward(const RefConfig& c, const RefWeights& w, const std::vector<int64_t>& ids,
                        const RefOptions& opt, RefResult r) {
  const int64_t D = c.d_model, F = c.d_ff, H = c.n_head, Hkv = c.n_kv_head, d = c.head_dim();
  const bool bias_flag = (c.arch == RefArch::Llama || c.arch == RefArch::Qwen3) && c.attention_bias;
  const bool qkv_bias = (c.arch == RefArch::Qwen2 || bias_flag) && !opt.drop_attn_bias;
  const bool o_bias = bias_flag && !opt.drop_attn_bias;
  const RefTensor& emb = get(w, "model.embed_tokens.weight", {c.vocab, D});
  Rows x = embed(emb, ids);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto bias = [&](bool has, const std::string& name, int64_t n) { return has ? &get(w, name, {n}) : nullptr; };
    const Rows h1 = rms_norm(x, get(w, p + "input_layernorm.weight", {D}), c.norm_eps);
    const Heads q = split_heads(linear(h1, get(w, p + "self_attn.q_proj.weight", {H * d, D}),
                                       bias(qkv_bias, p + "self_attn.q_proj.bias", H * d)), H, d);
    const Heads k = split_heads(linear(h1, get(w, p + "self_attn.k_proj.weight", {Hkv * d, D}),
                                       bias(qkv_bias, p + "self_attn.k_proj.bias", Hkv * d)), Hkv, d);
    const Heads v = split_heads(linear(h1, get(w, p + "self_attn.v_proj.weight", {Hkv * d, D}),
                                       bias(qkv_bias, p + "self_attn.v_proj.bias", Hkv * d)), Hkv, d);
    QkNorm qk;
    if (c.arch == RefArch::Qwen3) {
      qk.q = &get(w, p + "self_attn.q_norm.weight", {d});
      qk.k = &get(w, p + "self_attn.k_norm.weight", {d});
    }
    const Rows a = attention_core(c, opt, q, k, v, false, &r.layers[l], qk);
    add_into(x, linear(a, get(w, p + "self_attn.o_proj.weight", {D, H * d}), bias(o_bias, p + "self_attn.o_proj.bias", D)));

    const Rows h2 = rms_norm(x, get(w, p + "post_attention_layernorm.weight", {D}), c.norm_eps);
    Rows gate = map_each(linear(h2, get(w, p + "mlp.gate_proj.weight", {F, D}), nullptr), silu);
    const Rows up = linear(h2, get(w, p + "mlp.up_proj.weight", {F, D}), nullptr);
    for (size_t t = 0; t < gate.size(); ++t)
      for (int64_t f = 0; f < F; ++f) gate[t][f] *= up[t][f];
    add_into(x, linear(gate, get(w, p + "mlp.down_proj.weight", {D, F}), nullptr));
  }
  const Rows xf = rms_norm(x, get(w, "model.norm.weight", {D}), c.norm_eps);
  if (c.tied && w.count("lm_head.weight"))
    throw std::runtime_error("reference: tied Llama checkpoint should not carry lm_head.weight");
  const bool use_emb = c.tied != opt.swap_classifier;
  r.logits = classify(xf, use_emb ? emb : get(w, "lm_head.weight", {c.vocab, D}));
  return r;
}

// ---------------------------------------------------------------------------------------------
// llama2.c run.c transformer(): the Llama block with its own layout. Tensors are stacked over
// layers, matmul(xout, x, w, n, d) computes W (d,n) @ x, i.e. [out][in] rows like nn.Linear; wk/wv
// have kv_dim = dim * n_kv_heads / n_heads rows; RoPE on consecutive pairs with base 10000;
// rmsnorm eps 1e-5; classifier wcls = token_embedding_table when the header's vocab_size > 0.
RefResult llama2c_forward(const RefConfig& c, const RefWeights& w, const std::vector<int64_t>& ids,
                          const RefOptions& opt, RefResult r) {
  const int64_t D = c.d_model, F = c.d_ff, H = c.n_head, Hkv = c.n_kv_head, d = c.head_dim();
  const int64_t NL = c.n_layer, kv_dim = Hkv * d;
  const double eps = 1e-5;  // hard-coded in run.c's rmsnorm
  const RefTensor& emb = get(w, "token_embedding_table", {c.vocab, D});
  Rows x = embed(emb, ids);
  RefConfig rc = c;
  rc.rope_theta = 10000.0;  // run.c: powf(10000.0f, ...)
  for (int l = 0; l < c.n_layer; ++l) {
    auto slice = [&](const char* name, std::vector<int64_t> shape) {
      shape.insert(shape.begin(), NL);
      return layer_slice(get(w, name, shape), l);
    };
    const Rows h1 = rms_norm(x, slice("rms_att_weight", {D}), eps);
    const Heads q = split_heads(linear(h1, slice("wq", {H * d, D}), nullptr), H, d);
    const Heads k = split_heads(linear(h1, slice("wk", {kv_dim, D}), nullptr), Hkv, d);
    const Heads v = split_heads(linear(h1, slice("wv", {kv_dim, D}), nullptr), Hkv, d);
    const Rows a = attention_core(rc, opt, q, k, v, true, &r.layers[l]);
    add_into(x, linear(a, slice("wo", {D, H * d}), nullptr));

    const Rows h2 = rms_norm(x, slice("rms_ffn_weight", {D}), eps);
    Rows hb = map_each(linear(h2, slice("w1", {F, D}), nullptr), silu);
    const Rows hb2 = linear(h2, slice("w3", {F, D}), nullptr);
    for (size_t t = 0; t < hb.size(); ++t)
      for (int64_t f = 0; f < F; ++f) hb[t][f] *= hb2[t][f];
    add_into(x, linear(hb, slice("w2", {D, F}), nullptr));
  }
  const Rows xf = rms_norm(x, get(w, "rms_final_weight", {D}), eps);
  if (c.tied && w.count("wcls"))
    throw std::runtime_error("reference: shared-classifier llama2.c checkpoint should not carry wcls");
  const bool use_emb = c.tied != opt.swap_classifier;
  r.logits = classify(xf, use_emb ? emb : get(w, "wcls", {c.vocab, D}));
  return r;
}

}  // namespace

RefResult reference_forward(const RefConfig& c, const RefWeights& w, const std::vector<int64_t>& ids,
                            const RefOptions& opt) {
  if (ids.empty() || static_cast<int>(ids.size()) > c.n_ctx)
    throw std::runtime_error("reference: sequence length must be in [1, n_ctx]");
  if ((c.head_dim_override == 0 && c.d_model % c.n_head != 0) || c.n_head % c.n_kv_head != 0)
    throw std::runtime_error("reference: heads do not divide evenly");
  RefResult r;
  r.L = static_cast<int>(ids.size());
  r.V = c.vocab;
  r.H = c.n_head;
  r.d = c.head_dim();
  r.layers.resize(c.n_layer);
  switch (c.arch) {
    case RefArch::GPT2:
      return gpt2_forward(c, w, ids, opt, std::move(r));
    case RefArch::GPTNeoX:
      return neox_forward(c, w, ids, opt, std::move(r));
    case RefArch::Llama:
    case RefArch::Mistral:
    case RefArch::Qwen2:
    case RefArch::Qwen3:
      return llama_forward(c, w, ids, opt, std::move(r));
    case RefArch::Llama2C:
      return llama2c_forward(c, w, ids, opt, std::move(r));
  }
  throw std::runtime_error("reference: unknown architecture");
}

double reference_mean_loss(const RefConfig& c, const RefWeights& w, const std::vector<int64_t>& ids) {
  const RefResult r = reference_forward(c, w, ids);
  double total = 0;
  for (int t = 0; t + 1 < r.L; ++t) {
    // -log softmax(logits[t])[ids[t+1]] = logsumexp(logits[t]) - logits[t][ids[t+1]]
    double mx = -INFINITY;
    for (int v = 0; v < r.V; ++v) mx = std::max(mx, r.logit(t, v));
    double sum = 0;
    for (int v = 0; v < r.V; ++v) sum += std::exp(r.logit(t, v) - mx);
    total += mx + std::log(sum) - r.logit(t, static_cast<int>(ids[t + 1]));
  }
  return total / (r.L - 1);
}

std::vector<int64_t> reference_greedy(const RefConfig& c, const RefWeights& w,
                                      std::vector<int64_t> prompt, int steps, int64_t stop_id,
                                      double* min_margin) {
  double margin = INFINITY;
  for (int s = 0; s < steps; ++s) {
    const RefResult r = reference_forward(c, w, prompt);
    const int t = r.L - 1;
    int best = 0;
    double max_abs = 0;
    for (int v = 0; v < r.V; ++v) {
      if (r.logit(t, v) > r.logit(t, best)) best = v;
      max_abs = std::max(max_abs, std::abs(r.logit(t, v)));
    }
    double second = -INFINITY;
    for (int v = 0; v < r.V; ++v)
      if (v != best) second = std::max(second, r.logit(t, v));
    margin = std::min(margin, (r.logit(t, best) - second) / std::max(max_abs, 1e-300));
    prompt.push_back(best);
    if (best == stop_id) break;
  }
  if (min_margin) *min_margin = margin;
  return prompt;
}

}  // namespace attnscope::test
