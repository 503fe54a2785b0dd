// The exp kernel's Gram matrix and its normalizer (gram.h).
#include "attnscope/attention/gram.h"

#include <ATen/ATen.h>

#include <cmath>

#include "attnscope/base/error.h"
#include "attnscope/base/names.h"

namespace attnscope {
namespace {

constexpr const char* kGramWhere = "dof";

void check_gram_lambda(double lambda) {
  if (!(lambda > 0) || !std::isfinite(lambda))
    fail(kGramWhere, "lambda must be positive and finite, got " + std::to_string(lambda));
}

}  // namespace

constexpr Named<DofNormalize> kNormalizers[] = {{DofNormalize::Trace, "trace"},
                                                {DofNormalize::Max, "max"},
                                                {DofNormalize::Samples, "samples"},
                                                {DofNormalize::None, "none"}};

std::vector<std::string> dof_normalize_names() { return names_of(kNormalizers); }
DofNormalize parse_dof_normalize(const std::string& name) { return parse_name(kNormalizers, name, "normalization"); }
const char* dof_normalize_name(DofNormalize n) { return name_of(kNormalizers, n); }

GramScale gram_scale(DofNormalize normalize, double trace, double top_eigenvalue, int64_t J, double shift) {
  if (!std::isfinite(shift)) fail(kGramWhere, "the Gram's log scale is not finite");
  GramScale g;
  switch (normalize) {
    case DofNormalize::Trace: g = {trace, 0.0}; break;  // exp(shift) cancels
    case DofNormalize::Max: g = {top_eigenvalue, 0.0}; break;
    case DofNormalize::Samples: g = {double(J), shift}; break;
    case DofNormalize::None: g = {1.0, shift}; break;
  }
  if (!(g.divisor > 0) || !std::isfinite(g.divisor))
    fail(kGramWhere, std::string("normalizer '") + dof_normalize_name(normalize) + "' of the Gram matrix is " +
                     std::to_string(g.divisor) + " (the Gram needs a positive trace and largest eigenvalue)");
  return g;
}

at::Tensor shifted_gram(const at::Tensor& x_in, double* shift) {
  if (!x_in.defined() || x_in.dim() != 2 || x_in.size(0) < 1 || x_in.size(1) < 1)
    fail(kGramWhere, "the sampled vectors must be [J, d] with J, d >= 1");
  if (!at::isFloatingType(x_in.scalar_type())) fail(kGramWhere, "the sampled vectors must be a floating tensor");
  const at::Tensor x = x_in.to(at::kDouble).contiguous();
  if (!at::isfinite(x).all().item<bool>()) fail(kGramWhere, "the sampled vectors contain NaN or infinity");
  const double inv_sqrt_d = 1.0 / std::sqrt(double(x.size(1)));
  // c = max_i |x_i|^2 / sqrt d bounds every exponent (x_i.x_j <= |x_i| |x_j|), so entries are <= 1.
  const double c = (x * x).sum(1).max().item<double>() * inv_sqrt_d;
  at::Tensor g = at::matmul(x, x.t());
  g.mul_(inv_sqrt_d).sub_(c).exp_();
  if (shift) *shift = c;
  return g;
}

double shifted_ridge(double lambda, double log_scale) {
  check_gram_lambda(lambda);
  if (!std::isfinite(log_scale)) fail(kGramWhere, "the spectrum's log scale is not finite");
  // log_scale = 0 (trace, max) keeps lambda bit for bit.
  return log_scale == 0 ? lambda : std::exp(std::log(lambda) - log_scale);
}

}  // namespace attnscope
