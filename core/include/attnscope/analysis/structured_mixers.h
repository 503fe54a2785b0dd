// How far an attention map is from the structured sequence mixers of paper 003 (MOHAWK, appendix C;
// SPEC section 5): the relative Frobenius error ||A - P||_F / ||A||_F to the nearest (or best found)
// member P of each class. Only the causal part of A (j <= i, diagonal included) is read and every P
// is causal. State size N = MixerFitOptions::state_size.
//
//   toeplitz         P_ij = t_{i-j}. Exact projection: each diagonal replaced by its mean (C.5).
//   causal_low_rank  P = tril(U V^T), U, V [L, N] (C.2). Masked low rank has no closed form: truncated
//                    SVD of tril(A) as a start, then alternating least squares, one row of U (or of
//                    V) at a time given the other, up to `iterations` sweeps. Each half-step is an exact
//                    minimization, so the error never increases from the first half-step on.
//   retnet           P_ij = c gamma^{i-j}, gamma in [0, 1]: the retention decay mask alone. c is closed
//                    form for each gamma; gamma by a grid over 1 - gamma in log scale refined by
//                    golden-section search. Paper 003 (C.4) multiplies this mask by a rank-N A B^T,
//                    but for gamma > 0 that is exactly the causal low-rank class again
//                    (gamma^{i-j} = gamma^i gamma^{-j} folds into U and V), so it would only repeat
//                    causal_low_rank; the decay-only form measures what a fixed scalar decay explains.
//   ssd              P_ij = (C_i.B_j) prod_{m=j+1..i} a_m, a_m in [0, 1], C, B [L, N] (Mamba-2 SSD,
//                    C.3). With every a_m > 0 this is again the causal low-rank class (prod a_m folds
//                    into C_i and B_j), so what SSD adds is a parametrization that reaches strong decays
//                    and cuts (a_m ~ 0), which tril(U V^T) fits cannot. Fitted from the best of several
//                    members: the causal_low_rank fit (all a_m = 1) and constant decays a_m = gamma
//                    with C.B = c(gamma) (the retnet fit and gamma = 1 - 2^-k, decay lengths 2, 4, ..
//                    up to ~L, each after 3 ALS sweeps). Then up to `iterations` rounds of: ALS for C
//                    and B given the decays, and a projected gradient step with backtracking on the
//                    rates x_m = -log a_m (capped at 50). The error never increases, so
//                    ssd <= min(causal_low_rank, retnet).
//   ssd_d         ssd plus a scalar skip D on the diagonal, P + D I (Mamba-2's D, one per head as in
//                    paper 003's listing). Continues from the ssd fit with D = 0, each round adding the
//                    closed-form D, so ssd_d <= ssd.
//   semiseparable    Paper 003 Algorithm 1 (C.1), one sweep: for k = 1 .. L-1 in order, the block of
//                    the current matrix below and left of the diagonal entry (k, k), rows k.. and
//                    columns ..k-1 (0-based), is replaced by its rank-N truncated SVD; the diagonal is
//                    kept. Blocks with min(rows, columns) <= N are left as they are (already rank
//                    <= N). A heuristic, as the paper says: a matrix whose blocks all have rank <= N
//                    (semi-separable of order N, e.g. any tril(U V^T) of rank N or SSD matrix of state
//                    N) comes back unchanged (distance ~0), but later truncations can raise the rank
//                    of earlier blocks, so the result is not guaranteed to be semi-separable of order
//                    N, nor to be the nearest one. The low-rank and SSD fits are members of the class
//                    too, so the reported value is the smallest of the four (the sweep alone is close
//                    to or below causal_low_rank on local maps, and can be slightly above it on maps
//                    without locality).
//
//   window           P_ij = A_ij at lags i - j < W (the last W keys exact, as a hybrid head's softmax
//                    window keeps them), an SSD member (state N) at lags >= W: the ssd fit above on
//                    A's part beyond the window, every ALS row and the decay step over those pairs
//                    only. It costs a ring of W keys and values per head beside the state. W = 0: not
//                    measured (NaN); W >= L: 0.
// The iterative fits are local searches. Their values are distances to actual members, so upper
// bounds on the true distances: tight for members of each class with moderate decays (tested),
// looser for long strong decays, where more iterations keep improving them.
// `tolerance`: the iterative fits stop early once a round lowers the relative error by less than it.
// All work is float64 on the CPU; deterministic (the only random numbers come from a fixed seed).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>
#include <string>

#include "attnscope/attention/head.h"

