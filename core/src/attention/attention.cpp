#include "attnscope/attention/attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnscope/attention/head.h"
#include "attnscope/base/error.h"
#include "attnscope/kernels/linear_attention.h"
#include "attnscope/base/shape_str.h"
#include "attnscope/base/tensor_checks.h"

namespace attnscope {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_sequence(const char* where, const char* what, const at::Tensor& t) {
  if (!t.defined() || t.dim() < 2) fail(where, std::string(what) + " must be [..., L, dim], got " + (t.defined() ? shape_str(t.sizes()) : "nothing"));
  if (!at::isFloatingType(t.scalar_type())) fail(where, std::string(what) + " must be a floating tensor");
  if (t.size(-2) < 1) fail(where, std::string(what) + " must hold at least one token, got " + shape_str(t.sizes()));
  check_finite(where, what, t);
}

// Features: values [..., L, M] and log_scale [..., L, 1], both finite.
void check_features(const char* where, const char* what, const Features& f) {
  check_sequence(where, what, f.values);
  const std::string ls = std::string(what) + " log_scale";
  std::vector<int64_t> want(f.values.sizes().begin(), f.values.sizes().end());
  want.back() = 1;
  if (!f.log_scale.defined() || f.log_scale.sizes() != at::IntArrayRef(want))
    fail(where, ls + " must be " + shape_str(want) + " (one per vector of " + what + " " + shape_str(f.values.sizes()) +
                    "), got " + (f.log_scale.defined() ? shape_str(f.log_scale.sizes()) : "nothing"));
  if (!at::isFloatingType(f.log_scale.scalar_type())) fail(where, ls + " must be a floating tensor");
  check_finite(where, ls, f.log_scale);
}

// The two operands must agree in everything but (possibly) the last dimension.
void check_same_rows(const char* where, const char* a_name, const at::Tensor& a, const char* b_name,
                     const at::Tensor& b) {
  if (a.dim() != b.dim() || a.sizes().slice(0, a.dim() - 1) != b.sizes().slice(0, b.dim() - 1))
    fail(where, std::string(a_name) + " " + shape_str(a.sizes()) + " and " + b_name + " " + shape_str(b.sizes()) +
                    " must have the same leading dimensions and L");
}

}  // namespace

