// The forward pass shared by every architecture: embeddings, then per layer
//   h = x + attn(norm1(x)); x = h + mlp(norm2(h))          (sequential residual)
//   x = x + attn(norm1(x)) + mlp(norm2(x))                  (GPT-NeoX parallel residual)
// then the final norm and the LM head. Read top to bottom, like llm.c.
#include "attnscope/model/model.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/attention/head.h"
#include "attnscope/attention/stacked_maps.h"
#include "attnscope/base/error.h"
#include "attnscope/kernels/linear_attention.h"
#include "attnscope/attention/attention.h"

namespace attnscope {

namespace {

// The dtype of what is numerically delicate (attention, norms, logits): float32, or float64 for a
// model that computes in float64 (the tests' gradient checks).
at::ScalarType wide(at::ScalarType compute) { return compute == at::kDouble ? at::kDouble : at::kFloat; }

// Computed in float32 whatever the compute dtype (as Hugging Face does), returned in x's dtype.
at::Tensor norm(const ModelConfig& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const at::ScalarType f = wide(x.scalar_type());
  const at::Tensor xf = x.to(f), wf = w.to(f);
  if (!c.rms_norm) return at::layer_norm(xf, {c.d_model}, wf, b.defined() ? b.to(f) : b, c.norm_eps).to(x.scalar_type());
  // RMSNorm: x * rsqrt(mean(x^2) + eps) * w
  return (xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + c.norm_eps) * wf).to(x.scalar_type());
}

// One layer's weights in the compute dtype: the tensors already in it are shared, the others are
// converted copies that live while the layer runs (the stored weights stay as they are).
LayerWeights in_dtype(const LayerWeights& l, at::ScalarType dt) {
  auto to = [dt](const at::Tensor& t) { return !t.defined() || t.scalar_type() == dt ? t : t.to(dt); };
  LayerWeights m;
  m.ln1_w = to(l.ln1_w), m.ln1_b = to(l.ln1_b);
  m.wq = to(l.wq), m.wk = to(l.wk), m.wv = to(l.wv), m.wo = to(l.wo);
  m.bq = to(l.bq), m.bk = to(l.bk), m.bv = to(l.bv), m.bo = to(l.bo);
  m.q_norm = to(l.q_norm), m.k_norm = to(l.k_norm);
  m.ln2_w = to(l.ln2_w), m.ln2_b = to(l.ln2_b);
  m.w_up = to(l.w_up), m.b_up = to(l.b_up), m.w_gate = to(l.w_gate);
  m.w_down = to(l.w_down), m.b_down = to(l.b_down);
  return m;
}

// The token embeddings of ids (plus learned positions from `start`) in the compute dtype, [B, L, D].
at::Tensor embed(const ModelConfig& c, const ModelWeights& w, const at::Tensor& ids, int64_t start) {
  at::Tensor x = at::embedding(w.tok_emb, ids).to(w.compute);
  if (c.rotary_dim == 0) x = x + w.pos_emb.narrow(0, start, ids.size(1)).to(w.compute);
  return x;
}

// The language-model head over hidden states h [..., D]: float32 logits [..., V] (float64 for a
// float64 model).
at::Tensor lm_logits(const ModelWeights& w, const at::Tensor& h) {
  const at::ScalarType dt = h.scalar_type();
  if (w.lm_head.scalar_type() == dt) return at::matmul(h, w.lm_head.t()).to(wide(dt));
  // Converted block by block: the whole head in the compute dtype would be the largest tensor of
  // the run (Llama 3's 128256 x 2048 head is 1 GB in float32).
  constexpr int64_t kRows = 16384;
  const int64_t V = w.lm_head.size(0);
  std::vector<at::Tensor> parts;
  for (int64_t v0 = 0; v0 < V; v0 += kRows)
    parts.push_back(at::matmul(h, w.lm_head.narrow(0, v0, std::min(kRows, V - v0)).to(dt).t()).to(wide(dt)));
  return parts.size() == 1 ? parts[0] : at::cat(parts, -1);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

at::Tensor mlp(const ModelConfig& c, const LayerWeights& w, const at::Tensor& x) {
  at::Tensor up = linear(x, w.w_up, w.b_up);
  at::Tensor act;
  switch (c.activation) {
    case Activation::GeluTanh: act = at::gelu(up, "tanh"); break;
    case Activation::GeluErf: act = at::gelu(up); break;
    case Activation::SiLU: act = at::silu(linear(x, w.w_gate, at::Tensor())) * up; break;
  }
  return linear(act, w.w_down, w.b_down);
}

// The RoPE inverse frequencies theta^(-2i/rotary_dim), i < rotary_dim/2, in `opts`' dtype; with
// rope_scaling llama3, rescaled as HF's _compute_llama3_parameters: wavelengths 2 pi / f longer
// than original_context / low_freq_factor are slowed by `factor`, those shorter than
// original_context / high_freq_factor kept, and the band between blended by
// s = (original_context / wavelength - low) / (high - low): (1 - s) f / factor + s f.
at::Tensor rope_inv_freq(const ModelConfig& c, const at::TensorOptions& opts) {
  at::Tensor i = at::arange(c.rotary_dim / 2, opts);
  at::Tensor inv_freq = 1.0 / at::pow(at::scalar_tensor(c.rope_theta, opts), (i * 2) / double(c.rotary_dim));
  if (c.rope_llama3_factor == 0) return inv_freq;
  const double factor = c.rope_llama3_factor, low = c.rope_low_freq_factor, high = c.rope_high_freq_factor;
  const double orig = c.rope_original_context;
  const at::Tensor wavelen = 2 * M_PI / inv_freq;
  const at::Tensor smooth = (orig / wavelen - low) / (high - low);
  const at::Tensor blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq;
  return at::where(wavelen > orig / low, inv_freq / factor, at::where(wavelen < orig / high, inv_freq, blended));
}

// cos/sin of position * inv_freq, [L, rotary_dim/2], computed in float64 for
// accuracy at long positions. llama2.c computes its angles in float32 (run.c); matching that keeps
// greedy decoding bit-for-bit with the reference implementation.
std::pair<at::Tensor, at::Tensor> rope_tables(const ModelConfig& c, int64_t L, const at::Device& dev,
                                              int64_t start = 0) {
  const bool f32 = c.arch == Arch::Llama2C;
  auto opts = at::TensorOptions().dtype(f32 ? at::kFloat : at::kDouble);
  at::Tensor ang = at::outer(at::arange(start, start + L, opts), rope_inv_freq(c, opts));
  return {at::cos(ang).to(at::kFloat).to(dev), at::sin(ang).to(at::kFloat).to(dev)};
}

// Rotates the first rotary_dim dims of each head of x [B, H, L, d].
at::Tensor apply_rope(const ModelConfig& c, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t r = c.rotary_dim, half = r / 2;
  at::Tensor rot = x.narrow(-1, 0, r);
  at::Tensor out;
  if (c.rope_interleaved) {  // pairs (2i, 2i+1)
    at::Tensor p = rot.unflatten(-1, {half, 2});
    at::Tensor a = p.select(-1, 0), b = p.select(-1, 1);
    out = at::stack({a * cos - b * sin, a * sin + b * cos}, -1).flatten(-2);
  } else {  // rotate-half: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
    at::Tensor a = rot.narrow(-1, 0, half), b = rot.narrow(-1, half, half);
    out = at::cat({a * cos - b * sin, b * cos + a * sin}, -1);
  }
  if (r == c.head_dim) return out;
  return at::cat({out, x.narrow(-1, r, c.head_dim - r)}, -1);
}

// 0 on and below the diagonal, -inf above: added to the scores (masked_fill with a broadcast bool
// mask is an order of magnitude slower on CPU). With a sliding window W (Mistral) also -inf where
// i - j >= W (HF: key j visible from query i iff j <= i and i - j < W), i.e. below diagonal -W.
// Only softmax heads read the mask: a converted model's heads (linear_heads) replace softmax with
// feature maps, so the model's sliding window does not apply to them (hybrid heads have their own
// window, HeadFeatureMaps::window).
at::Tensor causal_mask(const ModelConfig& c, int64_t L, const at::Device& dev) {
  const at::Tensor inf = at::full({L, L}, -std::numeric_limits<float>::infinity(), at::TensorOptions().device(dev));
  at::Tensor mask = inf.triu(1);
  if (c.sliding_window > 0 && L > c.sliding_window) mask = mask + inf.tril(-c.sliding_window);
  return mask;
}

// RMSNorm over each head's last dim (Qwen3's q_norm / k_norm), t [B, heads, L, d]; in float32
// whatever the compute dtype, as norm(), returned in t's dtype.
at::Tensor head_rms_norm(const ModelConfig& c, const at::Tensor& t, const at::Tensor& w) {
  const at::ScalarType f = wide(t.scalar_type());
  const at::Tensor tf = t.to(f);
  return (tf * at::rsqrt(tf.pow(2).mean(-1, /*keepdim=*/true) + c.norm_eps) * w.to(f)).to(t.scalar_type());
}

// q, k, v [B, H, L, d] of one layer's input x [B, L, D], key/value heads expanded to the H query
// heads; q/k after RoPE, q_pre/k_pre before it (after the q/k norm, where the model has one); x
// itself (gated decays read it).
struct Projected {
  at::Tensor q, k, v, q_pre, k_pre, x;
};

Projected project(const ModelConfig& c, const LayerWeights& w, const at::Tensor& x, const at::Tensor& cos,
                  const at::Tensor& sin) {
  const int64_t B = x.size(0), L = x.size(1), H = c.n_head, Hkv = c.n_kv_head, d = c.head_dim;
  at::Tensor q = linear(x, w.wq, w.bq).view({B, L, H, d}).transpose(1, 2);    // [B, H, L, d]
  at::Tensor k = linear(x, w.wk, w.bk).view({B, L, Hkv, d}).transpose(1, 2);  // [B, Hkv, L, d]
  at::Tensor v = linear(x, w.wv, w.bv).view({B, L, Hkv, d}).transpose(1, 2);
  if (c.qk_norm) {  // Qwen3: per head, before RoPE
    q = head_rms_norm(c, q, w.q_norm);
    k = head_rms_norm(c, k, w.k_norm);
  }
  const at::Tensor q_pre = q, k_pre = k;
  if (c.rotary_dim > 0) {
    q = apply_rope(c, q, cos, sin);
    k = apply_rope(c, k, cos, sin);
  }
  // Grouped-query attention: kv head j serves query heads j*g .. j*g+g-1.
  const int64_t g = H / Hkv;
  auto expand = [g](const at::Tensor& t) { return g == 1 ? t : t.repeat_interleave(g, 1); };
  return {q, expand(k), expand(v), q_pre, expand(k_pre), x};
}

using MapsOfLayer = std::vector<std::shared_ptr<FeatureMap>>;

// A query that sees no key with positive weight (ReLU-type maps: t2r, relu, cosformer, when every
// visible phi(q).phi(k) is 0) has no attention distribution: its output is 0/0. The model reads
// nothing from that head for that token (output 0), as a head with an all-zero kernel row would
// contribute nothing; leaving NaN would poison every later layer. attnscope_linear.py does the same.
at::Tensor zero_undefined_rows(const at::Tensor& y) { return at::where(at::isnan(y), at::zeros_like(y), y); }

// Softmax attention over q, k, v [B, H, L, d] with the model's causal mask (and sliding window):
// the original model's heads, and a converted model's softmax heads. probs (when asked) gets A.
at::Tensor softmax_heads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask, at::Tensor* probs) {
  const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1))) + mask;  // [B, H, L, L]
  const at::Tensor a = at::softmax(scores, -1);
  if (probs) *probs = a;
  return at::matmul(a, v);
}