namespace attnscope {

struct MixerFitOptions {
  int64_t state_size = 16;   // N: rank / state size of the low-rank, SSD and semi-separable classes
  int64_t iterations = 50;   // rounds of the iterative fits (causal_low_rank, ssd, ssd_d)
  double tolerance = 1e-8;   // early stop on the decrease of the relative error per round
  int64_t window = 0;        // W of the window class (0: not measured)
};

struct MixerDistances {
  int64_t state_size = 0;
  int64_t tokens = 0;  // L of the map fitted
  double toeplitz = 0, causal_low_rank = 0, retnet = 0, ssd = 0, ssd_d = 0, semiseparable = 0;
  int64_t window_size = 0;  // W of the window class (0: not measured)
  double window = std::numeric_limits<double>::quiet_NaN();
};

// A: [L, L], causal (the part above the diagonal is ignored). Throws Error when A is not square,
// its causal part is all zero, state_size < 1, iterations < 0 or tolerance < 0.
MixerDistances mixer_distances(const at::Tensor& A, const MixerFitOptions& options);

// The decayed-head student (SPEC 5, training's --decay) a head's mixer distances point at. A
// normalized linear head is causal low-rank (its rows scaled by 1/Z_i); a decayed one, fixed or
// gated, is SSD (C_i = phi(q_i)/Z_i, B_j = phi(k_j), a scalar decay per token). So: none unless SSD
// is closer than causal low-rank by more than `margin` (relative, 5% by default: about the spread of
// the fits); then fixed where RetNet's decay mask alone (position only, no content) is within the
// margin of SSD, else gated.
Decay best_decay_student(const MixerDistances& m, double margin = 0.05);
// The student a head's mixer distances point at (training's --decay mixer, the mixer panel): its
// decay (best_decay_student) and, where the window class was measured, whether it keeps the last W
// keys exact (a hybrid head): where the window takes at least `window_gain` off the distance of the
// decayed student's class (SSD for fixed and gated, causal low-rank for none), in the distances' own
// units (relative Frobenius error). Absolute, not relative: a window costs W keys and values per head,
// worth paying where the student misses a share of the map, not where it already fits within 1%.
struct Student {
  Decay decay = Decay::None;
  bool window = false;
};
constexpr double kWindowGain = 0.05;
Student best_student(const MixerDistances& m, double margin = 0.05, double window_gain = kWindowGain);
// "none", "fixed", "gated", or with a window "window + none" etc.
std::string student_name(const Student& s);
// The state size N at which training's --decay mixer fits each head's mixers (paper 003's smallest,
// Table 3) to pick its student: the metrics view's mixer panel at --mixer-state 16 names the same.
constexpr int64_t kStudentMixerState = 16;

// The decay-only head closest to an attention map by lag (SPEC 5's fixed decay; training's
// --decay-init fit): the a in (0, 1] that maximizes sum_i sum_{j <= i} A_ij log P_a(i, j),
// P_a(i, j) = a^(i-j) / sum_{j' <= i} a^(i-j') (a decayed head whose map is constant), i.e. the
// lag's truncated geometric law fitted to A by maximum likelihood. In theta = log a that law is an
// exponential family (the lag its statistic), so the likelihood is concave in theta and its optimum
// is where the model's mean lag, averaged over the rows, equals A's: found by bisection in float64.
// A's mean lag at or above the uniform's (i/2 in row i: attention to old keys, e.g. a sink at the
// first token) gives a = 1.
// attention_mean_lag: A [..., L, L] (causal; entries above the diagonal are ignored) -> each row's
// A-weighted mean lag sum_j A_ij (i - j) / sum_j A_ij, [..., L] float64 (a row with no weight gives 0).
// With `rows` (int64 [R], positions in [0, L)) A is [..., R, L], row r being query rows[r].
at::Tensor attention_mean_lag(const at::Tensor& A, const at::Tensor& rows = {});
// mean_lag [..., L] (row i of length-L windows, e.g. averaged over windows) -> log a [...] float64
// in [-30, 0] (-30: the last key only); with `rows` [R], mean_lag [..., R] holds only those rows
// (the estimating equation over them). Error for NaN, a negative lag or one above the row's i.
at::Tensor fit_decay_by_lag(const at::Tensor& mean_lag, const at::Tensor& rows = {});
// A decay's length in tokens, 1 / (1 - a) (the mean of its geometric law): +inf for log a = 0.
double decay_length(double log_a);
// The fit of the heads of q, k [T, ..., L, d] (T windows): each window's softmax attention (within
// the model's sliding window `window`, 0 = none), its mean lag per row averaged over the windows,
// fitted -> log a [...] float64. One window's [..., L, L] at a time.
at::Tensor fit_decay_to_softmax(const at::Tensor& q, const at::Tensor& k, int64_t window);

}  // namespace attnscope
