// Positive random features (Performer, paper 000 sec. 2): the exp-kernel as an expectation,
//   exp(q.k / sqrt d) = E_{w ~ N(0, I)}[phi(q; w) phi(k; w)],  phi(x; w) = exp(w.x' - |x'|^2 / 2),
// with x' = x / d^(1/4). Plain, orthogonal and hyperbolic draws of w. The learned variant with
// per-feature importance weights a_m = exp(alpha_m) (learned-prf) is a trainable map
// (stacked_maps.h).
#include <ATen/ATen.h>

#include <cmath>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "feature_map_families.h"

namespace attnscope {
namespace {

// x' = x / d^(1/4) and |x'|^2 / 2, the two pieces every PRF needs.
struct Scaled {
  at::Tensor x;         // [..., d]
  at::Tensor half_sq;   // [..., 1]
};

Scaled scale(const at::Tensor& x) {
  Scaled s;
  s.x = x / std::pow(double(x.size(-1)), 0.25);
  s.half_sq = 0.5 * (s.x * s.x).sum(-1, /*keepdim=*/true);
  return s;
}

// phi = exp(logits) as exp(rowmax) * exp(logits - rowmax): values in (0, 1], the largest exactly 1.
Features shift_by_row_max(const at::Tensor& logits) {
  const at::Tensor row_max = std::get<0>(logits.max(-1, /*keepdim=*/true));
  return {at::exp(logits - row_max), row_max};
}

// prf and prf-orthogonal: exp(w_m.x' - |x'|^2/2 - log(M)/2), the 1/sqrt(M) kept inside the exponent.
class PositiveRandomFeatures : public FeatureMap {
 public:
  PositiveRandomFeatures(std::string name, at::Tensor w) : name_(std::move(name)), w_(std::move(w)) {}

  std::string name() const override { return name_; }
  int64_t input_dim() const override { return w_.size(1); }
  int64_t feature_dim() const override { return w_.size(0); }

  at::Tensor query_features(const at::Tensor& x) const override { return at::exp(logits(x)); }
  Features scaled_query_features(const at::Tensor& x) const override { return shift_by_row_max(logits(x)); }
  Features scaled_key_features(const at::Tensor& x) const override { return shift_by_row_max(logits(x)); }

 private:
  at::Tensor logits(const at::Tensor& x) const {
    fmap::check_input(name_, input_dim(), x);
    const Scaled s = scale(x);
    return at::matmul(s.x, fmap::like(w_, x).t()) - s.half_sq - 0.5 * std::log(double(feature_dim()));
  }

  std::string name_;
  at::Tensor w_;  // [M, d]
  friend at::Tensor fmap::prf_draws(const FeatureMap& map);
};

// prf-hyperbolic: w and -w share one draw, [exp(w.x' - |x'|^2/2), exp(-w.x' - |x'|^2/2)] / sqrt(M).
// The pair is an antithetic draw: each half alone is unbiased, so their average is too.
class HyperbolicRandomFeatures : public FeatureMap {
 public:
  explicit HyperbolicRandomFeatures(at::Tensor w) : w_(std::move(w)) {}

  std::string name() const override { return "prf-hyperbolic"; }
  int64_t input_dim() const override { return w_.size(1); }
  int64_t feature_dim() const override { return 2 * w_.size(0); }

  at::Tensor query_features(const at::Tensor& x) const override { return at::exp(logits(x)); }
  Features scaled_query_features(const at::Tensor& x) const override { return shift_by_row_max(logits(x)); }
  Features scaled_key_features(const at::Tensor& x) const override { return shift_by_row_max(logits(x)); }

 private:
  at::Tensor logits(const at::Tensor& x) const {
    fmap::check_input(name(), input_dim(), x);
    const Scaled s = scale(x);
    const at::Tensor proj = at::matmul(s.x, fmap::like(w_, x).t());
    return at::cat({proj, -proj}, -1) - s.half_sq - 0.5 * std::log(double(feature_dim()));
  }

  at::Tensor w_;  // [M/2, d]
  friend at::Tensor fmap::prf_draws(const FeatureMap& map);
};

}  // namespace

namespace fmap {

at::Tensor prf_draws(const FeatureMap& map) {
  if (auto* p = dynamic_cast<const PositiveRandomFeatures*>(&map)) return p->w_;
  if (auto* h = dynamic_cast<const HyperbolicRandomFeatures*>(&map)) return h->w_;
  return at::Tensor();
}

std::unique_ptr<FeatureMap> make_prf_from_draws(const std::string& name, at::Tensor w) {
  if (!w.defined() || w.dim() != 2 || w.size(0) < 1 || w.size(1) < 1 || !at::isFloatingType(w.scalar_type()))
    fail(where(name), "w must be a floating [rows, d] tensor with rows, d >= 1");
  switch (map_family(name).id) {
    case MapId::PrfHyperbolic: return std::make_unique<HyperbolicRandomFeatures>(std::move(w));
    case MapId::Prf:
    case MapId::PrfOrthogonal: return std::make_unique<PositiveRandomFeatures>(name, std::move(w));
    default: break;
  }
  fail(where(name), "is not a random-draw PRF map");
}

std::unique_ptr<FeatureMap> make_prf(const FeatureMapSpec& spec) {
  const std::string& n = spec.name;
  switch (map_family(n).id) {
    case MapId::Prf:
      resolve_init(spec, {"gaussian"});
      return std::make_unique<PositiveRandomFeatures>(n, gaussian(chosen_features(spec), spec.d, spec.seed));
    case MapId::PrfOrthogonal:
      resolve_init(spec, {"orthogonal"});
      return std::make_unique<PositiveRandomFeatures>(n, orthogonal_gaussian(chosen_features(spec), spec.d, spec.seed));
    case MapId::PrfHyperbolic:
      resolve_init(spec, {"gaussian"});
      return std::make_unique<HyperbolicRandomFeatures>(gaussian(chosen_features(spec) / 2, spec.d, spec.seed));
    default: break;
  }
  fail(where(n), "is not a random-draw PRF map");
}

}  // namespace fmap
}  // namespace attnscope
