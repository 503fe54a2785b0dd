// Ridge-leverage-score sampling of PRF frequencies; the derivation is in leverage_init.h.
#include "attnscope/leverage_init.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "attnscope/error.h"
#include "feature_map_families.h"

namespace attnscope {
namespace {

constexpr const char* kWhere = "leverage_init";
// Candidates handled per block, so [J, P] never has to exist at once.
constexpr int64_t kBlock = 1024;

// Stream ids of the seeded draws (candidates and resampling must be independent).
constexpr uint64_t kCandidateStream = 11;
constexpr uint64_t kResampleStream = 12;

}  // namespace

LeverageInit leverage_init(const at::Tensor& x_in, int64_t M, uint64_t seed, const LeverageOptions& opt) {
  if (!x_in.defined() || x_in.dim() != 2 || x_in.size(0) < 1 || x_in.size(1) < 1)
    fail(kWhere, "the captured vectors must be [J, d] with J, d >= 1");
  if (!at::isFloatingType(x_in.scalar_type())) fail(kWhere, "the captured vectors must be a floating tensor");
  if (M <= 0) fail(kWhere, "features (M) must be positive, got " + std::to_string(M));
  if (!(opt.lambda > 0) || !std::isfinite(opt.lambda))
    fail(kWhere, "lambda must be positive and finite, got " + std::to_string(opt.lambda));
  if (opt.candidates < 0) fail(kWhere, "candidates (P) must be positive, got " + std::to_string(opt.candidates));
  if (opt.normalizer != "trace" && opt.normalizer != "max" && opt.normalizer != "samples" && opt.normalizer != "none")
    fail(kWhere, "unknown normalizer '" + opt.normalizer + "' (valid: trace, max, samples, none)");
  if (opt.gram != "exact" && opt.gram != "candidates")
    fail(kWhere, "unknown gram '" + opt.gram + "' (valid: exact, candidates)");

  const at::Tensor x = x_in.to(at::kDouble).contiguous();
  if (!at::isfinite(x).all().item<bool>()) fail(kWhere, "the captured vectors contain NaN or infinity");
  const int64_t J = x.size(0), d = x.size(1);
  const int64_t P = opt.candidates > 0 ? opt.candidates : std::max<int64_t>(32 * M, 2048);

  // x' = x / d^(1/4); phi(x; w) = exp(w.x' - |x'|^2/2); K(x, y) = exp(x'.y').
  const at::Tensor xs = x / std::pow(double(d), 0.25);
  const at::Tensor half_sq = 0.5 * (xs * xs).sum(1, /*keepdim=*/true);  // [J, 1]
  // Scale everything by exp(-2c), c = max_j |x'_j|^2 / 2: the scaled Gram is <= 1 entry-wise.
  const double c = half_sq.max().item<double>();

  const at::Tensor W = fmap::gaussian(P, d, seed, kCandidateStream);  // float32: z is exactly a candidate
  const at::Tensor Wd = W.to(at::kDouble);
  auto scaled_features = [&](int64_t start, int64_t len) {  // [J, len], phi e^{-c}
    return at::exp(at::matmul(xs, Wd.narrow(0, start, len).t()) - half_sq - c);
  };

  at::Tensor G;  // [J, J], the kernel's Gram matrix times exp(-2c)
  if (opt.gram == "exact") {
    G = at::exp(at::matmul(xs, xs.t()) - 2.0 * c);
  } else {
    G = at::zeros({J, J}, x.options());
    for (int64_t s = 0; s < P; s += kBlock) {
      const at::Tensor f = scaled_features(s, std::min(kBlock, P - s));
      G += at::matmul(f, f.t());
    }
    G /= double(P);
  }

  // The normalizer n on the same scale as G (n e^{-2c}), so G / n is the unscaled Sigma.
  double n = 0;
  if (opt.normalizer == "trace") n = G.trace().item<double>();
  else if (opt.normalizer == "max") n = at::linalg_eigvalsh(G).max().item<double>();
  else if (opt.normalizer == "samples") n = double(J) * std::exp(-2.0 * c);
  else n = std::exp(-2.0 * c);
  if (!(n > 0) || !std::isfinite(n))
    fail(kWhere, "the normalizer '" + opt.normalizer + "' is not positive at this data scale (max |x|^2 / sqrt(d) = " +
                     std::to_string(2.0 * c) + ")");

  // l_p = phi_p^T (G/n + lambda I)^{-1} phi_p / n = |L^{-1} phi_p|^2 / n with L L^T = G/n + lambda I.
  const at::Tensor A = G / n + opt.lambda * at::eye(J, x.options());
  const at::Tensor chol = at::linalg_cholesky(A);
  at::Tensor scores = at::empty({P}, x.options());
  for (int64_t s = 0; s < P; s += kBlock) {
    const int64_t len = std::min(kBlock, P - s);
    const at::Tensor y = at::linalg_solve_triangular(chol, scaled_features(s, len), /*upper=*/false);
    scores.narrow(0, s, len).copy_((y * y).sum(0) / n);
  }
  const double total = scores.sum().item<double>();
  if (!(total > 0) || !std::isfinite(total)) fail(kWhere, "every candidate has zero leverage; the data are degenerate");

  // Resample M candidates i.i.d. with q_p = l_p / sum l; weight 1 / (P q_p) keeps Khat unbiased.
  at::Generator gen = fmap::generator(seed, kResampleStream);
  const at::Tensor q = scores / total;
  LeverageInit out;
  out.chosen = at::multinomial(q, M, /*replacement=*/true, gen);
  out.z = W.index_select(0, out.chosen).contiguous();
  out.alpha = (-at::log(double(P) * q.index_select(0, out.chosen))).to(at::kFloat);
  out.scores = scores;
  out.candidates = W;
  out.mean_score = total / double(P);
  return out;
}

}  // namespace attnscope
