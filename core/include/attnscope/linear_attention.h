// Softmax attention and its linearization by a feature map (SPEC section 5), causal.
//
//   A_ij    = exp(q_i.k_j / sqrt d) / sum_{m<=i} exp(q_i.k_m / sqrt d)            (j <= i, else 0)
//   Ahat_ij = phi(q_i).phi(k_j) / sum_{m<=i} phi(q_i).phi(k_m)                  (j <= i, else 0)
//
// The maps are materialized L x L for display and metrics; outputs use the O(L M d_v) prefix-sum form.
// Every function takes one sequence [L, .] or a batch [..., L, .] (same leading dims everywhere)
// and computes in its inputs' floating dtype.
#pragma once
#include <ATen/core/Tensor.h>

namespace attnscope {

// Causal row-softmax(q k^T / sqrt(d)); q, k [..., L, d] -> [..., L, L].
at::Tensor softmax_map(const at::Tensor& q, const at::Tensor& k);

// softmax_map(q, k) @ v; v [..., L, d_v].
at::Tensor softmax_attention_output(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

struct LinearMap {
  at::Tensor map;  // [..., L, L], rows sum to 1, zero above the diagonal
  // Rows whose raw sum sum_{j<=i} phi(q_i).phi(k_j) was <= 0, over all rows of the batch.
  double nonpositive_row_fraction = 0;
  // Causal entries (j <= i) whose raw kernel value was < 0, over all of them.
  double negative_weight_fraction = 0;
};

// phi_q, phi_k [..., L, M] (features of q and k) -> Ahat. Kernel values that signed (random Fourier)
// maps make negative are clamped: w_ij = max(phi(q_i).phi(k_j), 0), Ahat_ij = w_ij / sum_{m<=i} w_im;
// a row whose clamped weights are all 0 (its raw sum was <= 0 and no entry positive, or every entry
// underflowed) becomes uniform over its i keys, 1 / i. The map is therefore always finite with rows
// summing to 1; for non-negative maps the clamp changes nothing.
LinearMap linear_map(const at::Tensor& phi_q, const at::Tensor& phi_k);

// Causal linear attention output by running sums, never forming L x L:
//   S_i = sum_{j<=i} phi(k_j) v_j^T,  z_i = sum_{j<=i} phi(k_j),  y_i = phi(q_i)^T S_i / phi(q_i).z_i
// computed chunk by chunk (a C x C causal block inside each chunk, sums carried between chunks), in
// O(L M d_v) time. phi_q, phi_k [..., L, M], v [..., L, d_v] -> [..., L, d_v]. Equals
// linear_map(phi_q, phi_k).map @ v for non-negative features. Kernel values are used raw (clamping
// entries needs the L x L map), so with signed maps a row with a non-positive denominator gives
// non-finite or meaningless values; linear_map reports how many rows that is.
at::Tensor linear_attention_output(const at::Tensor& phi_q, const at::Tensor& phi_k,
                                   const at::Tensor& v);

}  // namespace attnscope
