// Per-head measurements of an attention map (SPEC section 5): entropy, monotonicity in the
// query-key score, and the errors of a linear map against softmax.
//
// Maps are causal and row-stochastic, [L, L] or a batch [T, L, L] (rows i, keys j <= i; 0-based i
// has i + 1 keys). Everything is computed in float64 whatever the input dtype. Means over rows are
// over all rows of all T sequences alike.
//
// Conventions the SPEC leaves open:
//   - 0 log 0 = 0 everywhere (entropy, KL, cross-entropy).
//   - KL(reference || map) and the cross-entropy read the map clamped below at 1e-300 where the
//     reference is positive, so a map that puts 0 where softmax does not gives a large but finite
//     value instead of infinity.
//   - Monotonicity uses rows with >= 3 keys (i >= 2). A row whose scores are all tied is skipped
//     (there is no order to follow); a row whose scores vary but whose weights are all tied counts
//     as Spearman 0 (the map ignores the scores). With no usable row both numbers are 0.
//   - Discordant pairs are pooled over those same rows: pairs (j, j') with distinct scores whose
//     weights are strictly in the opposite order, over all pairs with distinct scores. Tied weights
//     are not discordant.
//   - Undefined rows: a map row whose entries j <= i are all NaN is linear_map's mark for a row with
//     no positive weight (attention/attention.h). Every function here accepts such rows: row_entropy
//     gives NaN for them, monotonicity skips them, and compute_head_metrics excludes them from all
//     of its row means (entropy, normalized entropy, monotonicity, KL, cross-entropy, output
//     error) and reports their number as undefined_rows; with no defined row those means are NaN.
//   - Sampled rows: with `positions` the map holds only those query rows (0-based positions i, the
//     same in every sequence), [T, R, L]: row r has positions[r] + 1 keys. Every row mean is then
//     an estimate of the mean over all T x L rows: the first `census` positions are 0..census-1,
//     a census (weight 1: the early rows, whose few keys make them the most varied), the other
//     n = R - census a uniform sample without replacement of the N = L - census later positions
//     (weight N / n); each position is a cluster of its T rows. A mean over the rows where some
//     condition holds is the ratio estimate m = Y / X of the weighted totals of the values (Y) and
//     of the rows counted (X); standard_error holds sqrt(N^2 (1 - n/N) var(e_p) / n) / X over the
//     sampled positions p, e_p = y_p - m x_p (y_p, x_p: position p's totals). The discordant
//     fraction and the output error are ratios of totals the same way (the output error's
//     standard error is that of its squared ratio, halved over the square root). The kernel
//     error's pairs are drawn from all causal pairs as before (it reads q and k, not the map).
//     undefined_rows counts the sampled rows.
//   - Any other non-finite entry (NaN in part of a row, inf anywhere) in a map, and any NaN or inf
//     in reference, q, k, v, scores, features or row sums, is an Error naming the argument.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "attnscope/attention/features.h"

namespace attnscope {

struct HeadMetricsInput {
  at::Tensor map;            // [T, L, L] or [L, L]: the causal row-stochastic map being measured
                             // ([T, R, L] or [R, L] with `positions`)
  at::Tensor reference;      // softmax map, same shape; undefined when `map` IS the softmax map
  at::Tensor positions;      // optional int64 [R], strictly increasing in [0, L): the map's rows (see above)
  int64_t census = 0;        // with positions: its first `census` are 0..census-1, measured in full (see above)
  at::Tensor q, k;           // [T, L, d] (or [L, d]): raw queries and keys
  // The keys each row of `map` can see: j <= i and, with window W > 0 (a softmax map of a model
  // with a sliding window, ModelConfig::sliding_window), i - j < W. Normalized entropy divides by
  // the log of that count, min(i + 1, W), and monotonicity reads only those keys (a windowed map's
  // zero weights on keys it cannot see say nothing about its order). 0: every j <= i.
  int64_t window = 0;
  at::Tensor v;              // [T, L, d_v], optional: for the relative output error
  Features phi_q, phi_k;     // features [T, L, M] (scaled or plain), optional: for the kernel error
  // [T, L] ([T, R] with positions) raw sums sum_{j<=i} phi(q_i).phi(k_j), optional. Only their signs are read, so any
  // positive per-row multiple serves.
  at::Tensor raw_row_sums;
  uint64_t seed = 0;         // for sampling pairs
  // Sampled (i, j <= i) pairs for the kernel error, drawn uniformly with replacement over all causal
  // pairs of all sequences; when it is >= the number of causal pairs, every pair is used once.
  int64_t kernel_pairs = 4096;
};

struct Monotonicity {
  double spearman = 0;             // mean over usable rows of the Spearman rank correlation
  double discordant_fraction = 0;  // pooled over the pairs of those rows
};

struct HeadMetrics {
  double entropy = 0;              // mean over rows of H_i = -sum_{j<=i} A_ij log A_ij (nats)
  double normalized_entropy = 0;   // mean over rows with >= 2 keys of H_i / log(keys); 0 when L = 1
  int64_t undefined_rows = 0;      // NaN rows of the map, left out of every row mean (see above)
  std::optional<Monotonicity> monotonicity;     // needs q, k and L >= 3
  std::optional<double> kl;                     // mean row KL(reference || map); needs reference
  std::optional<double> cross_entropy;          // mean row -sum ref log map; needs reference
  // ||phi(q).phi(k) - exp(q.k/sqrt d)||_F / ||exp(q.k/sqrt d)||_F on the sampled causal pairs;
  // needs phi_q, phi_k, q, k. Computed in the log domain (each pair's difference shifted by its
  // larger exponent, the sums combined by logsumexp), so it stays finite where the kernel itself
  // overflows (q.k / sqrt d beyond ~709).
  std::optional<double> kernel_rel_error;
  // ||map@v - ref@v||_F / ||ref@v||_F over the defined rows; needs reference, v
  std::optional<double> output_rel_error;
  std::optional<double> nonpositive_row_fraction;  // fraction of raw_row_sums <= 0; needs raw_row_sums
  int64_t rows = 0;        // query rows measured, over all sequences (T x R with positions, else T x L)
  int64_t rows_total = 0;  // query rows of the sequences (T x L): rows < rows_total means row means are estimates
  // Metric name as in the JSON ("entropy", "monotonicity", "kl", ...) -> standard error of its
  // estimate from the sampled rows. A metric without an entry is exact; empty when every row was
  // measured.
  std::map<std::string, double> standard_error;
  bool sampled() const { return rows < rows_total; }
};

// Throws Error when shapes disagree, the map is not square or has negative entries, or for the
// non-finite input described above.
HeadMetrics compute_head_metrics(const HeadMetricsInput& in);

// Row entropies: [..., L, L] -> [..., L], float64, 0 log 0 = 0; NaN for undefined rows. Entries
// must be >= 0.
at::Tensor row_entropy(const at::Tensor& map);

// Monotonicity of `map` in `scores` (q k^T or any order-equivalent scaling), both [..., L, L];
// only the causal part j <= i is read; undefined rows of `map` are skipped. Spearman uses average
// ranks for ties.
Monotonicity monotonicity(const at::Tensor& map, const at::Tensor& scores);

}  // namespace attnscope
