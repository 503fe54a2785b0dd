// Positive random features (Performer, paper 000 sec. 2): the exp-kernel as an expectation,
//   exp(q.k / sqrt d) = E_{w ~ N(0, I)}[phi(q; w) phi(k; w)],  phi(x; w) = exp(w.x' - |x'|^2 / 2),
// with x' = x / d^(1/4). Plain, orthogonal and hyperbolic draws of w, and the learned variant with
// per-feature importance weights a_m = exp(alpha_m) (phi_m scaled by sqrt(a_m / M)).
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

// prf, prf-orthogonal and learned-prf: exp(w_m.x' - |x'|^2/2 + alpha_m/2 - log(M)/2). alpha and the
// 1/sqrt(M) are kept inside the exponent: the same numbers as sqrt(exp(alpha) / M) outside, without
// overflow, and alpha's gradient is simply half the feature.
class PositiveRandomFeatures : public FeatureMap {
 public:
  PositiveRandomFeatures(std::string name, at::Tensor w, at::Tensor alpha, bool learnable)
      : name_(std::move(name)), w_(std::move(w)), alpha_(std::move(alpha)), learnable_(learnable) {}

  std::string name() const override { return name_; }
  int64_t input_dim() const override { return w_.size(1); }
  int64_t feature_dim() const override { return w_.size(0); }

  at::Tensor query_features(const at::Tensor& x) const override { return at::exp(logits(x)); }
  Features scaled_query_features(const at::Tensor& x) const override { return shift_by_row_max(logits(x)); }
  Features scaled_key_features(const at::Tensor& x) const override { return shift_by_row_max(logits(x)); }

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() override {
    if (!learnable_) return {};
    return {{"z", w_}, {"alpha", alpha_}};
  }

 private:
  at::Tensor logits(const at::Tensor& x) const {
    fmap::check_input(name_, input_dim(), x);
    const Scaled s = scale(x);
    at::Tensor out = at::matmul(s.x, fmap::like(w_, x).t()) - s.half_sq - 0.5 * std::log(double(feature_dim()));
    if (alpha_.defined()) out = out + 0.5 * fmap::like(alpha_, x);
    return out;
  }

  std::string name_;
  at::Tensor w_;      // [M, d]
  friend at::Tensor fmap::prf_draws(const FeatureMap& map);
  at::Tensor alpha_;  // [M] or undefined (plain PRF: all a_m = 1)
  bool learnable_;
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

std::unique_ptr<FeatureMap> make_learned_prf(at::Tensor z, at::Tensor alpha) {
  if (!z.defined() || z.dim() != 2 || z.size(0) < 1 || z.size(1) < 1)
    fail(fmap::where("learned-prf"), "z must be [M, d] with M, d >= 1");
  if (!alpha.defined() || alpha.dim() != 1 || alpha.size(0) != z.size(0))
    fail(fmap::where("learned-prf"), "alpha must be [M] with M = " + std::to_string(z.size(0)));
  if (!at::isFloatingType(z.scalar_type()) || !at::isFloatingType(alpha.scalar_type()))
    fail(fmap::where("learned-prf"), "z and alpha must be floating tensors");
  return std::make_unique<PositiveRandomFeatures>("learned-prf", std::move(z), std::move(alpha), true);
}

namespace fmap {

at::Tensor prf_draws(const FeatureMap& map) {
  if (map_family(map.name()).trainable) return at::Tensor();  // learned-prf: its z is a parameter, not a draw
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
    case MapId::PrfOrthogonal: return std::make_unique<PositiveRandomFeatures>(name, std::move(w), at::Tensor(), false);
    default: break;
  }
  fail(where(name), "is not a random-draw PRF map");
}

std::unique_ptr<FeatureMap> make_prf(const FeatureMapSpec& spec) {
  const std::string& n = spec.name;
  switch (map_family(n).id) {
    case MapId::Prf:
      resolve_init(spec, {"gaussian"});
      return std::make_unique<PositiveRandomFeatures>(n, gaussian(chosen_features(spec), spec.d, spec.seed),
                                                      at::Tensor(), false);
    case MapId::PrfOrthogonal:
      resolve_init(spec, {"orthogonal"});
      return std::make_unique<PositiveRandomFeatures>(
          n, orthogonal_gaussian(chosen_features(spec), spec.d, spec.seed), at::Tensor(), false);
    case MapId::PrfHyperbolic:
      resolve_init(spec, {"gaussian"});
      return std::make_unique<HyperbolicRandomFeatures>(gaussian(chosen_features(spec) / 2, spec.d, spec.seed));
    default: break;
  }
  // learned-prf
  const int64_t M = chosen_features(spec);
  const std::string init = resolve_init(spec, {"gaussian", "orthogonal", "leverage"});
  if (init == "leverage") {
    if (!spec.data.defined() || spec.data.dim() != 2 || spec.data.size(1) != spec.d)
      fail(where(n), "init 'leverage' needs the captured vectors as data [J, d] with d = " +
                         std::to_string(spec.d));
    LeverageInit li = leverage_init(spec.data, M, spec.seed, spec.leverage);
    return make_learned_prf(li.z, li.alpha);
  }
  at::Tensor z = init == "gaussian" ? gaussian(M, spec.d, spec.seed) : orthogonal_gaussian(M, spec.d, spec.seed);
  return make_learned_prf(z, at::zeros({M}, at::kFloat));
}

}  // namespace fmap
}  // namespace attnscope
