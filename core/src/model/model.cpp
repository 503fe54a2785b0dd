// The forward pass shared by every architecture: embeddings, then per layer
//   h = x + attn(norm1(x)); x = h + mlp(norm2(h))          (sequential residual)
//   x = x + attn(norm1(x)) + mlp(norm2(x))                  (GPT-NeoX parallel residual)
// then the final norm and the LM head. Read top to bottom, like llm.c.
#include "attnscope/model.h"

#include <ATen/ATen.h>

#include <cmath>

#include "attnscope/error.h"

namespace attnscope {

namespace {

at::Tensor norm(const ModelConfig& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (!c.rms_norm) return at::layer_norm(x, {c.d_model}, w, b, c.norm_eps);
  // RMSNorm: x * rsqrt(mean(x^2) + eps) * w
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + c.norm_eps) * w;
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

// cos/sin of position * theta^(-2i/rotary_dim), [L, rotary_dim/2], computed in float64 for
// accuracy at long positions. llama2.c computes its angles in float32 (run.c); matching that keeps
// greedy decoding bit-for-bit with the reference implementation.
std::pair<at::Tensor, at::Tensor> rope_tables(const ModelConfig& c, int64_t L, const at::Device& dev) {
  const int64_t half = c.rotary_dim / 2;
  const bool f32 = c.arch == Arch::Llama2C;
  auto opts = at::TensorOptions().dtype(f32 ? at::kFloat : at::kDouble);
  at::Tensor i = at::arange(half, opts);
  at::Tensor inv_freq = 1.0 / at::pow(at::scalar_tensor(c.rope_theta, opts), (i * 2) / double(c.rotary_dim));
  at::Tensor ang = at::outer(at::arange(L, opts), inv_freq);
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
// mask is an order of magnitude slower on CPU).
at::Tensor causal_mask(int64_t L, const at::Device& dev) {
  return at::full({L, L}, -std::numeric_limits<float>::infinity(), at::TensorOptions().device(dev)).triu(1);
}

at::Tensor attention(const ModelConfig& c, const LayerWeights& w, int layer, const at::Tensor& x,
                     const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask, const CaptureHook* hook) {
  const int64_t B = x.size(0), L = x.size(1), H = c.n_head, Hkv = c.n_kv_head, d = c.head_dim;
  at::Tensor q = linear(x, w.wq, w.bq).view({B, L, H, d}).transpose(1, 2);    // [B, H, L, d]
  at::Tensor k = linear(x, w.wk, w.bk).view({B, L, Hkv, d}).transpose(1, 2);  // [B, Hkv, L, d]
  at::Tensor v = linear(x, w.wv, w.bv).view({B, L, Hkv, d}).transpose(1, 2);
  const at::Tensor q_pre = q, k_pre = k;
  if (c.rotary_dim > 0) {
    q = apply_rope(c, q, cos, sin);
    k = apply_rope(c, k, cos, sin);
  }
  // Grouped-query attention: kv head j serves query heads j*g .. j*g+g-1.
  const int64_t g = H / Hkv;
  auto expand = [g](const at::Tensor& t) { return g == 1 ? t : t.repeat_interleave(g, 1); };
  k = expand(k);
  v = expand(v);

  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(d)) + mask;  // [B, H, L, L]
  at::Tensor probs = at::softmax(scores, -1);
  at::Tensor out = at::matmul(probs, v);  // [B, H, L, d]

  if (hook && hook->on_layer) {
    AttentionActivations a;
    a.layer = layer;
    a.q = q;
    a.k = k;
    a.q_pre = q_pre;
    a.k_pre = expand(k_pre);
    a.v = v;
    a.out = out;
    if (hook->want_probs) a.probs = probs;
    hook->on_layer(a);
  }
  return linear(out.transpose(1, 2).reshape({B, L, H * d}), w.wo, w.bo);
}

}  // namespace

Model::Model(ModelConfig config, ModelWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  if (int(weights_.layers.size()) != config_.n_layer)
    fail("model", "weights hold " + std::to_string(weights_.layers.size()) + " layers, config says " +
                      std::to_string(config_.n_layer));
}

at::Tensor Model::forward(const at::Tensor& ids, const CaptureHook* hook) const {
  const ModelConfig& c = config_;
  if (ids.dim() != 2 || ids.scalar_type() != at::kLong) fail("forward", "ids must be int64 [batch, length]");
  const int64_t L = ids.size(1);
  if (L < 1 || L > c.n_ctx)
    fail("forward", "sequence length " + std::to_string(L) + " is outside 1.." + std::to_string(c.n_ctx) +
                        " (the model's context length)");
  if (ids.numel() && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= c.vocab_size))
    fail("forward", "token id out of range 0.." + std::to_string(c.vocab_size - 1));

