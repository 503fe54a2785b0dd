#include "attention/attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/kernels/linear_attention.h"
#include "base/shape_str.h"
#include "base/tensor_checks.h"

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

at::Tensor softmax_map(const at::Tensor& q, const at::Tensor& k) {
  check_sequence("softmax_map", "q", q);
  check_sequence("softmax_map", "k", k);
  if (q.sizes() != k.sizes()) fail("softmax_map", "q " + shape_str(q.sizes()) + " and k " + shape_str(k.sizes()) + " must have the same shape");
  const at::Tensor kk = k.to(q.scalar_type());
  const at::Tensor scores = at::matmul(q, kk.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  const at::Tensor masked = scores.masked_fill(causal_mask(q.size(-2), q.device()).logical_not(), -kInf);
  return at::softmax(masked, -1);
}

at::Tensor softmax_attention_output(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_sequence("softmax_attention_output", "v", v);
  check_same_rows("softmax_attention_output", "q", q, "v", v);
  const at::Tensor a = softmax_map(q, k);
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