// A layer's heads grouped by type and feature dimension (0 for softmax heads): what the batch form
// and the recurrent form each compute as one.
std::map<std::pair<HeadType, int64_t>, std::vector<int64_t>> head_groups(const HeadFeatureMaps& lin, int layer) {
  std::map<std::pair<HeadType, int64_t>, std::vector<int64_t>> groups;
  const MapsOfLayer& maps = lin.maps[size_t(layer)];
  for (int64_t h = 0; h < int64_t(maps.size()); ++h) {
    const HeadType t = lin.type(layer, h);
    groups[{t, t == HeadType::Softmax ? 0 : maps[size_t(h)]->feature_dim()}].push_back(h);
  }
  return groups;
}

// The features of a group of heads' x [B, G, L, d] by their maps (one per head): values [B, G, L, M]
// and log scales [B, G, L, 1]. One call where the maps stack (`stack`, whose parameters move to x's
// device and dtype once), else head by head.
Features group_features(const std::vector<const FeatureMap*>& maps, std::optional<StackedMaps>& stack, const at::Tensor& x,
                        MapSide side) {
  if (stack) {
    for (auto& [name, t] : stack->params)
      if (t.device() != x.device() || t.scalar_type() != x.scalar_type()) t = t.to(x.device(), x.scalar_type());
    return stacked_features(*stack, x, side);
  }
  std::vector<at::Tensor> values, scales;
  for (size_t i = 0; i < maps.size(); ++i) {
    const at::Tensor xi = x.select(1, int64_t(i));
    const Features f = side == MapSide::Query ? maps[i]->scaled_query_features(xi) : maps[i]->scaled_key_features(xi);
    values.push_back(f.values), scales.push_back(f.log_scale);
  }
  return {at::stack(values, 1), at::stack(scales, 1)};
}