at::Tensor softmax_map(const at::Tensor& q, const at::Tensor& k, int64_t window) {
  if (window < 0) fail("softmax_map", "the sliding window must be 0 (none) or a number of keys, got " + std::to_string(window));
  check_sequence("softmax_map", "q", q);
  check_sequence("softmax_map", "k", k);
  if (q.sizes() != k.sizes()) fail("softmax_map", "q " + shape_str(q.sizes()) + " and k " + shape_str(k.sizes()) + " must have the same shape");
  const at::Tensor kk = k.to(q.scalar_type());
  const at::Tensor scores = at::matmul(q, kk.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  const at::Tensor masked = scores.masked_fill(causal_mask(q.size(-2), q.device(), window).logical_not(), -kInf);
  return at::softmax(masked, -1);
}

at::Tensor softmax_attention_output(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window) {
  check_sequence("softmax_attention_output", "v", v);
  check_same_rows("softmax_attention_output", "q", q, "v", v);
  const at::Tensor a = softmax_map(q, k, window);
  return at::matmul(a, v.to(a.scalar_type()));
}

LinearMap linear_map(const Features& phi_q, const Features& phi_k) {
  check_features("linear_map", "phi_q", phi_q);
  check_features("linear_map", "phi_k", phi_k);
  if (phi_q.values.sizes() != phi_k.values.sizes())
    fail("linear_map", "phi_q " + shape_str(phi_q.values.sizes()) + " and phi_k " + shape_str(phi_k.values.sizes()) +
                           " must have the same shape");
  const auto dtype = phi_q.values.scalar_type();
  const int64_t L = phi_q.values.size(-2);
  const at::Tensor mask = causal_mask(L, phi_q.values.device());

  // raw_ij = exp(ls_q_i + ls_k_j) dot_ij with dot_ij = values(q_i).values(k_j). The query's scale
  // is common to its row and dropped; what is left is carried as a log magnitude and a sign,
  //   a_ij = ls_k_j + log|dot_ij|   (-inf for dot = 0 and above the diagonal),
  // and each row is read relative to its largest term: t_ij = sign(dot_ij) exp(a_ij - max_j a_ij),
  // a positive multiple of raw_ij whose largest magnitude is exactly 1, so neither the sign of the
  // row sum nor the clamped weights can underflow or overflow.
  const at::Tensor dot = at::matmul(phi_q.values, phi_k.values.to(dtype).transpose(-2, -1)).masked_fill(mask.logical_not(), 0);
  if (!at::isfinite(dot).all().item<bool>())
    fail("linear_map", "phi_q.phi_k overflows; pass scaled features (FeatureMap::scaled_query_features)");
  const at::Tensor a = phi_k.log_scale.to(dtype).transpose(-2, -1) + at::log(dot.abs());
  const at::Tensor a_max = std::get<0>(a.max(-1, /*keepdim=*/true));
  // A row of all-zero kernel values has a_max = -inf: read it at 0 so exp gives 0, not NaN.
  const at::Tensor t = at::sign(dot) * at::exp(a - at::where(at::isinf(a_max), at::zeros_like(a_max), a_max));

  LinearMap out;
  const int64_t rows = dot.numel() / L;
  out.nonpositive_row_fraction = double((t.sum(-1) <= 0).sum().item<int64_t>()) / double(rows);
  const int64_t visible = rows / L * (L * (L + 1) / 2);
  out.negative_weight_fraction = double((dot < 0).sum().item<int64_t>()) / double(visible);

  // Clamp signed kernel values at 0 and normalize. A row without a positive weight is undefined:
  // NaN on its keys (attention/attention.h), 0 above the diagonal as in every row.
  const at::Tensor w = t.clamp_min(0);
  const at::Tensor sum = w.sum(-1, /*keepdim=*/true);
  const at::Tensor undefined = sum <= 0;  // [..., L, 1]
  out.undefined_rows = undefined.sum().item<int64_t>();
  out.map = at::where(undefined.logical_and(mask), at::full({}, std::nan(""), w.options()),
                      w / at::where(undefined, at::ones_like(sum), sum));
  return out;
}

at::Tensor linear_attention_output(const Features& phi_q, const Features& phi_k, const at::Tensor& v) {
  const char* where = "linear_attention_output";
  check_features(where, "phi_q", phi_q);
  check_features(where, "phi_k", phi_k);
  check_sequence(where, "v", v);
  if (phi_q.values.sizes() != phi_k.values.sizes())
    fail(where, "phi_q " + shape_str(phi_q.values.sizes()) + " and phi_k " + shape_str(phi_k.values.sizes()) +
                    " must have the same shape");
  check_same_rows(where, "phi_q", phi_q.values, "v", v);

  // The chunked kernel (kernels/): same sums, same log-scale bookkeeping, CPU or CUDA.
  const auto dtype = phi_q.values.scalar_type();
  return kernels::causal_linear_attention(phi_q.values, phi_k.values.to(dtype), phi_k.log_scale.to(dtype), v.to(dtype));
}

}  // namespace attnscope

