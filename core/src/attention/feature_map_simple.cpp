// Fixed, parameter-free feature maps (the baselines of paper 004):
//   elu       1 + ELU(x)                         (Katharopoulos et al. 2020)
//   relu      ReLU(x)                            (Kasai et al. 2021, without the learned layer)
//   exp       exp(t x), element-wise             (paper 004 sec. 3.2, the "spiky" control)
//   taylor2   [1, x/d^(1/4), vec(x x^T) / (sqrt 2 sqrt d)]: phi(q).phi(k) = 1 + s + s^2/2 exactly,
//             s = q.k / sqrt d, the 2nd-order Taylor expansion of exp(s) (paper 004 sec. 4.1, with
//             the 1/sqrt(d) of the attention kernel folded in)
//   cosformer ReLU features re-weighted by position (Qin et al. 2022): the weight cos(pi (i-j) / 2H)
//             = cos(pi i/2H) cos(pi j/2H) + sin(pi i/2H) sin(pi j/2H) splits into
//             phi(x_i) = [ReLU(x_i) cos(pi i / 2H), ReLU(x_i) sin(pi i / 2H)].
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "feature_map_families.h"

namespace attnscope {
namespace {

constexpr double kPi = 3.14159265358979323846;

class ElementwiseMap : public FeatureMap {
 public:
  enum class Kind { Elu, Relu, Exp };
  ElementwiseMap(std::string name, int64_t d, Kind kind, double t)
      : name_(std::move(name)), d_(d), kind_(kind), t_(t) {}

  std::string name() const override { return name_; }
  int64_t input_dim() const override { return d_; }
  int64_t feature_dim() const override { return d_; }

  at::Tensor query_features(const at::Tensor& x) const override {
    fmap::check_input(name_, d_, x);
    switch (kind_) {
      case Kind::Elu: return at::elu(x) + 1.0;
      case Kind::Relu: return at::relu(x);
      case Kind::Exp: break;
    }
    return at::exp(t_ * x);
  }

  // exp(t x) overflows once t x passes ~709 (float64): take the largest t x_i out as the log scale.
  Features scaled_query_features(const at::Tensor& x) const override {
    if (kind_ != Kind::Exp) return Features(query_features(x));
    fmap::check_input(name_, d_, x);
    const at::Tensor tx = t_ * x;
    const at::Tensor row_max = std::get<0>(tx.max(-1, /*keepdim=*/true));
    return {at::exp(tx - row_max), row_max};
  }
  Features scaled_key_features(const at::Tensor& x) const override { return scaled_query_features(x); }

 private:
  std::string name_;
  int64_t d_;
  Kind kind_;
  double t_;
};

class Taylor2Map : public FeatureMap {
 public:
  explicit Taylor2Map(int64_t d) : d_(d) {}
  std::string name() const override { return "taylor2"; }
  int64_t input_dim() const override { return d_; }
  int64_t feature_dim() const override { return 1 + d_ + d_ * d_; }

  at::Tensor query_features(const at::Tensor& x) const override {
    fmap::check_input(name(), d_, x);
    const double d = double(d_);
    std::vector<int64_t> outer_shape(x.sizes().begin(), x.sizes().end() - 1);
    outer_shape.push_back(d_ * d_);
    const at::Tensor outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).reshape(outer_shape);
    // (q.k)^2 / (2d) = vec(q q^T).vec(k k^T) / (sqrt(2) sqrt(d))^2
    return at::cat({at::ones_like(x.narrow(-1, 0, 1)), x / std::pow(d, 0.25), outer / (std::sqrt(2.0) * std::sqrt(d))},
                   -1);
  }

 private:
  int64_t d_;
};

class CosformerMap : public FeatureMap {
 public:
  CosformerMap(int64_t d, int64_t horizon) : d_(d), horizon_(horizon) {}
  std::string name() const override { return "cosformer"; }
  int64_t input_dim() const override { return d_; }
  int64_t feature_dim() const override { return 2 * d_; }

  // Positions are the indices along dim -2 (one token at 0 for a 1-D input).
  at::Tensor query_features(const at::Tensor& x) const override {
    fmap::check_input(name(), d_, x);
    const int64_t L = x.dim() >= 2 ? x.size(-2) : 1;
    const double H = horizon_ > 0 ? double(horizon_) : double(std::max<int64_t>(L, 1));
    return cosformer_features(x, at::arange(L, x.options()), H);
  }

 private:
  int64_t d_;
  int64_t horizon_;
};

}  // namespace

at::Tensor cosformer_features(const at::Tensor& x, const at::Tensor& positions, double horizon) {
  if (!x.defined() || x.dim() < 1 || !at::isFloatingType(x.scalar_type()))
    fail(fmap::where("cosformer"), "input must be a floating tensor [..., L, d]");
  const int64_t L = x.dim() >= 2 ? x.size(-2) : 1;
  if (!positions.defined() || positions.dim() != 1 || positions.size(0) != L)
    fail(fmap::where("cosformer"), "positions must be [L] with L = " + std::to_string(L));
  if (!(horizon > 0) || !std::isfinite(horizon))
    fail(fmap::where("cosformer"), "horizon must be positive, got " + std::to_string(horizon));
  // angle [L, 1] broadcasts over [..., L, d]; a 1-D x is a single token.
  at::Tensor angle = positions.to(x.scalar_type()) * (kPi / (2.0 * horizon));
  if (x.dim() >= 2) angle = angle.unsqueeze(-1);
  const at::Tensor r = at::relu(x);
  return at::cat({r * at::cos(angle), r * at::sin(angle)}, -1);
}

namespace fmap {

std::unique_ptr<FeatureMap> make_simple(const FeatureMapSpec& spec) {
  const std::string& n = spec.name;
  resolve_init(spec, {"none"});
  switch (map_family(n).id) {
    case MapId::Elu:
      fixed_features(spec, spec.d);
      return std::make_unique<ElementwiseMap>(n, spec.d, ElementwiseMap::Kind::Elu, 1.0);
    case MapId::Relu:
      fixed_features(spec, spec.d);
      return std::make_unique<ElementwiseMap>(n, spec.d, ElementwiseMap::Kind::Relu, 1.0);
    case MapId::Exp:
      fixed_features(spec, spec.d);
      if (!std::isfinite(spec.temperature) || spec.temperature == 0)
        fail(where(n), "temperature must be finite and non-zero, got " + std::to_string(spec.temperature));
      return std::make_unique<ElementwiseMap>(n, spec.d, ElementwiseMap::Kind::Exp, spec.temperature);
    case MapId::Taylor2:
      fixed_features(spec, 1 + spec.d + spec.d * spec.d);
      return std::make_unique<Taylor2Map>(spec.d);
    default: break;
  }
  // cosformer
  fixed_features(spec, 2 * spec.d);
  if (spec.horizon < 0) fail(where(n), "horizon must be >= 0 (0 = the sequence length), got " + std::to_string(spec.horizon));
  return std::make_unique<CosformerMap>(spec.d, spec.horizon);
}

}  // namespace fmap
}  // namespace attnscope