// A converted model's attention: each head by its type (HeadFeatureMaps::type). Linear and hybrid
// heads run SPEC 5's Ahat @ v in the chunked form of kernels/, one kernel call for the heads of a
// layer that share a type and a feature dimension M (heads may differ in M: per-head budgets);
// hybrid heads add their sliding window of softmax weights; softmax heads run softmax_heads.
// q, k, v [B, H, L, d] -> [B, H, L, d]; x [B, L, D] the layer's input (gated decays read it);
// probs (when asked) gets each head's map (A, Ahat or the hybrid map).
at::Tensor linear_heads(const HeadFeatureMaps& lin, int layer, const at::Tensor& q, const at::Tensor& k,
                        const at::Tensor& v, const at::Tensor& x, const at::Tensor& mask, at::Tensor* probs) {
  const MapsOfLayer& maps = lin.maps[size_t(layer)];
  const int64_t H = q.size(1);
  const at::Tensor lambda = decay_lambda(lin, layer, x);  // [B, H, L]; undefined without decay
  const at::Tensor gamma = lin.window > 0 ? lin.gamma[size_t(layer)].to(q.device()) : at::Tensor();
  // A group's maps compute its features in one call where they stack; the stack holds detached
  // parameters, so only where nothing asks for their gradients (training runs head by head).
  const bool stackable = !at::GradMode::is_enabled();
  std::vector<at::Tensor> outs(H), maps_out(probs ? H : 0);
  const auto groups = head_groups(lin, layer);
  at::Tensor whole;  // the output of a group that is the whole layer (its heads in order)
  for (const auto& [key, heads] : groups) {
    const HeadType type = key.first;
    const bool all = int64_t(heads.size()) == H;  // groups hold distinct heads in order: then 0 .. H - 1
    const at::Tensor index = at::tensor(heads, at::kLong).to(q.device());
    const at::Tensor gq = all ? q : q.index_select(1, index), gk = all ? k : k.index_select(1, index),
                     gv = all ? v : v.index_select(1, index);
    at::Tensor y, a;
    Features fq, fk;  // [B, G, L, M], [B, G, L, 1]
    if (type == HeadType::Softmax) {
      y = softmax_heads(gq, gk, gv, mask, probs ? &a : nullptr);
    } else {
      std::vector<const FeatureMap*> group;
      for (int64_t h : heads) group.push_back(maps[size_t(h)].get());
      std::optional<StackedMaps> stack = stackable ? stack_of_heads(group) : std::nullopt;
      fq = group_features(group, stack, gq, MapSide::Query);
      fk = group_features(group, stack, gk, MapSide::Key);
      if (lambda.defined()) {  // decayed heads (head.h): Lambda on the features' log scales
        const DecayedFeatures d = decayed_features(fq, fk, lambda.index_select(1, index).to(q.scalar_type()));
        fq = d.q, fk = d.k;
      }
      if (type == HeadType::Hybrid) {
        y = hybrid_attention_output(fq, fk, gq, gk, gv, {lin.window, gamma.index_select(0, index)});
      } else {
        // The query's scale cancels in Ahat @ v: the group's queries are passed with log scale 0.
        y = zero_undefined_rows(linear_attention_output(Features(fq.values, at::zeros_like(fk.log_scale)), fk, gv));
      }
    }
    if (all) whole = y;
    for (size_t i = 0; i < heads.size(); ++i) {
      const int64_t h = heads[i], g = int64_t(i);
      outs[h] = y.select(1, g);
      if (!probs) continue;
      if (type == HeadType::Softmax) {
        maps_out[h] = a.select(1, g);
        continue;
      }
      const Features hq(fq.values.select(1, g), fq.log_scale.select(1, g)), hk(fk.values.select(1, g), fk.log_scale.select(1, g));
      maps_out[h] = type == HeadType::Hybrid ? hybrid_map(hq, hk, q.select(1, h), k.select(1, h), {lin.window, gamma[h]})
                                             : linear_map(hq, hk).map;
    }
  }
  if (probs) *probs = at::stack(maps_out, 1);
  return whole.defined() ? whole : at::stack(outs, 1);
}

// The heads' outputs y [B, H, L, d] through the output projection: [B, L, H d] -> [B, L, D] in dtype.
at::Tensor output_projection(const LayerWeights& w, const at::Tensor& y, at::ScalarType dtype) {
  const int64_t B = y.size(0), H = y.size(1), L = y.size(2), d = y.size(3);
  return linear(y.transpose(1, 2).reshape({B, L, H * d}).to(dtype), w.wo, w.bo);
}

// x [B, L, D]: the layer's normed input; resid: the residual stream it was normed from (for the hook).
at::Tensor attention(const ModelConfig& c, const LayerWeights& w, int layer, const at::Tensor& x, const at::Tensor& resid,
                     const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask, const CaptureHook* hook,
                     const HeadFeatureMaps* lin) {
  auto [q, k, v, q_pre, k_pre, x_in] = project(c, w, x, cos, sin);
  // Attention runs in float32 whatever the compute dtype: scores, softmax, the feature maps' log
  // domain, and what a capture hook sees (no-ops for a float32 model).
  const at::ScalarType f = wide(x.scalar_type());
  q = q.to(f), k = k.to(f), v = v.to(f), q_pre = q_pre.to(f), k_pre = k_pre.to(f);

  at::Tensor probs, out;
  if (lin) {
    out = linear_heads(*lin, layer, q, k, v, x_in.to(f), mask, hook && hook->want_probs ? &probs : nullptr);
  } else {
    out = softmax_heads(q, k, v, mask, &probs);  // [B, H, L, d]
  }

  if (hook && hook->on_layer) {
    AttentionActivations a;
    a.layer = layer;
    a.q = q;
    a.k = k;
    a.q_pre = q_pre;
    a.k_pre = k_pre;
    a.v = v;
    a.x = x_in.to(f);
    a.resid = resid;
    a.out = out;
    if (hook->want_probs) a.probs = probs;
    hook->on_layer(a);
  }
  return output_projection(w, out, x.scalar_type());
}

// The rest of a layer once its attention output a [B, L, D] is known: the residuals and the MLP.
at::Tensor finish_layer(const ModelConfig& c, const LayerWeights& w, const at::Tensor& x, const at::Tensor& a) {
  if (c.parallel_residual) return x + a + mlp(c, w, norm(c, x, w.ln2_w, w.ln2_b));
  const at::Tensor h = x + a;
  return h + mlp(c, w, norm(c, h, w.ln2_w, w.ln2_b));
}

void check_ids(const ModelConfig& c, const at::Tensor& ids) {
  if (ids.dim() != 2 || ids.scalar_type() != at::kLong) fail("forward", "ids must be int64 [batch, length]");
  const int64_t L = ids.size(1);
  if (L < 1 || L > c.n_ctx)
    fail("forward", "sequence length " + std::to_string(L) + " is outside 1.." + std::to_string(c.n_ctx) +
                        " (the model's context length)");
  if (ids.numel() && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= c.vocab_size))
    fail("forward", "token id out of range 0.." + std::to_string(c.vocab_size - 1));
}

// Every layer over ids [B, L] (checked by the caller), then the final norm: the hidden states [B, L, D] the
// language-model head reads. Softmax attention, or linear attention with `maps` when given.
at::Tensor final_hidden(const ModelConfig& c, const ModelWeights& weights, const HeadFeatureMaps* linear,
                        const at::Tensor& ids, const CaptureHook* hook) {
  const int64_t L = ids.size(1);
  at::Tensor x = embed(c, weights, ids, 0);  // [B, L, D]
  at::Tensor cos, sin;
  if (c.rotary_dim > 0) std::tie(cos, sin) = rope_tables(c, L, x.device());
  const at::Tensor mask = causal_mask(c, L, x.device());
  for (int s = 0; s < c.n_layer; ++s) {
    const LayerWeights w = in_dtype(weights.layers[s], weights.compute);
    x = finish_layer(c, w, x, attention(c, w, s, norm(c, x, w.ln1_w, w.ln1_b), x, cos, sin, mask, hook, linear));
  }
  return norm(c, x, weights.lnf_w, weights.lnf_b);
}

