// Ridge-leverage-score initialization of PRF features (SPEC section 5; paper 000, sec. 3.1: the
// optimal sampling density q_lambda(z) ∝ <phi(.; z), (Sigma + lambda I)^{-1} phi(.; z)>_{L2(rho)}).
//
// With J captured vectors x_j standing in for rho, L2(rho) is R^J with <f, g> = f.g / J, and the
// operator of the kernel is the normalized Gram matrix Sigma = G / n (G_ij = K(x_i, x_j)), with the
// same normalizer n as the DoF code: trace (n = tr G, the default), max (largest eigenvalue),
// samples (n = J) or none (n = 1). Rescaling the kernel to make its operator G / n (K -> K J / n,
// phi -> phi sqrt(J / n)) gives the leverage of a candidate w_p, phi_p = [phi(x_j; w_p)]_j:
//
//     l_p = phi_p^T (G / n + lambda I)^{-1} phi_p / n,
//
// so lambda is measured in the units of the DoF slider, and E_{w ~ N(0, I)}[l(w)] =
// tr(Sigma (Sigma + lambda I)^{-1}) = DoF(lambda) exactly (with gram = "candidates" the mean of the
// l_p over the P candidates equals the DoF of their own Gram matrix Phi Phi^T / P).
//
// Sampling: draw P candidates w_p ~ N(0, I_d), q_p = l_p / sum l, draw M indices i.i.d. from q (with
// replacement) and weight each by 1 / (P q_p): the estimator
//     Khat(x, y) = (1/M) sum_m phi(x; w_{i_m}) phi(y; w_{i_m}) / (P q_{i_m})
// has E[Khat | candidates] = (1/P) sum_p phi_p(x) phi_p(y), so E[Khat] = K: unbiased. In the
// learned-prf parameterization a_m = exp(alpha_m) = 1 / (P q_{i_m}), i.e. alpha = -log(P q).
//
// Numerics: float64, in the log domain, because real heads have |x|^2 / sqrt(d) of several hundred
// (stories260K: ~730), where exp(|x|^2 / sqrt d) overflows and every feature is below e^-200. The
// Gram and its normalizer are the DoF code's (gram.h: shifted_gram, gram_scale, shifted_ridge): G =
// exp(shift) gram with gram <= 1 entry-wise, Sigma = exp(L) gram / D. Each candidate's features are
// shifted by their own largest log value m_p (the l_p are invariant under K -> sK with n -> sn, so
// the scale goes into the log score instead), Cholesky solves, and
//     log l_p = log |C^{-1} phi''_p|^2 + 2 m_p - shift - log D,  C C^T = gram / D + lambda exp(-L) I.
// q and alpha are computed from the log scores; `scores` and `mean_score` are their exponentials,
// which can underflow to 0 at such norms (a Gaussian candidate captures almost none of the kernel
// there) while the sampling stays exact.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "attnscope/attention/gram.h"

namespace attnscope {

struct LeverageOptions {
  double lambda = 1e-3;               // ridge, in the units of the normalized operator G / n
  int64_t candidates = 0;             // P; 0 = max(32 M, 2048)
  DofNormalize normalizer = DofNormalize::Trace;  // the DoF code's normalizer (dof.h)
  std::string gram = "exact";         // exact: G_ij = exp(x_i.x_j / sqrt d);
                                      // candidates: G = Phi Phi^T / P (the candidates' own kernel)
};

struct LeverageInit {
  at::Tensor z;          // [M, d] float32, the chosen candidates (learned-prf's z)
  at::Tensor alpha;      // [M] float32, -log(P q) (learned-prf's alpha)
  at::Tensor log_scores;  // [P] float64, log l_p of every candidate (-inf: zero leverage)
  at::Tensor scores;      // [P] float64, the ridge leverage l_p = exp(log_scores); may underflow to 0
  at::Tensor chosen;     // [M] int64, indices into the candidates
  at::Tensor candidates;  // [P, d] float32, every w_p
  double mean_score = 0;  // sum_p l_p / P: an estimate of DoF(lambda) under the same normalizer (may underflow)
};

// x: [J, d] captured queries/keys (J >= 1, finite). Seeded and deterministic. Throws Error for bad
// shapes, M <= 0, lambda <= 0, P < 1, an unknown gram, non-finite input, or a ridge lost against the
// kernel's scale (samples / none with a tiny lambda: Gram / n + lambda I not positive definite).
LeverageInit leverage_init(const at::Tensor& x, int64_t M, uint64_t seed,
                           const LeverageOptions& opt = {});

}  // namespace attnscope
