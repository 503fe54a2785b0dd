// The exp kernel's Gram matrix in the log domain, and its normalizer: shared by the DoF spectra
// (analysis/dof.h) and the ridge-leverage-score initialization of learned PRF maps (leverage_init.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnscope {

// The normalizer n of Sigma = G / n: tr G (default; attention is invariant to scaling the kernel,
// so DoF should be too), the largest eigenvalue (also scale-invariant), J (the empirical operator
// of the theory) or 1 (the Gram as printed in the paper).
enum class DofNormalize { Trace, Max, Samples, None };
DofNormalize parse_dof_normalize(const std::string& name);  // one of dof_normalize_names(); else Error
const char* dof_normalize_name(DofNormalize n);
std::vector<std::string> dof_normalize_names();  // trace, max, samples, none

// x: [J, d], any floating dtype. Returns the float64 Gram exp(x_i.x_j / sqrt d - c) with
// c = max_i |x_i|^2 / sqrt d, and c through `shift` when given. Shared by the DoF and the
// ridge-leverage initialization (leverage_init.h).
at::Tensor shifted_gram(const at::Tensor& x, double* shift = nullptr);

// Sigma = G / n for a Gram matrix G = exp(shift) * gram (gram from shifted_gram, or any symmetric
// PSD matrix with its own shift), written as Sigma = exp(log_scale) * gram / divisor so that neither
// exp(shift) nor n has to fit in a double:
//   trace {tr gram, 0}, max {gram's largest eigenvalue, 0}, samples {J, shift}, none {1, shift}.
// `trace` is tr gram, `top_eigenvalue` gram's largest eigenvalue (read for max only), J = gram's
// size. Shared by the DoF and leverage_init. Throws Error naming the normalizer when the divisor is
// not positive and finite.
struct GramScale {
  double divisor = 1;
  double log_scale = 0;
};
GramScale gram_scale(DofNormalize normalize, double trace, double top_eigenvalue, int64_t J, double shift);

// lambda over the kernel's scale, lambda exp(-log_scale): the ridge against which a spectrum's e_s are
// compared (mu / (mu + lambda) = e / (e + shifted_ridge)). exp(-log_scale) is never formed alone; the
// result is 0 when it underflows. lambda must be > 0.
double shifted_ridge(double lambda, double log_scale);

}  // namespace attnscope