// The logits of the last position only, [B, V], for generation: the language-model head over all
// L positions ([B, L, V]) would be the largest tensor of the step. Checks ids.
at::Tensor last_logits(const ModelConfig& c, const ModelWeights& weights, const HeadFeatureMaps* linear,
                       const at::Tensor& ids, const CaptureHook* hook) {
  check_ids(c, ids);
  return lm_logits(weights, final_hidden(c, weights, linear, ids, hook).select(1, ids.size(1) - 1));
}

// n new tokens ids [B, n] at positions pos .. pos + n - 1 through every layer -> the logits of the
// last, [B, V]: how a key-value cache reads a long prompt in chunks. attend(layer, p) gives the
// heads' outputs [B, H, n, d] from the chunk's projections p (q, k, v [B, H, n, d] in the wide dtype).
template <class Attend>
at::Tensor chunk_step(const ModelConfig& c, const ModelWeights& weights, const at::Tensor& ids, int64_t pos, Attend&& attend) {
  const int64_t n = ids.size(1);
  at::Tensor x = embed(c, weights, ids, pos);  // [B, n, D]
  at::Tensor cos, sin;
  if (c.rotary_dim > 0) std::tie(cos, sin) = rope_tables(c, n, x.device(), pos);
  const at::ScalarType f = wide(x.scalar_type());
  for (int s = 0; s < c.n_layer; ++s) {
    const LayerWeights w = in_dtype(weights.layers[s], weights.compute);
    Projected p = project(c, w, norm(c, x, w.ln1_w, w.ln1_b), cos, sin);
    p.q = p.q.to(f), p.k = p.k.to(f), p.v = p.v.to(f), p.x = p.x.to(f);  // attention in float32
    const at::Tensor y = attend(s, p);  // [B, H, n, d]
    x = finish_layer(c, w, x, output_projection(w, y, x.scalar_type()));
  }
  return lm_logits(weights, norm(c, x.narrow(1, n - 1, 1), weights.lnf_w, weights.lnf_b)).squeeze(1);
}

// One new token ids [B] at position pos through every layer -> logits [B, V]: how generation steps.
// attend(layer, p) gives the heads' outputs [B, H, d] from this token's projections p (q, k, v
// [B, H, 1, d] in the wide dtype, key/value heads expanded to the query heads) and whatever state
// it keeps (a key-value cache, the recurrent sums).
template <class Attend>
at::Tensor token_step(const ModelConfig& c, const ModelWeights& weights, const at::Tensor& ids, int64_t pos, Attend&& attend) {
  return chunk_step(c, weights, ids.unsqueeze(1), pos, [&](int s, const Projected& p) { return attend(s, p).unsqueeze(2); });
}

// The keys and values of softmax heads as generation keeps them, [B, H, slots, d] in the wide
// dtype: every token read (the buffers grow by half when full, so a token costs no copy of the
// cache), or with a sliding window W only the last W in a ring of W slots, position p in slot
// p % W (overwritten once p + W is read). Softmax does not depend on the order of its keys, so a
// full ring is read as it lies; the result equals attending over positions n - W .. n - 1 in order
// up to float rounding (the sums' order).
struct KvRows {
  at::Tensor k, v;
  int64_t n = 0;  // tokens read

  // A prompt's keys and values [B, H, L, d]: the last W (or all) in their slots.
  void fill(const at::Tensor& keys, const at::Tensor& values, int64_t W) {
    const int64_t L = keys.size(2), keep = W > 0 ? std::min(L, W) : L;
    const at::Tensor slots = kernels::ring_slots(L, keep, W, keys.device());
    for (auto [buf, t] : {std::pair<at::Tensor*, const at::Tensor*>{&k, &keys}, {&v, &values}}) {
      std::vector<int64_t> shape = t->sizes().vec();
      shape[2] = W > 0 ? W : L + 256;
      *buf = at::empty(shape, t->options());
      buf->index_copy_(2, slots, t->narrow(2, L - keep, keep));
    }
    n = L;
  }
  // The keys and values [B, H, m, d] of the next m tokens (the first token allocates the buffers);
  // with a window, one token at a time (m = 1).
  void push(const at::Tensor& key, const at::Tensor& value, int64_t W) {
    const int64_t m = key.size(2);
    if (!k.defined()) {
      std::vector<int64_t> shape = key.sizes().vec();
      shape[2] = W > 0 ? W : std::max<int64_t>(m, 256);
      k = at::empty(shape, key.options()), v = at::empty(shape, value.options());
    }
    const int64_t slot = W > 0 ? n % W : n;
    if (W <= 0 && k.size(2) < n + m)
      for (at::Tensor* buf : {&k, &v}) {
        std::vector<int64_t> shape = buf->sizes().vec();
        shape[2] = n + m + std::max<int64_t>((n + m) / 2, 256);
        at::Tensor grown = at::empty(shape, buf->options());
        grown.narrow(2, 0, n).copy_(buf->narrow(2, 0, n));
        *buf = grown;
      }
    k.narrow(2, slot, m).copy_(key), v.narrow(2, slot, m).copy_(value);
    n += m;
  }
  int64_t held(int64_t W) const { return W > 0 ? std::min(n, W) : n; }  // slots 0 .. held - 1
  at::Tensor keys(int64_t W) const { return k.narrow(2, 0, held(W)); }
  at::Tensor values(int64_t W) const { return v.narrow(2, 0, held(W)); }
};

// Softmax attention with a key-value cache, as every runtime generates: each layer keeps the keys
// and values of the tokens read so far (its key/value heads only, not expanded for grouped-query
// attention; in the wide dtype, KvRows), and a new token attends over them: O(n d) per head per
// token. With a sliding window W (Mistral) a token sees only the last W keys, so the cache keeps
// only those.
class KvCache {
 public:
  KvCache(const ModelConfig& c, const ModelWeights& w) : c_(c), w_(w), rows_(c.n_layer) {}

  // Reads a prompt ids [B, L], keeping every layer's keys and values (the last W with a window);
  // the logits of its last position [B, V]. The next step() is at position L. The first
  // kPrefillChunk tokens in one batch forward, the rest chunk by chunk against the cache (as
  // runtimes prefill), so the scores held are [B, H, chunk, L], not [B, H, L, L]; a model with a
  // sliding window reads the whole prompt in one forward.
  static constexpr int64_t kPrefillChunk = 512;
  at::Tensor prefill(const at::Tensor& ids) {
    const int64_t g = c_.n_head / c_.n_kv_head, L = ids.size(1);
    const int64_t first = c_.sliding_window > 0 ? L : std::min(L, kPrefillChunk);
    CaptureHook hook;
    hook.on_layer = [&](const AttentionActivations& a) {
      rows_[a.layer].fill(a.k.slice(1, 0, c_.n_head, g), a.v.slice(1, 0, c_.n_head, g), c_.sliding_window);  // [B, Hkv, L, d]
      note_held(a.layer);
    };
    at::Tensor logits = last_logits(c_, w_, nullptr, ids.narrow(1, 0, first), &hook);
    for (int64_t at_ = first; at_ < L; at_ += kPrefillChunk) {
      const int64_t n = std::min(kPrefillChunk, L - at_);
      // Query i of the chunk (position at_ + i) sees keys 0 .. at_ + i: -inf above that, the same in
      // every layer (made by the first, in the attention's dtype and device), for the g query heads
      // of a key/value head.
      at::Tensor mask;
      logits = chunk_step(c_, w_, ids.narrow(1, at_, n), at_, [&](int s, const Projected& p) {
        const int64_t B = p.q.size(0), H = c_.n_head, Hkv = c_.n_kv_head, d = c_.head_dim;
        KvRows& r = rows_[size_t(s)];
        r.push(p.k.slice(1, 0, H, g), p.v.slice(1, 0, H, g), 0);
        note_held(s);
        if (!mask.defined())
          mask = at::full({n, r.n}, -std::numeric_limits<float>::infinity(), p.q.options()).triu(at_ + 1).repeat({g, 1});
        const at::Tensor q = p.q.reshape({B, Hkv, g * n, d});  // query head j*g+i reads key/value head j
        const at::Tensor scores = at::matmul(q, r.keys(0).transpose(-2, -1)) / std::sqrt(double(d)) + mask;
        return at::matmul(at::softmax(scores, -1), r.values(0)).reshape({B, H, n, d});
      });
    }
    return logits;
  }