namespace attnscope {
namespace {

void check_hybrid(const char* where, const Features& phi_q, const Features& phi_k, const at::Tensor& q,
                  const at::Tensor& k, const HybridHeads& hybrid) {
  check_features(where, "phi_q", phi_q);
  check_features(where, "phi_k", phi_k);
  check_sequence(where, "q", q);
  check_sequence(where, "k", k);
  if (phi_q.values.sizes() != phi_k.values.sizes())
    fail(where, "phi_q " + shape_str(phi_q.values.sizes()) + " and phi_k " + shape_str(phi_k.values.sizes()) +
                    " must have the same shape");
  if (q.sizes() != k.sizes()) fail(where, "q " + shape_str(q.sizes()) + " and k " + shape_str(k.sizes()) + " must have the same shape");
  check_same_rows(where, "phi_q", phi_q.values, "q", q);
  if (hybrid.window < 1) fail(where, "the window must be at least 1 token, got " + std::to_string(hybrid.window));
  if (!hybrid.gamma.defined() || hybrid.gamma.dim() > q.dim() - 2)
    fail(where, "gamma must hold one balance per head (at most the leading dimensions of q " + shape_str(q.sizes()) + ")");
  check_finite(where, "gamma", hybrid.gamma);
}

}  // namespace

WindowPart sliding_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window) {
  const char* where = "sliding_window_attention";
  check_sequence(where, "q", q);
  check_sequence(where, "k", k);
  check_sequence(where, "v", v);
  check_same_rows(where, "k", k, "v", v);
  const int64_t Lq = q.size(-2), Lk = k.size(-2), d = q.size(-1);
  if (window < 1) fail(where, "the window must be at least 1 token, got " + std::to_string(window));
  if (Lq > Lk) fail(where, "q " + shape_str(q.sizes()) + " has more positions than k " + shape_str(k.sizes()));
  const double ninf = -kInf, scale = 1.0 / std::sqrt(double(d));
  const auto dtype = q.scalar_type();
  const at::Tensor kk = k.to(dtype), vv = v.to(dtype);
  WindowPart out;
  if (Lq < Lk) {
    // The last Lq queries (the recurrent form's one): dense over all keys, masked to each window.
    const auto lopt = q.options().dtype(at::kLong);
    const at::Tensor seen = in_window(key_lag(at::arange(Lk - Lq, Lk, lopt), at::arange(0, Lk, lopt)), window);
    const at::Tensor s = (at::matmul(q, kk.transpose(-2, -1)) * scale).masked_fill(seen.logical_not(), ninf);
    out.lse = at::logsumexp(s, -1, /*keepdim=*/true);
    out.y = at::matmul(at::exp(s - out.lse), vv);
    return out;
  }
  // Blocks of Wb = min(W, L) queries, each against its own block and the one before: every key
  // within W of a query is there (W >= L: Wb = L, one block holding everything).
  const int64_t L = Lq, Wb = std::min(window, L), nb = (L + Wb - 1) / Wb, Lp = nb * Wb;
  auto pad_rows = [](const at::Tensor& x, int64_t front, int64_t back) {
    std::vector<int64_t> pad(size_t(2 * x.dim()), 0);
    pad[2] = front, pad[3] = back;  // constant_pad_nd lists the last dimension first
    return at::constant_pad_nd(x, pad, 0);
  };
  std::vector<int64_t> qshape(q.sizes().begin(), q.sizes().end() - 2);
  qshape.insert(qshape.end(), {nb, Wb, d});
  const at::Tensor qb = pad_rows(q, 0, Lp - L).reshape(qshape);                                    // [..., nb, Wb, d]
  const at::Tensor kb = pad_rows(kk, Wb, Lp - L).unfold(-2, 2 * Wb, Wb).transpose(-2, -1);        // [..., nb, 2Wb, d]
  const at::Tensor vb = pad_rows(vv, Wb, Lp - L).unfold(-2, 2 * Wb, Wb).transpose(-2, -1);        // [..., nb, 2Wb, d_v]
  // Query r of block b is position b Wb + r, key c of its keys position (b - 1) Wb + c (the keys
  // before position 0 are padding).
  const auto lopt = q.options().dtype(at::kLong);
  const at::Tensor b = at::arange(nb, lopt).view({nb, 1});
  const at::Tensor query_pos = b * Wb + at::arange(Wb, lopt), key_pos = (b - 1) * Wb + at::arange(2 * Wb, lopt);
  const at::Tensor seen = in_window(key_lag(query_pos, key_pos), window).logical_and(key_pos.unsqueeze(-2) >= 0);  // [nb, Wb, 2Wb]
  const at::Tensor s = at::matmul(qb * scale, kb.transpose(-2, -1)).masked_fill(seen.logical_not(), ninf);
  // Every row holds its own key (lag 0), so its largest score m is finite and its largest weight is
  // 1 / sum_j exp(s_j - m) >= 1 / 2Wb: lse = m - log(max weight), exactly what logsumexp would give
  // up to rounding, from softmax's one fused pass instead of logsumexp's and exp's passes.
  const at::Tensor a = at::softmax(s, -1);
  const at::Tensor lse = std::get<0>(s.max(-1, true)) - at::log(std::get<0>(a.max(-1, true)));  // [..., nb, Wb, 1]
  const at::Tensor y = at::matmul(a, vb);                                                      // [..., nb, Wb, d_v]
  std::vector<int64_t> yshape(q.sizes().begin(), q.sizes().end() - 2), lshape = yshape;
  yshape.insert(yshape.end(), {Lp, v.size(-1)});
  lshape.insert(lshape.end(), {Lp, 1});
  out.y = y.reshape(yshape).narrow(-2, 0, L);
  out.lse = lse.reshape(lshape).narrow(-2, 0, L);
  return out;
}

