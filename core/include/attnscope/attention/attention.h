// Softmax attention and its linearization by a feature map (SPEC section 5), causal.
//
//   A_ij    = exp(q_i.k_j / sqrt d) / sum_{m<=i} exp(q_i.k_m / sqrt d)            (j <= i, else 0)
//   Ahat_ij = phi(q_i).phi(k_j) / sum_{m<=i} phi(q_i).phi(k_m)                  (j <= i, else 0)
//
// The maps are materialized L x L for display and metrics; outputs use the O(L M d_v) prefix-sum form.
// Every function takes one sequence [L, .] or a batch [..., L, .] (same leading dims everywhere)
// and computes in its inputs' floating dtype. Features come scaled, phi = exp(log_scale) * values
// (features.h; a plain tensor is phi with log_scale 0), and the scales are carried in the log
// domain, so maps and outputs stay right where phi itself under- or overflows.
//
// Non-finite input (NaN or inf in q, k, v, features or log scales) is an Error naming the argument.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "attnscope/attention/features.h"

namespace attnscope {

// Causal row-softmax(q k^T / sqrt(d)); q, k [..., L, d] -> [..., L, L]. With window W > 0 (a
// Mistral model's sliding_window) query i sees key j only when i - j < W: the model's own map.
// A negative window is an Error.
at::Tensor softmax_map(const at::Tensor& q, const at::Tensor& k, int64_t window = 0);

// softmax_map(q, k, window) @ v; v [..., L, d_v].
at::Tensor softmax_attention_output(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window = 0);

struct LinearMap {
  at::Tensor map;  // [..., L, L], zero above the diagonal; rows sum to 1 except undefined rows (NaN)
  // Rows whose raw sum sum_{j<=i} phi(q_i).phi(k_j) is <= 0, over all rows of the batch.
  double nonpositive_row_fraction = 0;
  // Causal entries (j <= i) whose raw kernel value is < 0, over all of them.
  double negative_weight_fraction = 0;
  // Rows with no positive clamped weight: NaN on j <= i (see linear_map). Always counted in
  // nonpositive_row_fraction too.
  int64_t undefined_rows = 0;
};

// phi_q, phi_k: features [..., L, M] of q and k -> Ahat. Kernel values that signed (random
// Fourier) maps make negative are clamped: w_ij = max(phi(q_i).phi(k_j), 0), Ahat_ij = w_ij /
// sum_{m<=i} w_im, computed as log w_ij = log_scale(k_j) + log max(values(q_i).values(k_j), 0)
// normalized by a logsumexp over j <= i (the query's scale cancels).
//
// Undefined rows: a row whose clamped weights are all 0 has no distribution to show: every
// positive-looking choice (uniform, one-hot) would be a fabricated answer. Its entries j <= i are
// NaN (entries above the diagonal stay 0); undefined_rows counts them, and compute_head_metrics
// excludes them from every row mean. They arise from signed maps (flex-*: all kernel values <= 0),
// from ReLU-type maps (relu, t2r, cosformer) whose query or visible keys have all-zero features,
// and from value vectors so far apart that every values(q_i).values(k_j) underflows.
LinearMap linear_map(const Features& phi_q, const Features& phi_k);

// Causal linear attention output by running sums, never forming L x L:
//   S_i = sum_{j<=i} phi(k_j) v_j^T,  z_i = sum_{j<=i} phi(k_j),  y_i = phi(q_i)^T S_i / phi(q_i).z_i
// computed chunk by chunk (a C x C causal block inside each chunk, sums carried between chunks), in
// O(L M d_v) time. phi_q, phi_k [..., L, M], v [..., L, d_v] -> [..., L, d_v]. Equals
// linear_map(phi_q, phi_k).map @ v for non-negative features.
//
// Scales: the query's cancels in y_i. Each query reads the keys relative to the largest key
// log scale it can see, c_i = max_{j<=i} log_scale(k_j) (the carried sums are rescaled when c
// grows, as online softmax does), so the dominant visible key always enters with factor 1. A key
// whose log scale lies more than ~700 (float64; ~87 in float32) below c_i contributes exactly 0
// to y_i; if that leaves no key with values(q_i).values(k_j) > 0, y_i is 0/0 = NaN (with a zero,
// not NaN, gradient flowing back from it into the features). (linear_map
// shifts each row by its largest log weight instead, so its row may still be defined there.)
//
// Kernel values are used raw (clamping entries needs the L x L map), so with signed maps a row
// with a non-positive denominator gives non-finite or meaningless values; linear_map reports how
// many rows that is.
at::Tensor linear_attention_output(const Features& phi_q, const Features& phi_k, const at::Tensor& v);

// Hybrid heads (SPEC 5, LoLCATs' linear + sliding window; their rule is head.h's, read by the
// functions below): with window W >= 1 and balance g = sigmoid(gamma), query i gives key j <= i the
// weight
//   w_ij = g exp(q_i.k_j / sqrt d)              when i - j < W  (the last W keys, softmax's weights)
//   w_ij = (1 - g) max(phi(q_i).phi(k_j), 0)    when i - j >= W (the feature map, older keys)
// normalized by sum_j w_ij. Here the query's scale does not cancel (it weighs the linear part
// against the window), so phi_q's log_scale is used. Both parts are taken in the log domain,
// shifted by one common maximum per row, so nothing overflows; every row is defined (key i is in
// its own window). W >= L is softmax attention; W = 0 is not a hybrid (plain linear attention).
// q, k [..., L, d] are the head's queries and keys as softmax attention reads them; phi_q, phi_k
// [..., L, M] their features; gamma broadcasts over the leading dims (one per head: [H] for
// [..., H, L, d], or [] for one head).
struct HybridHeads {
  int64_t window = 0;  // W
  at::Tensor gamma;    // the balance before the sigmoid
};

// The hybrid map [..., L, L] (materialized: for display, metrics and the tests).
at::Tensor hybrid_map(const Features& phi_q, const Features& phi_k, const at::Tensor& q, const at::Tensor& k,
                      const HybridHeads& hybrid);

// Its output, never forming L x L: the window part in blocks of W queries against their block and
// the one before (O(L W d)), the linear part by the chunked kernel over keys j <= i - W with each
// row's log normalizer (kernels::causal_linear_attention_lse), the two combined per row. v [..., L,
// d_v] -> [..., L, d_v]; differentiable in everything, gamma included.
at::Tensor hybrid_attention_output(const Features& phi_q, const Features& phi_k, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v, const HybridHeads& hybrid);

// The window part alone, for a caller that has the linear part from elsewhere (the recurrent form,
// which combines them by head.h's combine_head_parts):
// softmax over the keys of the window, y [..., L, d_v] and each row's logsumexp of the scores
// [..., L, 1] (log g not included). q [..., Lq, d] are the LAST Lq queries of the sequence whose
// keys k [..., Lk, d] are given (Lk >= Lq): query r is position Lk - Lq + r.
struct WindowPart {
  at::Tensor y, lse;
};
WindowPart sliding_window_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window);

}  // namespace attnscope