  at::Tensor step(const at::Tensor& ids, int64_t pos) {
    return token_step(c_, w_, ids, pos, [&](int s, const Projected& p) {
      const int64_t B = p.q.size(0), H = c_.n_head, Hkv = c_.n_kv_head, g = H / Hkv, d = c_.head_dim, W = c_.sliding_window;
      KvRows& r = rows_[size_t(s)];
      r.push(p.k.slice(1, 0, H, g), p.v.slice(1, 0, H, g), W);
      note_held(s);
      const at::Tensor q = p.q.reshape({B, Hkv, g, d});  // query head j*g+i reads key/value head j
      const at::Tensor scores = at::matmul(q, r.keys(W).transpose(-2, -1)) / std::sqrt(double(d));
      return at::matmul(at::softmax(scores, -1), r.values(W)).reshape({B, H, d});
    });
  }

  int64_t most_held() const { return most_held_; }    // keys any layer held at once, at most
  int64_t most_slots() const { return most_slots_; }  // slots any layer had allocated, at most

 private:
  void note_held(int s) {
    most_held_ = std::max(most_held_, rows_[size_t(s)].held(c_.sliding_window));
    most_slots_ = std::max(most_slots_, rows_[size_t(s)].k.size(2));
  }

  const ModelConfig& c_;
  const ModelWeights& w_;
  std::vector<KvRows> rows_;  // per layer, [B, Hkv, slots, d]
  int64_t most_held_ = 0, most_slots_ = 0;
};

// The recurrent form of linear attention through the whole model, one step per group of heads: a
// layer's heads are grouped by type and feature dimension (as the batch form groups them), and each
// group steps as one computation, its heads stacked ([B, G, ...]; the kernels see B G independent
// heads). Per head the running sums S = sum_j exp(ls_j - c) values(k_j) v_j^T [M, d] and z =
// sum_j exp(ls_j - c) values(k_j) [M] are carried relative to c = the largest key log scale seen so
// far (as linear_attention_output does), so phi never overflows and a token costs the same at every
// position. Hybrid heads also keep a ring of their last W tokens (keys, values, key features): a key
// enters the sums when it leaves the ring (kernels::hybrid_step: the whole head's token in one
// call), so memory stays constant in the sequence length. Softmax heads of a mixed model keep every
// key and value (the last sliding_window of them with the model's window): their key-value cache,
// the only state that grows with the context. Maps of one trainable family compute a group's
// features in one call (stack_of_heads); other maps head by head.
class Recurrent {
 public:
  Recurrent(const ModelConfig& c, const ModelWeights& w, const HeadFeatureMaps& lin)
      : c_(c), w_(w), lin_(lin), groups_(c.n_layer), lambda_(c.n_layer) {
    for (int s = 0; s < c.n_layer; ++s) {
      for (const auto& [key, heads] : head_groups(lin, s)) {
        Group g;
        g.type = key.first;
        g.heads = heads;
        g.index = at::tensor(heads, at::kLong);
        g.all = int64_t(heads.size()) == c.n_head;  // groups hold distinct heads in order: then 0 .. H - 1
        if (g.type != HeadType::Softmax) {
          std::vector<const FeatureMap*> maps;
          for (int64_t h : heads) maps.push_back(lin.maps[size_t(s)][size_t(h)].get());
          g.maps = maps;
          g.stack = stack_of_heads(maps);
        }
        if (g.type == HeadType::Hybrid) g.gamma = lin.gamma[size_t(s)].index_select(0, g.index);
        groups_[size_t(s)].push_back(std::move(g));
      }
    }
  }

  // Reads a whole prompt ids [B, L] in the chunked (batch) form and leaves every head's state as L
  // token-by-token steps would (kernels::final_state of its keys and values; a hybrid head's last
  // W tokens in their ring slots; a softmax head's keys and values): the prompt costs one batch
  // forward instead of L steps. Returns the logits of the last position, [B, V] (the language-model
  // head reads that position only). The next step() is at position L.
  at::Tensor prefill(const at::Tensor& ids) {
    CaptureHook hook;
    hook.on_layer = [&](const AttentionActivations& a) {
      const at::Tensor lambda = decay_lambda(lin_, a.layer, a.x);  // [B, H, L]; undefined without decay
      if (lambda.defined()) lambda_[a.layer] = lambda.select(2, lambda.size(2) - 1).to(at::kDouble);  // Lambda at L - 1
      for (Group& g : groups_[size_t(a.layer)]) {
        const at::Tensor k = heads_of(g, a.k), v = heads_of(g, a.v);  // [B, G, L, d]
        const int64_t B = v.size(0), G = v.size(1), L = v.size(2), d = v.size(3);
        if (g.type == HeadType::Softmax) {
          g.cache.fill(k, v, c_.sliding_window);
          continue;
        }
        const Features fk = features(g, k, MapSide::Key);  // [B, G, L, M], [B, G, L, 1]
        at::Tensor scales = fk.log_scale.to(fk.values.scalar_type());
        if (lambda.defined())  // keys' log scales - Lambda_j, as the batch form has them
          scales = scales - heads_of(g, lambda).unsqueeze(-1).to(scales.scalar_type());
        const int64_t M = fk.values.size(-1), W = lin_.window;
        const int64_t older = g.type == HeadType::Hybrid ? std::max<int64_t>(0, L - W) : L;
        kernels::RecurrentState sums;
        if (older > 0)
          sums = kernels::final_state(fk.values.narrow(2, 0, older).reshape({B * G, older, M}),
                                      scales.narrow(2, 0, older).reshape({B * G, older, 1}),
                                      v.narrow(2, 0, older).reshape({B * G, older, d}));
        if (g.type == HeadType::Linear) {
          g.sums = sums;
          continue;
        }
        const int64_t n = L - older;  // the ring's tokens
        g.hybrid = kernels::hybrid_state(W, L, k.narrow(2, older, n).reshape({B * G, n, d}), v.narrow(2, older, n).reshape({B * G, n, d}),
                                         fk.values.narrow(2, older, n).reshape({B * G, n, M}),
                                         scales.narrow(2, older, n).reshape({B * G, n}), sums);
      }
    };
    return last_logits(c_, w_, &lin_, ids, &hook);
  }