  at::Tensor x = at::embedding(weights_.tok_emb, ids);  // [B, L, D]
  if (c.rotary_dim == 0) x = x + weights_.pos_emb.narrow(0, 0, L);
  at::Tensor cos, sin;
  if (c.rotary_dim > 0) std::tie(cos, sin) = rope_tables(c, L, x.device());
  const at::Tensor mask = causal_mask(L, x.device());

  for (int s = 0; s < c.n_layer; ++s) {
    const LayerWeights& w = weights_.layers[s];
    at::Tensor a = attention(c, w, s, norm(c, x, w.ln1_w, w.ln1_b), cos, sin, mask, hook);
    if (c.parallel_residual) {
      x = x + a + mlp(c, w, norm(c, x, w.ln2_w, w.ln2_b));
    } else {
      x = x + a;
      x = x + mlp(c, w, norm(c, x, w.ln2_w, w.ln2_b));
    }
  }
  x = norm(c, x, weights_.lnf_w, weights_.lnf_b);
  return at::matmul(x, weights_.lm_head.t());
}

double Model::mean_loss(const std::vector<int64_t>& ids, int seq_len, const ProgressFn& progress) const {
  if (seq_len < 2 || seq_len > config_.n_ctx)
    fail("eval", "sequence length " + std::to_string(seq_len) + " must be in 2.." + std::to_string(config_.n_ctx));
  if (ids.size() < 2) fail("eval", "the text has fewer than 2 tokens");
  at::NoGradGuard no_grad;
  double total = 0;
  int64_t count = 0;
  // Non-overlapping windows; the last, shorter one is kept so every token is predicted once.
  for (size_t start = 0; start + 1 < ids.size(); start += seq_len) {
    const size_t n = std::min<size_t>(seq_len, ids.size() - start);
    if (n < 2) break;
    at::Tensor w = at::tensor(std::vector<int64_t>(ids.begin() + start, ids.begin() + start + n)).view({1, -1});
    at::Tensor logits = forward(w).squeeze(0);
    at::Tensor loss = at::cross_entropy_loss(logits.narrow(0, 0, n - 1), w.squeeze(0).narrow(0, 1, n - 1),
                                             {}, at::Reduction::Sum);
    total += loss.item<double>();
    count += n - 1;
    if (progress) progress(double(start + n) / ids.size(), std::to_string(start + n) + " tokens");
  }
  return total / count;
}

std::vector<int64_t> Model::generate_greedy(
    std::vector<int64_t> prompt, int steps, int64_t stop_id,
    const std::function<void(const std::vector<int64_t>&)>& on_token) const {
  if (prompt.empty()) fail("generate", "the prompt has no tokens");
  at::NoGradGuard no_grad;
  for (int i = 0; i < steps; ++i) {
    const size_t n = std::min<size_t>(prompt.size(), config_.n_ctx);
    at::Tensor w = at::tensor(std::vector<int64_t>(prompt.end() - n, prompt.end())).view({1, -1});
    at::Tensor logits = forward(w).select(1, n - 1).squeeze(0);
    const int64_t next = logits.argmax().item<int64_t>();
    if (next == stop_id) break;
    prompt.push_back(next);
    if (on_token) on_token(prompt);
  }
  return prompt;
}

}  // namespace attnscope
