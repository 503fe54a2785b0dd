#include "attnscope/linear_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnscope/error.h"
#include "base/shape_str.h"

namespace attnscope {
namespace {

// Rows (queries) per chunk of the prefix-sum form: big enough for efficient matmuls, small enough
// that the C x C block inside a chunk stays cheap next to the O(L M d_v) running sums.
constexpr int64_t kChunk = 64;

void check_sequence(const char* where, const char* what, const at::Tensor& t) {
  if (!t.defined() || t.dim() < 2) fail(where, std::string(what) + " must be [..., L, dim], got " + (t.defined() ? shape_str(t.sizes()) : "nothing"));
  if (!at::isFloatingType(t.scalar_type())) fail(where, std::string(what) + " must be a floating tensor");
  if (t.size(-2) < 1) fail(where, std::string(what) + " must hold at least one token, got " + shape_str(t.sizes()));
}

// The two operands must agree in everything but (possibly) the last dimension.
void check_same_rows(const char* where, const char* a_name, const at::Tensor& a, const char* b_name,
                     const at::Tensor& b) {
  if (a.dim() != b.dim() || a.sizes().slice(0, a.dim() - 1) != b.sizes().slice(0, b.dim() - 1))
    fail(where, std::string(a_name) + " " + shape_str(a.sizes()) + " and " + b_name + " " + shape_str(b.sizes()) +
                    " must have the same leading dimensions and L");
}

// [L, L] bool, true on and below the diagonal (key j visible to query i when j <= i).
at::Tensor causal_mask(int64_t L, const at::Device& device) {
  return at::ones({L, L}, at::TensorOptions().dtype(at::kBool).device(device)).tril();
}

}  // namespace

at::Tensor softmax_map(const at::Tensor& q, const at::Tensor& k) {
  check_sequence("softmax_map", "q", q);
  check_sequence("softmax_map", "k", k);
  if (q.sizes() != k.sizes()) fail("softmax_map", "q " + shape_str(q.sizes()) + " and k " + shape_str(k.sizes()) + " must have the same shape");
  const at::Tensor kk = k.to(q.scalar_type());
  const at::Tensor scores = at::matmul(q, kk.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  const at::Tensor masked = scores.masked_fill(causal_mask(q.size(-2), q.device()).logical_not(),
                                               -std::numeric_limits<double>::infinity());
  return at::softmax(masked, -1);
}

at::Tensor softmax_attention_output(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_sequence("softmax_attention_output", "v", v);
  check_same_rows("softmax_attention_output", "q", q, "v", v);
  const at::Tensor a = softmax_map(q, k);
  return at::matmul(a, v.to(a.scalar_type()));
}

LinearMap linear_map(const at::Tensor& phi_q, const at::Tensor& phi_k) {
  check_sequence("linear_map", "phi_q", phi_q);
  check_sequence("linear_map", "phi_k", phi_k);
  if (phi_q.sizes() != phi_k.sizes())
    fail("linear_map", "phi_q " + shape_str(phi_q.sizes()) + " and phi_k " + shape_str(phi_k.sizes()) + " must have the same shape");
  const int64_t L = phi_q.size(-2);
  const at::Tensor mask = causal_mask(L, phi_q.device());
  const at::Tensor raw = at::matmul(phi_q, phi_k.to(phi_q.scalar_type()).transpose(-2, -1)).masked_fill(mask.logical_not(), 0);

  LinearMap out;
  const at::Tensor raw_sum = raw.sum(-1);
  const int64_t rows = raw_sum.numel();
  out.nonpositive_row_fraction = rows ? (raw_sum <= 0).sum().item<double>() / double(rows) : 0.0;
  const int64_t visible = rows / std::max<int64_t>(L, 1) * (L * (L + 1) / 2);
  out.negative_weight_fraction = visible ? (raw < 0).sum().item<double>() / double(visible) : 0.0;

  // Clamp signed kernel values at 0, then normalize; all-zero rows fall back to uniform over j <= i.
  const at::Tensor w = raw.clamp_min(0);
  const at::Tensor sum = w.sum(-1, /*keepdim=*/true);
  const at::Tensor uniform = mask.to(w.scalar_type()) / at::arange(1, L + 1, w.options()).unsqueeze(-1);
  out.map = at::where(sum > 0, w / at::where(sum > 0, sum, at::ones_like(sum)), uniform);
  return out;
}

at::Tensor linear_attention_output(const at::Tensor& phi_q, const at::Tensor& phi_k, const at::Tensor& v) {
  const char* where = "linear_attention_output";
  check_sequence(where, "phi_q", phi_q);
  check_sequence(where, "phi_k", phi_k);
  check_sequence(where, "v", v);
  if (phi_q.sizes() != phi_k.sizes())
    fail(where, "phi_q " + shape_str(phi_q.sizes()) + " and phi_k " + shape_str(phi_k.sizes()) + " must have the same shape");
  check_same_rows(where, "phi_q", phi_q, "v", v);

  const auto dtype = phi_q.scalar_type();
  const at::Tensor fk = phi_k.to(dtype), vv = v.to(dtype);
  const int64_t L = phi_q.size(-2);
  // Running sums over the keys seen so far: S = sum phi(k_j) v_j^T [..., M, d_v], z = sum phi(k_j) [..., M, 1].
  std::vector<int64_t> s_shape(phi_q.sizes().begin(), phi_q.sizes().end() - 2);
  std::vector<int64_t> z_shape = s_shape;
  s_shape.push_back(phi_q.size(-1));
  s_shape.push_back(v.size(-1));
  z_shape.push_back(phi_q.size(-1));
  z_shape.push_back(1);
  at::Tensor S = at::zeros(s_shape, phi_q.options());
  at::Tensor z = at::zeros(z_shape, phi_q.options());

  std::vector<at::Tensor> chunks;
  for (int64_t start = 0; start < L; start += kChunk) {
    const int64_t len = std::min(kChunk, L - start);
    const at::Tensor qc = phi_q.narrow(-2, start, len), kc = fk.narrow(-2, start, len), vc = vv.narrow(-2, start, len);
    // Within the chunk: the causal len x len block; before it: the carried sums.
    const at::Tensor w = at::matmul(qc, kc.transpose(-2, -1)).masked_fill(causal_mask(len, qc.device()).logical_not(), 0);
    const at::Tensor num = at::matmul(w, vc) + at::matmul(qc, S);
    const at::Tensor den = w.sum(-1, /*keepdim=*/true) + at::matmul(qc, z);
    chunks.push_back(num / den);
    S = S + at::matmul(kc.transpose(-2, -1), vc);
    z = z + kc.sum(-2).unsqueeze(-1);
  }
  return at::cat(chunks, -2);
}

}  // namespace attnscope