  // ids [B] at position pos (0, 1, 2, ... in order) -> logits [B, V].
  at::Tensor step(const at::Tensor& ids, int64_t pos) {
    return token_step(c_, w_, ids, pos, [&](int s, const Projected& p) {
      // Decayed heads: Lambda at this position, [B, H] float64 (undefined without decay).
      const at::Tensor log_a = lin_.decayed() ? decay_log_a_step(lin_, s, p.x.select(1, 0)) : at::Tensor();
      if (log_a.defined()) lambda_[s] = lambda_[s].defined() ? lambda_[s] + log_a : log_a;
      std::vector<Group>& groups = groups_[size_t(s)];
      at::Tensor y = groups.size() == 1 ? at::Tensor() : at::empty_like(p.v.squeeze(2));  // [B, H, d]
      for (Group& g : groups) {
        const at::Tensor q = heads_of(g, p.q), k = heads_of(g, p.k), v = heads_of(g, p.v);  // [B, G, 1, d]
        const at::Tensor lam = log_a.defined() ? heads_of(g, lambda_[s]).to(p.q.scalar_type()) : at::Tensor();  // [B, G]
        at::Tensor yg;
        switch (g.type) {
          case HeadType::Softmax: yg = softmax_step(g, q, k, v); break;
          case HeadType::Hybrid: yg = hybrid_step(g, q, k, v, lam); break;
          case HeadType::Linear: yg = linear_step(g, q, k, v, lam); break;
        }
        if (!y.defined()) return yg.scalar_type() == p.v.scalar_type() ? yg : yg.to(p.v.scalar_type());
        y.index_copy_(1, g.index, yg.to(y.scalar_type()));  // heads_of placed the index on the device
      }
      return y;
    });
  }

 private:
  // The heads of a layer that share a type and a feature dimension, and their state, stacked.
  struct Group {
    HeadType type = HeadType::Linear;
    std::vector<int64_t> heads;
    at::Tensor index;                       // heads as a tensor
    bool all = false;                       // every head of the layer, in order
    std::vector<const FeatureMap*> maps;    // each head's map (none for softmax heads)
    std::optional<StackedMaps> stack;       // the maps as one stack, where they stack (on the activations' device and dtype after the first call)
    at::Tensor gamma;                       // hybrid heads' balances [G]
    at::Tensor gamma_rows;                  // ... as the kernel reads them: [B G] in the activations' dtype
    kernels::RecurrentState sums;           // linear heads: all keys, [B G, ...]
    kernels::HybridState hybrid;            // hybrid heads: the ring and the sums of older keys, [B G, ...]
    KvRows cache;                           // softmax heads: the key-value cache [B, G, slots, d]
  };

  // The group's heads of t [B, H, ...] (dim 1): t itself when the group is the whole layer.
  static at::Tensor heads_of(Group& g, const at::Tensor& t) {
    if (g.all) return t;
    if (g.index.device() != t.device()) g.index = g.index.to(t.device());
    return t.index_select(1, g.index);
  }

  // The group's features of x [B, G, L, d] (group_features).
  static Features features(Group& g, const at::Tensor& x, MapSide side) { return group_features(g.maps, g.stack, x, side); }

  // The group's query and key features of one token, q and k [B, G, 1, d], side by side: values
  // [B, G, 2, M] and log scales [B, G, 2, 1] (the query's, then the key's). One call of the stack
  // on [B, G, 2, d] where its maps do not tell queries from keys (tied; the log scale is a row's
  // own), else one call each.
  static Features token_features(Group& g, const at::Tensor& q, const at::Tensor& k) {
    if (!g.stack || g.stack->has_param("q.W")) {
      const Features fq = features(g, q, MapSide::Query), fk = features(g, k, MapSide::Key);
      return {at::cat({fq.values, fk.values}, 2), at::cat({fq.log_scale, fk.log_scale}, 2)};
    }
    return features(g, at::cat({q, k}, 2), MapSide::Query);
  }

  // A softmax head's token: this token's key and value join the cache (the oldest leaves it past
  // the model's sliding window), the query reads it with softmax weights. y [B, G, d].
  at::Tensor softmax_step(Group& g, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const {
    const int64_t W = c_.sliding_window;
    g.cache.push(k, v, W);
    const at::Tensor scores = at::matmul(q, g.cache.keys(W).transpose(-2, -1)) / std::sqrt(double(q.size(-1)));  // [B, G, 1, n]
    return at::matmul(at::softmax(scores, -1), g.cache.values(W)).squeeze(2);
  }

  // Adds this token's keys and values to the heads' sums and reads their queries: y [B, G, d].
  // `lambda` [B, G]: the decay's Lambda at this position (undefined without decay), taken off the
  // keys' log scales.
  at::Tensor linear_step(Group& g, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lambda) const {
    const int64_t B = q.size(0), G = q.size(1), d = v.size(-1);
    const Features f = token_features(g, q, k);  // [B, G, 2, M]: query, key; the query's own scale cancels
    const int64_t M = f.values.size(-1);
    at::Tensor ls = f.log_scale.select(2, 1).reshape({B, G});
    if (lambda.defined()) ls = ls - lambda;
    const at::Tensor y = kernels::recurrent_step(g.sums, f.values.select(2, 0).reshape({B * G, M}), f.values.select(2, 1).reshape({B * G, M}),
                                                 ls.reshape({B * G}).to(f.values.scalar_type()), v.reshape({B * G, d}));
    return zero_undefined_rows(y.view({B, G, d}));
  }

  // A hybrid head's token (SPEC 5), kernels::hybrid_step: the key leaving the ring (position
  // pos - W) joins the sums, this token's key takes its slot, the query reads both with one
  // normalizer. y [B, G, d]. With decay (lambda [B, G]: Lambda at this position) the keys enter the
  // ring with log scale - Lambda_j and the linear part's log normalizer gains + Lambda_i, the
  // query's share of exp(Lambda_i - Lambda_j).
  at::Tensor hybrid_step(Group& g, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lambda) const {
    const Features f = token_features(g, q, k);  // [B, G, 2, M]
    const auto dtype = q.scalar_type();
    const int64_t B = q.size(0), G = q.size(1), d = v.size(-1), N = B * G;
    if (!g.gamma_rows.defined() || g.gamma_rows.size(0) != N || g.gamma_rows.device() != q.device())
      g.gamma_rows = g.gamma.to(q.device(), dtype).repeat({B});
    return kernels::hybrid_step(g.hybrid, lin_.window, q, k, v, as_dtype(f.values, dtype), as_dtype(f.log_scale, dtype),
                                g.gamma_rows, lambda)
        .view({B, G, d});
  }

  // t in dtype, without a call where it already is (the step's hot path).
  static at::Tensor as_dtype(const at::Tensor& t, at::ScalarType dtype) { return t.scalar_type() == dtype ? t : t.to(dtype); }

  const ModelConfig& c_;
  const ModelWeights& w_;
  const HeadFeatureMaps& lin_;
  std::vector<std::vector<Group>> groups_;  // per layer
  std::vector<at::Tensor> lambda_;  // decayed heads: Lambda at the last position read, [B, H] float64 per layer
};

}  // namespace

