// Ridge-leverage-score sampling of PRF frequencies; the derivation is in leverage_init.h.
#include "attnscope/attention/leverage_init.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnscope/attention/gram.h"
#include "attnscope/base/error.h"
#include "feature_map_families.h"

namespace attnscope {
namespace {

constexpr const char* kLeverageWhere = "leverage_init";
// Candidates handled per block, so [J, P] never has to exist at once.
constexpr int64_t kBlock = 1024;

// Stream ids of the seeded draws (candidates and resampling must be independent).
constexpr uint64_t kCandidateStream = 11;
constexpr uint64_t kResampleStream = 12;

}  // namespace

LeverageInit leverage_init(const at::Tensor& x_in, int64_t M, uint64_t seed, const LeverageOptions& opt) {
  if (!x_in.defined() || x_in.dim() != 2 || x_in.size(0) < 1 || x_in.size(1) < 1)
    fail(kLeverageWhere, "the captured vectors must be [J, d] with J, d >= 1");
  if (!at::isFloatingType(x_in.scalar_type())) fail(kLeverageWhere, "the captured vectors must be a floating tensor");
  if (M <= 0) fail(kLeverageWhere, "features (M) must be positive, got " + std::to_string(M));
  if (!(opt.lambda > 0) || !std::isfinite(opt.lambda))
    fail(kLeverageWhere, "lambda must be positive and finite, got " + std::to_string(opt.lambda));
  if (opt.candidates < 0) fail(kLeverageWhere, "candidates (P) must be positive, got " + std::to_string(opt.candidates));
  if (opt.gram != "exact" && opt.gram != "candidates")
    fail(kLeverageWhere, "unknown gram '" + opt.gram + "' (valid: exact, candidates)");

  const at::Tensor x = x_in.to(at::kDouble).contiguous();
  if (!at::isfinite(x).all().item<bool>()) fail(kLeverageWhere, "the captured vectors contain NaN or infinity");
  const int64_t J = x.size(0), d = x.size(1);
  const int64_t P = opt.candidates > 0 ? opt.candidates : std::max<int64_t>(32 * M, 2048);

  // x' = x / d^(1/4); log phi(x; w) = w.x' - |x'|^2 / 2; K(x, y) = exp(x'.y') = E_w[phi(x) phi(y)].
  const at::Tensor xs = x / std::pow(double(d), 0.25);
  const at::Tensor half_sq = 0.5 * (xs * xs).sum(1, /*keepdim=*/true);  // [J, 1]
  const at::Tensor W = fmap::gaussian(P, d, seed, kCandidateStream);  // float32: z is exactly a candidate
  const at::Tensor Wd = W.to(at::kDouble);
  auto log_features = [&](int64_t start, int64_t len) {  // [J, len]
    return at::matmul(xs, Wd.narrow(0, start, len).t()) - half_sq;
  };

  // The Gram matrix as G = exp(shift) gram with gram's entries <= 1 (log domain: real models have
  // |x|^2 / sqrt d ~ 700, and exp of that is out of double range).
  at::Tensor gram;
  double shift = 0;
  if (opt.gram == "exact") {
    gram = shifted_gram(x, &shift);  // x'.y' = x.y / sqrt d: the DoF code's Gram
  } else {
    // Phi Phi^T / P with every feature shifted by the largest log-feature m: shift = 2m.
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < P; s += kBlock) m = std::max(m, log_features(s, std::min(kBlock, P - s)).max().item<double>());
    gram = at::zeros({J, J}, x.options());
    for (int64_t s = 0; s < P; s += kBlock) {
      const at::Tensor f = at::exp(log_features(s, std::min(kBlock, P - s)) - m);
      gram += at::matmul(f, f.t());
    }
    gram /= double(P);
    shift = 2.0 * m;
  }

  // Sigma = G / n = exp(L) gram / D, the DoF code's normalizer (gram_scale); the ridge in gram's
  // units is t = lambda exp(-L) (shifted_ridge). With phi_p = exp(m_p) phi''_p (m_p = max_j log
  // phi(x_j; w_p), so phi'' <= 1 and at least one entry is 1) and n = D exp(shift - L):
  //   l_p = phi_p^T (Sigma + lambda I)^{-1} phi_p / n = exp(2 m_p - shift) |C^{-1} phi''_p|^2 / D
  // with C C^T = gram / D + t I. The log of that is finite for every candidate: no feature or
  // score has to be representable as such.
  const double top = opt.normalizer == DofNormalize::Max ? at::linalg_eigvalsh(gram).max().item<double>() : 0.0;
  const GramScale gs = gram_scale(opt.normalizer, gram.trace().item<double>(), top, J, shift);
  const double t = shifted_ridge(opt.lambda, gs.log_scale);
  const auto [chol, info] = at::linalg_cholesky_ex(gram / gs.divisor + t * at::eye(J, x.options()));
  if (info.item<int64_t>() != 0)
    fail(kLeverageWhere, "Gram / n + lambda I is not positive definite in double precision: lambda = " + std::to_string(opt.lambda) +
                     " is lost against the kernel's scale exp(" + std::to_string(gs.log_scale) + ") under normalizer '" +
                     dof_normalize_name(opt.normalizer) + "'; use a larger lambda or the trace normalizer");
  at::Tensor log_scores = at::empty({P}, x.options());
  for (int64_t s = 0; s < P; s += kBlock) {
    const int64_t len = std::min(kBlock, P - s);
    const at::Tensor lf = log_features(s, len);
    const at::Tensor mp = std::get<0>(lf.max(0));  // [len]
    const at::Tensor y = at::linalg_solve_triangular(chol, at::exp(lf - mp), /*upper=*/false);
    log_scores.narrow(0, s, len).copy_(at::log((y * y).sum(0)) + 2.0 * mp - shift - std::log(gs.divisor));
  }
  const double log_total = at::logsumexp(log_scores, 0).item<double>();
  if (!std::isfinite(log_total)) fail(kLeverageWhere, "every candidate has zero leverage; the data are degenerate");

  // Resample M candidates i.i.d. with q_p = l_p / sum l; weight 1 / (P q_p) keeps Khat unbiased.
  at::Generator gen = fmap::generator(seed, kResampleStream);
  const at::Tensor log_q = log_scores - log_total;
  LeverageInit out;
  out.chosen = at::multinomial(at::exp(log_q), M, /*replacement=*/true, gen);
  out.z = W.index_select(0, out.chosen).contiguous();
  out.alpha = (-(std::log(double(P)) + log_q.index_select(0, out.chosen))).to(at::kFloat);
  out.log_scores = log_scores;
  out.scores = at::exp(log_scores);
  out.candidates = W;
  out.mean_score = std::exp(log_total - std::log(double(P)));
  return out;
}

}  // namespace attnscope
