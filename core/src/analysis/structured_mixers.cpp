#include "attnscope/analysis/structured_mixers.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/attention/attention.h"
#include "attnscope/base/error.h"
#include "attnscope/base/tensor_checks.h"

namespace attnscope {
namespace {

constexpr char kMixersWhere[] = "mixer_distances";

// Decay rates x_m = -log a_m are capped here: a_m >= e^-50 ~ 2e-22 already cuts the matrix in two
// for any attention-sized entries, and the cap keeps S_i - S_j (below) far from overflow.
constexpr double kMaxRate = 50.0;

// Ridge added to each row's normal equations, relative to their mean eigenvalue: rows with fewer
// keys than N have singular Gram matrices, and this picks a small-norm solution there.
constexpr double kRidge = 1e-12;

// Toeplitz projection of the causal part: every diagonal i - j = k replaced by its mean. Also returns
// the diagonal sums s_k, which the RetNet fit needs.
at::Tensor toeplitz_projection(const at::Tensor& A, std::vector<double>& diag_sums) {
  const int64_t L = A.size(0);
  const at::Tensor idx = at::arange(L, at::kLong);
  const at::Tensor offset = key_lag(idx, idx).clamp_min(0).flatten();  // i - j, 0 above
  // Entries above the diagonal are 0 in A and add nothing to diagonal 0.
  const at::Tensor sums = at::zeros({L}, A.options()).index_add_(0, offset, A.flatten());
  const at::Tensor means = sums / (L - idx).to(at::kDouble);
  diag_sums.assign(sums.data_ptr<double>(), sums.data_ptr<double>() + L);
  return means.index_select(0, offset).view({L, L}).tril();
}

struct RetNetFit {
  double gamma = 0, c = 0;
};

// For G_ij = gamma^{i-j}: the best c = <A, G> / ||G||^2 and the square norm it explains, <A, G>^2 / ||G||^2.
std::pair<double, double> retnet_c(const std::vector<double>& diag_sums, double gamma) {
  const int64_t L = int64_t(diag_sums.size());
  double ag = 0, gg = 0, p = 1;  // p = gamma^k, with 0^0 = 1
  for (int64_t k = 0; k < L && p != 0; ++k, p *= gamma) {
    ag += diag_sums[k] * p;
    gg += double(L - k) * p * p;
  }
  return {ag / gg, ag * ag / gg};
}

// Best c gamma^{i-j}, gamma in [0, 1]. For a fixed gamma the best c is <A, G> / ||G||^2 and the
// error is ||A||^2 - <A, G>^2 / ||G||^2, so a cheap global search maximizes <A, G>^2 / ||G||^2 from
// the diagonal sums in O(L) per gamma: gamma = 1 - 2^-u on a grid over u in [0, 40] (gamma = 0 ..
// 1 - 1e-12). That difference cancels near an exact fit, which would leave gamma off by ~1e-8, so the
// refinement (golden-section search in u around the best grid point) minimizes the error summed entry
// by entry instead, and gamma = 0 and 1 are tried as they are.
RetNetFit fit_retnet(const at::Tensor& A, const std::vector<double>& diag_sums) {
  const int64_t L = A.size(0);
  const double* a = A.data_ptr<double>();
  auto error2 = [&](double gamma) {
    const double c = retnet_c(diag_sums, gamma).first;
    double e = 0, p = 1;
    for (int64_t k = 0; k < L; ++k, p *= gamma)
      for (int64_t i = k; i < L; ++i) {
        const double r = a[i * L + i - k] - c * p;
        e += r * r;
      }
    return e;
  };
  auto gamma_of = [](double u) { return 1.0 - std::exp2(-u); };

  constexpr double kStep = 0.05, kMaxU = 40.0;
  double best_u = 0, best = retnet_c(diag_sums, 0.0).second;
  for (double u = kStep; u <= kMaxU + 1e-9; u += kStep) {
    const double e = retnet_c(diag_sums, gamma_of(u)).second;
    if (e > best) best = e, best_u = u;
  }
  const double phi = 0.5 * (std::sqrt(5.0) - 1.0);
  double lo = std::max(0.0, best_u - kStep), hi = best_u + kStep;
  for (int it = 0; it < 80; ++it) {
    const double u1 = hi - phi * (hi - lo), u2 = lo + phi * (hi - lo);
    if (error2(gamma_of(u1)) < error2(gamma_of(u2))) hi = u2; else lo = u1;
  }
  RetNetFit fit;
  double fit_err = 1e300;
  for (double gamma : {gamma_of(0.5 * (lo + hi)), gamma_of(best_u), 0.0, 1.0}) {
    const double e = error2(gamma);
    if (e < fit_err) fit_err = e, fit.gamma = gamma;
  }
  fit.c = retnet_c(diag_sums, fit.gamma).first;
  return fit;
}

// c gamma^{i-j} on and below the diagonal (0^0 = 1).
at::Tensor retnet_matrix(const RetNetFit& fit, int64_t L) {
  const at::Tensor idx = at::arange(L, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor offset = key_lag(idx, idx).clamp_min(0);
  return (fit.c * at::pow(fit.gamma, offset)).tril();
}

// The members tril(G ⊙ C B^T) (+ D I) of the low-rank and SSD classes, G_ij = prod_{m=j+1..i} a_m
// with a_m = exp(-x_m) (x_0 is unused). All rates 0 (G = the causal mask) is the low-rank class.
// With band W > 0 the member covers lags >= W only (the window class: the last W keys exact).
struct Fit {
  at::Tensor C, B;  // [L, r]
  at::Tensor x;     // [L] rates
  double D = 0;     // skip, ssd_d only
  double err2 = 0;  // ||A - P||_F^2 on the causal part (at lags >= band)
  int64_t band = 0;
};

// G_ij = exp(-(S_i - S_j)), S = cumsum(x), at lags i - j >= band; 0 elsewhere. band 0: the causal
// part; band W: the keys beyond a window of the last W, which the window class keeps exact.
at::Tensor decay_matrix(const at::Tensor& x, int64_t band) {
  const at::Tensor S = x.cumsum(0);
  return at::exp(S.unsqueeze(0) - S.unsqueeze(1)).tril(-band);  // [i][j] = exp(S_j - S_i)
}

// ||Y - G ⊙ C B^T||_F^2; Y and G are causal, so the difference is too.
double residual2(const at::Tensor& Y, const at::Tensor& G, const at::Tensor& C, const at::Tensor& B) {
  return (Y - G * at::matmul(C, B.t())).pow(2).sum().item<double>();
}

// The rows of `out` [L, r] that solve, each on its own, (grams_i + ridge) out_i = rhs_i, where
// grams_i = sum over the keys (or queries) of row i of G_ij^2 w w^T, G the decay matrix at lags >=
// band, is built by the recurrence grams_i = a_i^2 grams_{i-1} + G_{i,i-band}^2 w_{i-band} w_{i-band}^T
// (forward, over the query rows) or grams_j = a_{j+1}^2 grams_{j+1} + G_{j+band,j}^2 w_{j+band}
// w_{j+band}^T (backward, over the key columns), in O(L r^2). band 0: G_ii = 1, the term is w_i w_i^T.
at::Tensor solve_rows(const at::Tensor& W, const at::Tensor& G, const at::Tensor& a2, const at::Tensor& rhs, bool forward,
                      int64_t band) {
  const int64_t L = W.size(0), r = W.size(1);
  at::Tensor grams = at::empty({L, r, r}, W.options());
  const at::Tensor Gc = G.contiguous();
  const double* w = W.data_ptr<double>();
  const double* a = a2.data_ptr<double>();
  const double* gm = Gc.data_ptr<double>();
  double* g = grams.data_ptr<double>();
  for (int64_t step = 0; step < L; ++step) {
    const int64_t i = forward ? step : L - 1 - step;
    const int64_t prev = forward ? i - 1 : i + 1;
    const double decay = step == 0 ? 0.0 : (forward ? a[i] : a[i + 1]);
    const int64_t other = forward ? i - band : i + band;  // the one new key (query) of this row
    const bool fresh = other >= 0 && other < L;
    const double e = fresh ? (forward ? gm[i * L + other] : gm[other * L + i]) : 0.0;
    double* gi = g + i * r * r;
    const double* gp = g + prev * r * r;
    const double* wi = w + (fresh ? other : i) * r;
    for (int64_t p = 0; p < r; ++p)
      for (int64_t q = 0; q < r; ++q)
        gi[p * r + q] = (step == 0 ? 0.0 : decay * gp[p * r + q]) + (fresh ? e * e * wi[p] * wi[q] : 0.0);
  }
  const at::Tensor trace = grams.diagonal(0, 1, 2).sum(-1);
  const at::Tensor ridge = at::where(trace > 0, kRidge * trace / double(r), at::ones_like(trace));
  grams.diagonal(0, 1, 2).add_(ridge.unsqueeze(-1));
  return at::linalg_solve(grams, rhs.unsqueeze(-1)).squeeze(-1);
}

// One sweep of alternating least squares for min ||Y - G ⊙ C B^T||: every row of C given B (query
// i sees keys j <= i), then every row of B given C (key j is seen by queries i >= j).
// With band W the pairs at lags < W are left out (G is 0 there).
void als_sweep(const at::Tensor& Y, const at::Tensor& G, const at::Tensor& a2, at::Tensor& C, at::Tensor& B, int64_t band) {
  const at::Tensor GY = G * Y;
  C = solve_rows(B, G, a2, at::matmul(GY, B), /*forward=*/true, band);
  B = solve_rows(C, G, a2, at::matmul(GY.t(), C), /*forward=*/false, band);
  // C B^T is unchanged by C_r * s, B_r / s; equal column norms keep the ridge even-handed.
  const at::Tensor s = at::sqrt(B.norm(2, 0) / C.norm(2, 0));
  const at::Tensor ok = at::isfinite(s) & (s > 0);
  const at::Tensor scale = at::where(ok, s, at::ones_like(s));
  C = (C * scale).contiguous();
  B = (B / scale).contiguous();
}

// a_m^2 = exp(-2 x_m), the factor the Gram recurrences carry from one row to the next.
at::Tensor decay_squares(const at::Tensor& x) { return at::exp(-2.0 * x).contiguous(); }

// Projected gradient step on the rates with C, B fixed, backtracking until the error drops.
// d err2 / d x_m = sum over j < m <= i of 2 R_ij P_ij G_ij (R the residual, P = C B^T), summed by a
// suffix sum over rows and a prefix sum over columns. `eta` carries the step size between calls.
void decay_step(const at::Tensor& Y, Fit& fit, double& eta) {
  const int64_t L = Y.size(0);
  if (L < 2) return;
  const at::Tensor P = at::matmul(fit.C, fit.B.t());
  const at::Tensor G = decay_matrix(fit.x, fit.band);
  const at::Tensor H = 2.0 * (Y - G * P) * P * G;
  const at::Tensor below = H.flip(0).cumsum(0).flip(0).cumsum(1);  // [m, j]: sum_{i >= m, j' <= j}
  const at::Tensor grad = at::cat({at::zeros({1}, Y.options()), below.diagonal(-1)});
  const double gmax = grad.abs().max().item<double>();
  if (!(gmax > 0) || !std::isfinite(gmax)) return;
  if (eta <= 0) eta = 0.1 / gmax;  // first step moves a rate by at most 0.1
  for (int tries = 0; tries < 12; ++tries, eta *= 0.25) {
    at::Tensor x = (fit.x - eta * grad).clamp(0.0, kMaxRate);
    x[0] = 0.0;
    const double e = (Y - decay_matrix(x, fit.band) * P).pow(2).sum().item<double>();
    if (e < fit.err2) {
      fit.x = x;
      fit.err2 = e;
      eta *= 2.0;
      return;
    }
  }
}

// Causal low-rank: truncated SVD of tril(A), then ALS sweeps with G = the causal mask. With band W,
// A is 0 at lags < W and G too.
Fit fit_low_rank(const at::Tensor& A, int64_t r, const MixerFitOptions& o, double norm2, int64_t band) {
  const int64_t L = A.size(0);
  const auto svd = at::linalg_svd(A, /*full_matrices=*/false);
  const at::Tensor root = at::sqrt(std::get<1>(svd).narrow(0, 0, r));
  Fit fit;
  fit.band = band;
  fit.C = (std::get<0>(svd).narrow(1, 0, r) * root).contiguous();
  fit.B = (std::get<2>(svd).narrow(0, 0, r).t() * root).contiguous();
  fit.x = at::zeros({L}, A.options());
  const at::Tensor G = at::ones({L, L}, A.options()).tril(-band);
  const at::Tensor a2 = at::ones({L}, A.options());
  fit.err2 = residual2(A, G, fit.C, fit.B);
  Fit best = fit;
  for (int64_t it = 0; it < o.iterations; ++it) {
    als_sweep(A, G, a2, fit.C, fit.B, band);
    const double before = fit.err2;
    fit.err2 = residual2(A, G, fit.C, fit.B);
    if (fit.err2 < best.err2) best = fit;
    if (std::sqrt(before / norm2) - std::sqrt(fit.err2 / norm2) <= o.tolerance) break;
  }
  return best;
}

// SSD rounds from `fit`: ALS for C and B, a step on the rates and, with `skip`, the closed-form D
// (the mean over the diagonal of A_ii - C_i.B_i, since G_ii = 1). Returns the best state seen.
Fit fit_ssd(const at::Tensor& A, Fit fit, bool skip, const MixerFitOptions& o, double norm2) {
  const int64_t L = A.size(0);
  const at::Tensor eye = at::eye(L, A.options());
  Fit best = fit;
  double eta = 0;
  for (int64_t it = 0; it < o.iterations; ++it) {
    const double before = fit.err2;
    const at::Tensor Y = skip ? A - fit.D * eye : A;
    const at::Tensor G = decay_matrix(fit.x, fit.band);
    als_sweep(Y, G, decay_squares(fit.x), fit.C, fit.B, fit.band);
    fit.err2 = residual2(Y, G, fit.C, fit.B);
    decay_step(Y, fit, eta);
    if (skip) {
      fit.D = (A.diagonal() - (fit.C * fit.B).sum(1)).mean().item<double>();
      fit.err2 = residual2(A - fit.D * eye, decay_matrix(fit.x, fit.band), fit.C, fit.B);
    }
    if (fit.err2 < best.err2) best = fit;
    if (std::sqrt(before / norm2) - std::sqrt(fit.err2 / norm2) <= o.tolerance) break;
  }
  return best;
}

// The RetNet fit c gamma^{i-j} as an SSD member: a_m = gamma, C.B = c. The other state components
// start at 0 in C and small fixed-seed noise in B, so C.B stays c exactly and the first ALS step can
// grow them.
Fit ssd_from_retnet(const at::Tensor& A, const RetNetFit& rn, int64_t r, int64_t band) {
  const int64_t L = A.size(0);
  Fit fit;
  fit.band = band;
  const double root = std::sqrt(std::abs(rn.c));
  fit.C = at::zeros({L, r}, A.options());
  fit.C.select(1, 0).fill_(rn.c < 0 ? -root : root);
  at::Generator gen = at::detail::createCPUGenerator(0);
  fit.B = at::randn({L, r}, gen, A.options()) * (1e-2 * root + 1e-30);
  fit.B.select(1, 0).fill_(root);
  const double rate = rn.gamma > 0 ? std::min(-std::log(rn.gamma), kMaxRate) : kMaxRate;
  fit.x = at::full({L}, rate, A.options());
  fit.x[0] = 0.0;
  fit.err2 = residual2(A, decay_matrix(fit.x, band), fit.C, fit.B);
  return fit;
}

// Where the SSD fit starts: the best of the low-rank fit (all a_m = 1) and constant decays a_m = gamma
// with C.B = c(gamma) -- the RetNet fit and gamma = 1 - 2^-k (decay lengths 2, 4, .. up to about L)
// -- each of the latter after kStartSweeps ALS sweeps, which grow the rest of the state.
constexpr int kStartSweeps = 3;

Fit ssd_start(const at::Tensor& A, int64_t r, const Fit& low_rank, const RetNetFit& retnet,
              const std::vector<double>& diag_sums) {
  const int64_t L = A.size(0);
  std::vector<RetNetFit> decays = {retnet};
  for (int64_t k = 1; (int64_t(1) << (k - 1)) < L; ++k) {
    const double gamma = 1.0 - std::exp2(-double(k));
    decays.push_back({gamma, retnet_c(diag_sums, gamma).first});
  }
  Fit best = low_rank;
  for (const RetNetFit& decay : decays) {
    Fit fit = ssd_from_retnet(A, decay, r, low_rank.band);
    const at::Tensor G = decay_matrix(fit.x, fit.band), a2 = decay_squares(fit.x);
    for (int s = 0; s < kStartSweeps; ++s) als_sweep(A, G, a2, fit.C, fit.B, fit.band);
    fit.err2 = residual2(A, G, fit.C, fit.B);
    if (fit.err2 < best.err2) best = fit;
  }
  return best;
}

// Paper 003 Algorithm 1, one sweep (see the header).
at::Tensor semiseparable_sweep(const at::Tensor& A, int64_t n) {
  const int64_t L = A.size(0);
  at::Tensor M = A.clone();
  for (int64_t k = 1; k < L; ++k) {
    if (std::min(L - k, k) <= n) continue;  // rank <= n already
    at::Tensor H = M.narrow(0, k, L - k).narrow(1, 0, k);
    const auto svd = at::linalg_svd(H, /*full_matrices=*/false);
    H.copy_(at::matmul(std::get<0>(svd).narrow(1, 0, n) * std::get<1>(svd).narrow(0, 0, n),
                       std::get<2>(svd).narrow(0, 0, n)));
  }
  return M;
}

}  // namespace

MixerDistances mixer_distances(const at::Tensor& A_in, const MixerFitOptions& o) {
  if (!A_in.defined() || A_in.dim() != 2 || A_in.size(0) != A_in.size(1) || A_in.size(0) < 1)
    fail(kMixersWhere, "A must be a square [L, L] matrix");
  if (!at::isFloatingType(A_in.scalar_type())) fail(kMixersWhere, "A must be a floating tensor");
  if (o.state_size < 1) fail(kMixersWhere, "state_size must be >= 1, got " + std::to_string(o.state_size));
  if (o.iterations < 0) fail(kMixersWhere, "iterations must be >= 0, got " + std::to_string(o.iterations));
  if (!(o.tolerance >= 0)) fail(kMixersWhere, "tolerance must be >= 0");
  if (o.window < 0) fail(kMixersWhere, "window must be >= 0, got " + std::to_string(o.window));
  const at::Tensor A = A_in.to(at::kCPU, at::kDouble).tril().contiguous();
  const double norm2 = A.pow(2).sum().item<double>();
  if (!(norm2 > 0) || !std::isfinite(norm2)) fail(kMixersWhere, "the causal part of A must be finite and not all zero");
  const int64_t L = A.size(0);
  const int64_t r = std::min(o.state_size, L);  // rank L already covers every causal matrix
  auto rel = [&](double err2) { return std::sqrt(std::max(err2, 0.0) / norm2); };

  MixerDistances out;
  out.state_size = o.state_size;
  out.tokens = A.size(0);

  std::vector<double> diag_sums;
  out.toeplitz = rel((A - toeplitz_projection(A, diag_sums)).pow(2).sum().item<double>());

  const RetNetFit retnet = fit_retnet(A, diag_sums);
  out.retnet = rel((A - retnet_matrix(retnet, L)).pow(2).sum().item<double>());

  const Fit low_rank = fit_low_rank(A, r, o, norm2, 0);
  out.causal_low_rank = rel(low_rank.err2);

  const Fit ssd = fit_ssd(A, ssd_start(A, r, low_rank, retnet, diag_sums), false, o, norm2);
  out.ssd = rel(ssd.err2);
  const Fit ssd_d = fit_ssd(A, ssd, true, o, norm2);
  out.ssd_d = rel(ssd_d.err2);

  // The fits above are semi-separable of order N too (every block strictly below the diagonal of
  // tril(G ⊙ C B^T) + D I has rank <= N), so the heuristic's result competes with them.
  const double sweep = rel((A - semiseparable_sweep(A, o.state_size)).pow(2).sum().item<double>());
  out.semiseparable = std::min({sweep, out.causal_low_rank, out.ssd, out.ssd_d});

  // The window class: the last W keys of every row exact, the SSD fit of the rest (lags >= W).
  out.window_size = o.window;
  if (o.window >= L) {
    out.window = 0;
  } else if (o.window > 0) {
    const at::Tensor Y = A.tril(-o.window).contiguous();
    std::vector<double> sums;
    toeplitz_projection(Y, sums);
    const Fit beyond = fit_low_rank(Y, r, o, norm2, o.window);
    out.window = rel(fit_ssd(Y, ssd_start(Y, r, beyond, fit_retnet(Y, sums), sums), false, o, norm2).err2);
  }
  return out;
}

at::Tensor attention_mean_lag(const at::Tensor& A, const at::Tensor& rows) {
  if (A.dim() < 2 || (!rows.defined() && A.size(-1) != A.size(-2)) || (rows.defined() && rows.numel() != A.size(-2)))
    fail_value("attention", "must be [..., L, L], or [..., R, L] with R row positions");
  const int64_t L = A.size(-1);
  const at::Tensor a = A.to(at::kDouble);
  const at::Tensor i = rows.defined() ? rows.to(at::kCPU, at::kDouble).to(a.device()) : at::arange(L, a.options());
  const at::Tensor lag = i.unsqueeze(1) - at::arange(L, a.options()).unsqueeze(0);  // [R, L]
  const at::Tensor w = a.masked_fill(lag < 0, 0.0);  // causal part only
  const at::Tensor mass = w.sum(-1);
  return ((w * lag.clamp_min(0)).sum(-1) / mass.clamp_min(1e-300)).masked_fill(mass <= 0, 0.0);
}

at::Tensor fit_decay_by_lag(const at::Tensor& mean_lag, const at::Tensor& rows) {
  if (mean_lag.dim() < 1 || mean_lag.size(-1) < 1) fail_value("mean lag", "must be [..., L] with L >= 1");
  const int64_t R = mean_lag.size(-1);
  if (rows.defined() && rows.numel() != R) fail_value("mean lag", "must have one value per row position");
  const at::Tensor mu = mean_lag.to(at::kDouble).cpu().reshape({-1, R});  // [N, R]
  const at::Tensor pos = rows.defined() ? rows.to(at::kCPU, at::kDouble).reshape({R}) : at::arange(R, mu.options());
  if (at::isnan(mu).any().item<bool>() || (mu < 0).any().item<bool>() || (mu > pos + 1e-9).any().item<bool>())
    fail_value("mean lag", "must lie in [0, i] in row i (and not be NaN)");
  const at::Tensor target = mu.mean(-1);  // [N]
  // The model's mean lag averaged over the rows, at theta [N]: row i's law is e^(theta l) over
  // l = 0..i (n = i + 1 values), whose mean is 1/expm1(-theta) - n/expm1(-n theta) in closed form;
  // where |n theta| < 1e-3 that difference cancels, and its series i/2 + theta i (i + 2) / 12 (the
  // uniform's mean and variance; the third cumulant is 0) is exact to ~1e-12.
  const at::Tensor n = (pos + 1).unsqueeze(0);  // [1, R]
  const auto model_lag = [&](const at::Tensor& theta) {
    const at::Tensor t = theta.unsqueeze(-1);  // [N, 1]
    const at::Tensor series = (n - 1) / 2 + t * (n - 1) * (n + 1) / 12;
    const at::Tensor closed = 1 / at::expm1(-t) - n / at::expm1(-n * t);
    return at::where((n * t).abs() < 1e-3, series, closed).mean(-1);  // [N]
  };
  constexpr double kLowest = -30.0;
  at::Tensor lo = at::full_like(target, kLowest), hi = at::zeros_like(target);
  for (int it = 0; it < 80; ++it) {  // the model's lag increases with theta: keep the root in [lo, hi]
    const at::Tensor mid = (lo + hi) / 2;
    const at::Tensor above = model_lag(mid) > target;
    hi = at::where(above, mid, hi);
    lo = at::where(above, lo, mid);
  }
  at::Tensor theta = (lo + hi) / 2;
  // The ends: no decay fits (A's lag at or above the uniform's; also L = 1, where every theta fits),
  // or even the strongest decay's lag is above A's.
  const at::Tensor none = model_lag(at::zeros_like(target)) <= target;
  theta = at::where(none, at::zeros_like(theta), theta);
  theta = at::where(none.logical_not() & (model_lag(at::full_like(target, kLowest)) >= target), at::full_like(theta, kLowest), theta);
  std::vector<int64_t> shape(mean_lag.sizes().begin(), mean_lag.sizes().end() - 1);
  return theta.reshape(shape);
}

double decay_length(double log_a) { return log_a == 0 ? std::numeric_limits<double>::infinity() : -1.0 / std::expm1(log_a); }

at::Tensor fit_decay_to_softmax(const at::Tensor& q, const at::Tensor& k, int64_t window) {
  at::NoGradGuard no_grad;
  const int64_t T = q.size(0), L = q.size(-2);
  // One [L, L] map at a time: a window's maps of every head at once would be H L^2 floats.
  const at::Tensor qs = q.reshape({T, -1, L, q.size(-1)}), ks = k.reshape({T, -1, L, k.size(-1)});
  const int64_t N = qs.size(1);
  at::Tensor lag_sum = at::zeros({N, L}, at::kDouble);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < N; ++h) lag_sum[h] += attention_mean_lag(softmax_map(qs[t][h], ks[t][h], window)).cpu();
  std::vector<int64_t> shape(q.sizes().begin() + 1, q.sizes().end() - 2);
  shape.push_back(L);
  return fit_decay_by_lag((lag_sum / double(T)).reshape(shape));
}

Decay best_decay_student(const MixerDistances& m, double margin) {
  const bool decays = std::isfinite(m.ssd) && (!std::isfinite(m.causal_low_rank) || m.ssd < m.causal_low_rank * (1 - margin));
  if (!decays) return Decay::None;
  return std::isfinite(m.retnet) && m.retnet <= m.ssd * (1 + margin) ? Decay::Fixed : Decay::Gated;
}

Student best_student(const MixerDistances& m, double margin, double window_gain) {
  Student s;
  s.decay = best_decay_student(m, margin);
  const double student = s.decay == Decay::None ? m.causal_low_rank : m.ssd;
  s.window = m.window_size > 0 && std::isfinite(m.window) && std::isfinite(student) && student - m.window >= window_gain;
  return s;
}

std::string student_name(const Student& s) { return (s.window ? "window + " : "") + std::string(decay_name(s.decay)); }

}  // namespace attnscope