ModelWeights weights_on(const ModelWeights& w, const at::Device& device, std::optional<at::ScalarType> dtype) {
  auto to = [&](const at::Tensor& t) { return !t.defined() ? t : dtype ? t.to(device, *dtype) : t.to(device); };
  ModelWeights out;
  out.compute = w.compute;
  out.tok_emb = to(w.tok_emb);
  out.pos_emb = to(w.pos_emb);
  for (const LayerWeights& l : w.layers) {
    LayerWeights m;
    for (auto [dst, src] : std::vector<std::pair<at::Tensor*, const at::Tensor*>>{
             {&m.ln1_w, &l.ln1_w}, {&m.ln1_b, &l.ln1_b}, {&m.wq, &l.wq},       {&m.wk, &l.wk},
             {&m.wv, &l.wv},       {&m.wo, &l.wo},       {&m.bq, &l.bq},       {&m.bk, &l.bk},
             {&m.bv, &l.bv},       {&m.bo, &l.bo},       {&m.ln2_w, &l.ln2_w}, {&m.ln2_b, &l.ln2_b},
             {&m.q_norm, &l.q_norm}, {&m.k_norm, &l.k_norm},
             {&m.w_up, &l.w_up},   {&m.b_up, &l.b_up},   {&m.w_gate, &l.w_gate}, {&m.w_down, &l.w_down},
             {&m.b_down, &l.b_down}})
      *dst = to(*src);
    out.layers.push_back(std::move(m));
  }
  out.lnf_w = to(w.lnf_w);
  out.lnf_b = to(w.lnf_b);
  out.lm_head = w.lm_head.is_same(w.tok_emb) ? out.tok_emb : to(w.lm_head);  // keep tied weights tied
  return out;
}

void Model::set_feature_maps(std::shared_ptr<const HeadFeatureMaps> maps) {
  if (maps) {
    const ModelConfig& c = config_;
    if (int(maps->maps.size()) != c.n_layer)
      fail("linear attention", std::to_string(maps->maps.size()) + " layers of feature maps for a model of " +
                                   std::to_string(c.n_layer) + " layers");
    check_head_types(maps->types, c.n_layer, c.n_head, maps->window, "linear attention");
    for (int s = 0; s < c.n_layer; ++s) {
      if (int(maps->maps[s].size()) != c.n_head)
        fail("linear attention", "layer " + std::to_string(s) + " has " + std::to_string(maps->maps[s].size()) +
                                     " feature maps for " + std::to_string(c.n_head) + " heads");
      for (int h = 0; h < c.n_head; ++h) {
        const auto& m = maps->maps[s][h];
        const HeadType type = maps->type(s, h);
        if (type == HeadType::Softmax) {
          if (m) fail("linear attention", "layer " + std::to_string(s) + " head " + std::to_string(h) + " is a softmax head and takes no feature map");
          continue;
        }
        if (!m) fail("linear attention", "layer " + std::to_string(s) + " head " + std::to_string(h) + " has no feature map");
        if (m->input_dim() != c.head_dim)
          fail("linear attention", "layer " + std::to_string(s) + " head " + std::to_string(h) + ": feature map input " +
                                       std::to_string(m->input_dim()) + " != head dimension " + std::to_string(c.head_dim));
        check_head(m->name(), type == HeadType::Hybrid ? maps->window : 0);
      }
    }
    // One finite number per head in every layer: hybrid heads' balances, decayed heads' deltas.
    auto per_head = [&](const std::vector<at::Tensor>& t, const std::string& heads, const std::string& what) {
      if (int(t.size()) != c.n_layer)
        fail("linear attention", heads + " need " + what + " for each of the " + std::to_string(c.n_layer) + " layers");
      for (int s = 0; s < c.n_layer; ++s)
        if (!t[s].defined() || t[s].sizes() != at::IntArrayRef{c.n_head} || !at::isfinite(t[s]).all().item<bool>())
          fail("linear attention", "layer " + std::to_string(s) + ": " + what + " must be one finite number per head (" +
                                       std::to_string(c.n_head) + ")");
    };
    if (map_head_type(maps->window) == HeadType::Hybrid) per_head(maps->gamma, "hybrid heads", "a balance gamma");
    if (!maps->decay_delta.empty()) per_head(maps->decay_delta, "decayed heads", "a decay delta");
    check_head_decays(*maps, c.n_layer, c.n_head, "linear attention");
    if (!maps->decay_b.empty()) {
      per_head(maps->decay_b, "gated heads", "a gate bias b");
      if (!maps->decay_delta.empty() && maps->decays.empty())
        fail("linear attention", "a model whose heads have both fixed and gated decays needs each head's kind (head_decays)");
      if (int(maps->decay_w.size()) != c.n_layer) fail("linear attention", "gated heads need a gate w for each layer");
      for (int s = 0; s < c.n_layer; ++s)
        if (!maps->decay_w[s].defined() || maps->decay_w[s].sizes() != at::IntArrayRef{c.n_head, c.d_model} ||
            !at::isfinite(maps->decay_w[s]).all().item<bool>())
          fail("linear attention", "layer " + std::to_string(s) + ": a gate w must be finite [heads, d_model] = [" +
                                       std::to_string(c.n_head) + ", " + std::to_string(c.d_model) + "]");
    } else if (!maps->decay_w.empty()) {
      fail("linear attention", "gated heads need a gate bias b beside w");
    }
  }
  linear_ = std::move(maps);
}

at::Tensor Model::forward_recurrent(const at::Tensor& ids) const {
  if (!linear_) fail("forward", "the recurrent form needs a converted (linear-attention) model");
  check_ids(config_, ids);
  Recurrent r(config_, weights_, *linear_);
  std::vector<at::Tensor> logits;
  for (int64_t t = 0; t < ids.size(1); ++t) logits.push_back(r.step(ids.select(1, t), t));
  return at::stack(logits, 1);
}

Model::Model(ModelConfig config, ModelWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  if (int(weights_.layers.size()) != config_.n_layer)
    fail("model", "weights hold " + std::to_string(weights_.layers.size()) + " layers, config says " +
                      std::to_string(config_.n_layer));
}

at::Tensor Model::layer_output(int layer, const at::Tensor& resid, const at::Tensor& y) const {
  const ModelConfig& c = config_;
  if (layer < 0 || layer >= c.n_layer) fail("layer output", "layer " + std::to_string(layer) + " out of range");
  if (resid.dim() != 3 || resid.size(2) != c.d_model || y.dim() != 4 || y.size(0) != resid.size(0) || y.size(1) != c.n_head ||
      y.size(2) != resid.size(1) || y.size(3) != c.head_dim)
    fail("layer output", "needs the residual stream [B, L, d_model] and the heads' outputs [B, heads, L, head dim]");
  const LayerWeights w = in_dtype(weights_.layers[size_t(layer)], weights_.compute);
  const at::Tensor r = resid.to(weights_.compute);
  return finish_layer(c, w, r, output_projection(w, y, r.scalar_type()));
}

at::Tensor Model::forward(const at::Tensor& ids, const CaptureHook* hook) const {
  check_ids(config_, ids);
  return lm_logits(weights_, final_hidden(config_, weights_, linear_.get(), ids, hook));
}

at::Tensor Model::hidden_states(const at::Tensor& ids, const CaptureHook* hook) const {
  check_ids(config_, ids);
  return final_hidden(config_, weights_, linear_.get(), ids, hook);
}