at::Tensor hybrid_map(const Features& phi_q, const Features& phi_k, const at::Tensor& q, const at::Tensor& k,
                      const HybridHeads& hybrid) {
  check_hybrid("hybrid_map", phi_q, phi_k, q, k, hybrid);
  const auto dtype = q.scalar_type();
  const int64_t L = q.size(-2), d = q.size(-1);
  const at::Tensor scores = at::matmul(q, k.to(dtype).transpose(-2, -1)) / std::sqrt(double(d));
  const at::Tensor dot = at::matmul(phi_q.values.to(dtype), phi_k.values.to(dtype).transpose(-2, -1));
  const at::Tensor log_lin = at::log(dot.clamp_min(0)) + phi_q.log_scale.to(dtype) + phi_k.log_scale.to(dtype).transpose(-2, -1);
  const at::Tensor pos = at::arange(L, q.options().dtype(at::kLong));
  return at::softmax(head_log_weights({scores, log_lin, key_lag(pos, pos), hybrid.window, hybrid.gamma}), -1);
}

at::Tensor hybrid_attention_output(const Features& phi_q, const Features& phi_k, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v, const HybridHeads& hybrid) {
  const char* where = "hybrid_attention_output";
  check_hybrid(where, phi_q, phi_k, q, k, hybrid);
  check_sequence(where, "v", v);
  check_same_rows(where, "q", q, "v", v);
  const auto dtype = q.scalar_type();
  const int64_t L = q.size(-2), W = hybrid.window;
  const WindowPart win = sliding_window_attention(q, k, v, W);
  if (W >= L) return win.y;  // every key is in the window: softmax attention, g cancels
  // The linear part reads keys j <= i - W: the keys moved W positions later, the first W places
  // holding zero features (weight 0) at the sequence's smallest key scale (so that they never
  // become the reference scale of a real key).
  auto later = [&](const at::Tensor& x, const at::Tensor& fill) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape[shape.size() - 2] = W;
    return at::cat({fill.expand(shape), x.narrow(-2, 0, L - W)}, -2);
  };
  const at::Tensor fk = phi_k.values.to(dtype), ls = phi_k.log_scale.to(dtype), vv = v.to(dtype);
  const at::Tensor zero = at::zeros({}, fk.options());
  const auto lin = kernels::causal_linear_attention_lse(phi_q.values.to(dtype), later(fk, zero),
                                                        later(ls, std::get<0>(ls.min(-2, true)).detach()), later(vv, zero));
  return combine_head_parts({win.y, win.lse}, {lin.y, lin.lse + phi_q.log_scale.to(dtype)}, hybrid.gamma);
}

}  // namespace attnscope