std::vector<std::vector<double>> Model::window_losses(const std::vector<int64_t>& ids, int seq_len,
                                                     const ProgressFn& progress) const {
  if (seq_len < 2 || seq_len > config_.n_ctx)
    fail_value("sequence length", std::to_string(seq_len) + " must be in 2.." + std::to_string(config_.n_ctx));
  if (ids.size() < 2) fail("eval", "the text has fewer than 2 tokens");
  at::NoGradGuard no_grad;
  std::vector<std::vector<double>> out;
  // Non-overlapping windows; the last, shorter one is kept so every token is predicted once.
  for (size_t start = 0; start + 1 < ids.size(); start += seq_len) {
    const size_t n = std::min<size_t>(seq_len, ids.size() - start);
    if (n < 2) break;
    at::Tensor w = at::tensor(std::vector<int64_t>(ids.begin() + start, ids.begin() + start + n))
                       .view({1, -1})
                       .to(weights_.tok_emb.device());
    at::Tensor logits = forward(w).squeeze(0);
    const at::Tensor loss = at::cross_entropy_loss(logits.narrow(0, 0, n - 1), w.squeeze(0).narrow(0, 1, n - 1), {},
                                                   at::Reduction::None)
                                .to(at::kCPU, at::kDouble)
                                .contiguous();
    out.emplace_back(loss.data_ptr<double>(), loss.data_ptr<double>() + loss.numel());
    if (progress) progress(double(start + n) / ids.size(), std::to_string(start + n) + " tokens");
  }
  return out;
}

double Model::mean_loss(const std::vector<int64_t>& ids, int seq_len, const ProgressFn& progress) const {
  double total = 0;
  int64_t count = 0;
  for (const auto& w : window_losses(ids, seq_len, progress)) {
    for (double l : w) total += l;
    count += int64_t(w.size());
  }
  return total / double(count);
}

std::vector<int64_t> Model::generate_greedy(
    std::vector<int64_t> prompt, int steps, int64_t stop_id,
    const std::function<void(const std::vector<int64_t>&)>& on_token, bool kv_cache, GenerationTrace* trace) const {
  if (prompt.empty()) fail("generate", "the prompt has no tokens");
  if (!linear_ && !kv_cache) {
    if (trace) trace->logits.clear(), trace->kv_cache_tokens = trace->kv_cache_slots = 0;
    auto chosen = [&](const at::Tensor& row) {  // the logits a token is chosen from, [V], kept when the trace asks
      if (trace && trace->keep_logits) trace->logits.push_back(row.to(at::kCPU, at::kFloat).clone());
      return row.argmax().item<int64_t>();
    };  // the whole window again for every token (benchmarks' "no cache" column)
    at::NoGradGuard no_grad;
    const at::Device device = weights_.tok_emb.device();
    for (int i = 0; i < steps; ++i) {
      const size_t n = std::min<size_t>(prompt.size(), config_.n_ctx);  // the last n_ctx tokens
      const at::Tensor ids = at::tensor(std::vector<int64_t>(prompt.end() - n, prompt.end())).view({1, -1}).to(device);
      const int64_t next = chosen(last_logits(config_, weights_, nullptr, ids, nullptr).squeeze(0));
      if (next == stop_id) break;
      prompt.push_back(next);
      if (on_token) on_token(prompt);
    }
    return prompt;
  }
  std::function<void(size_t, const std::vector<int64_t>&)> each;
  if (on_token) each = [&](size_t, const std::vector<int64_t>& seq) { on_token(seq); };
  return generate_greedy_batch({std::move(prompt)}, steps, stop_id, each, trace).front();
}

std::vector<std::vector<int64_t>> Model::generate_greedy_batch(
    std::vector<std::vector<int64_t>> prompts, int steps, int64_t stop_id,
    const std::function<void(size_t, const std::vector<int64_t>&)>& on_token, GenerationTrace* trace) const {
  const size_t B = prompts.size();
  if (B == 0) fail("generate", "no prompts");
  size_t shortest = prompts[0].size();
  for (size_t b = 0; b < B; ++b) {
    if (prompts[b].empty()) fail("generate", "prompt " + std::to_string(b + 1) + " has no tokens");
    shortest = std::min(shortest, prompts[b].size());
  }
  if (trace) trace->logits.clear(), trace->kv_cache_tokens = trace->kv_cache_slots = 0;
  at::NoGradGuard no_grad;
  const at::Device device = weights_.tok_emb.device();  // token ids go where the weights are
  // fed[b]: the tokens sequence b has read, in order (its prompt, then what it generated); every
  // sequence has read the same number of tokens at every step.
  std::vector<std::vector<int64_t>> fed(B), out = prompts;
  for (size_t b = 0; b < B; ++b) fed[b].assign(prompts[b].begin(), prompts[b].begin() + int64_t(shortest));
  std::vector<int> made(B, 0);
  std::vector<bool> done(B, steps <= 0);
  std::unique_ptr<Recurrent> recurrent;
  std::unique_ptr<KvCache> cache;
  int64_t pos = 0;
  at::Tensor logits;  // [B, V]
  auto note_cache = [&] {  // the trace's record of the cache's size, before a cache is dropped
    if (trace && cache) {
      trace->kv_cache_tokens = std::max(trace->kv_cache_tokens, cache->most_held());
      trace->kv_cache_slots = std::max(trace->kv_cache_slots, cache->most_slots());
    }
  };
  // From scratch over each sequence's last n_ctx tokens: at the start, and when positions run out.
  auto restart = [&] {
    note_cache();
    const size_t n = std::min<size_t>(fed[0].size(), config_.n_ctx);
    std::vector<int64_t> flat;
    for (const auto& f : fed) flat.insert(flat.end(), f.end() - int64_t(n), f.end());
    const at::Tensor ids = at::tensor(flat).view({int64_t(B), int64_t(n)}).to(device);
    if (linear_) {
      recurrent = std::make_unique<Recurrent>(config_, weights_, *linear_);
      logits = recurrent->prefill(ids);
    } else {
      cache = std::make_unique<KvCache>(config_, weights_);
      logits = cache->prefill(ids);
    }
    pos = int64_t(n);
  };
  restart();
  for (;;) {
    // Each sequence's next token: the rest of its prompt first, then its own greedy choice.
    std::vector<int64_t> next(B);
    const at::Tensor best = logits.argmax(-1).to(at::kCPU);  // [B]: one number per sequence leaves the device
    for (size_t b = 0; b < B; ++b) {
      if (fed[b].size() < prompts[b].size()) {
        next[b] = prompts[b][fed[b].size()];
        continue;
      }
      if (done[b]) {  // it still steps with the others; what it reads is not used
        next[b] = out[b].back();
        continue;
      }
      if (b == 0 && trace && trace->keep_logits) trace->logits.push_back(logits.select(0, 0).to(at::kCPU, at::kFloat).clone());
      next[b] = best[int64_t(b)].item<int64_t>();
      if (next[b] == stop_id) {
        done[b] = true;
        continue;
      }
      out[b].push_back(next[b]);
      if (on_token) on_token(b, out[b]);
      done[b] = ++made[b] == steps;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    for (size_t b = 0; b < B; ++b) fed[b].push_back(next[b]);
    if (pos >= config_.n_ctx) {
      restart();
      continue;
    }
    const at::Tensor ids = at::tensor(next).to(device);
    logits = linear_ ? recurrent->step(ids, pos) : cache->step(ids, pos);
    ++pos;
  }
  note_cache();
  return out;
}

}  // namespace attnscope
