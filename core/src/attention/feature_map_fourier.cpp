// Flexformer (paper 002, sec. 3): random Fourier features with learnable frequencies. The softmax
// kernel splits as exp(|x|^2/2sqrt d) exp(-|x-y|^2/2sqrt d) exp(|y|^2/2sqrt d) (eq. 4); the middle,
// Gaussian factor is written by Bochner (stationary) or Yaglom (nonstationary) as an expectation
// of cosines, and the norm factor's 2 sqrt(d) becomes a learnable exp(tau):
//
//   flex-stationary     phi(x) = exp(|x|^2 / e^tau) / sqrt(n) [cos(w_i.x), sin(w_i.x)]_i
//   flex-nonstationary  phi(x) = exp(|x|^2 / e^tau) / sqrt(n) [cos(w1'_i.x) cos(w2'_i.x),
//                                                             sin(w1'_i.x) cos(w2'_i.x)]_i
//                       w1' = (w1 + w2) / 2, w2' = (w1 - w2) / 2  (eq. 6)
//
// M = 2n features. Initialization: w ~ N(0, I / sqrt d) (the spectral density of the Gaussian factor,
// bandwidth sigma^2 = sqrt d) and tau = log(2 sqrt d), so phi(q).phi(k) is then an unbiased estimate
// of exp(q.k / sqrt d). Cosines make kernel estimates negative at times; linear_map() clamps.
//
// Normalization of the nonstationary map: eq. 6 prints the prefactor sigma / (2 sqrt n), but
// expanding (cos a + cos b)(cos c + cos d) + (sin a + sin b)(sin c + sin d) into the product form
// gives a factor 4 that the printed prefactor drops. We use sigma / sqrt(n) (sigma^2 = 1, the
// Gaussian factor's k(0)), which keeps the estimator unbiased and makes w1 = w2 reduce exactly to
// the stationary map. A global factor does not change attention maps either way.
#include <ATen/ATen.h>

#include <cmath>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "feature_map_families.h"

namespace attnscope {
namespace {

class FlexFourierMap : public FeatureMap {
 public:
  // w2 undefined: stationary.
  FlexFourierMap(std::string name, at::Tensor w1, at::Tensor w2, at::Tensor tau)
      : name_(std::move(name)), w1_(std::move(w1)), w2_(std::move(w2)), tau_(std::move(tau)) {}

  std::string name() const override { return name_; }
  int64_t input_dim() const override { return w1_.size(1); }
  int64_t feature_dim() const override { return 2 * w1_.size(0); }

  at::Tensor query_features(const at::Tensor& x) const override {
    const Features f = scaled_query_features(x);
    return f.values * at::exp(f.log_scale);
  }

  // The norm factor exp(|x|^2 / e^tau) / sqrt(n) is the scale (it overflows float64 at |x|^2 / e^tau
  // > 709, e.g. |x| = 100 at d = 16); the cosines and sines are the values.
  Features scaled_query_features(const at::Tensor& x) const override {
    fmap::check_input(name_, input_dim(), x);
    const double n = double(w1_.size(0));
    const at::Tensor w1 = fmap::like(w1_, x);
    const at::Tensor tau = fmap::like(tau_, x);
    const at::Tensor log_scale = (x * x).sum(-1, true) * at::exp(-tau) - 0.5 * std::log(n);
    if (!w2_.defined()) {
      const at::Tensor a = at::matmul(x, w1.t());
      return {at::cat({at::cos(a), at::sin(a)}, -1), log_scale};
    }
    const at::Tensor w2 = fmap::like(w2_, x);
    const at::Tensor a = at::matmul(x, (0.5 * (w1 + w2)).t());  // w1'.x
    const at::Tensor c = at::cos(at::matmul(x, (0.5 * (w1 - w2)).t()));  // cos(w2'.x)
    return {at::cat({at::cos(a) * c, at::sin(a) * c}, -1), log_scale};
  }
  Features scaled_key_features(const at::Tensor& x) const override { return scaled_query_features(x); }

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() override {
    if (!w2_.defined()) return {{"omega", w1_}, {"tau", tau_}};
    return {{"omega1", w1_}, {"omega2", w2_}, {"tau", tau_}};
  }

 private:
  std::string name_;
  at::Tensor w1_, w2_;  // [n, d]
  at::Tensor tau_;      // [1]
};

}  // namespace

namespace fmap {

std::unique_ptr<FeatureMap> make_fourier(const FeatureMapSpec& spec) {
  const int64_t n = chosen_features(spec) / 2;
  const double d = double(spec.d);
  const double freq_scale = 1.0 / std::pow(d, 0.25);  // N(0, I / sqrt d)
  at::Tensor tau = at::full({1}, std::log(2.0 * std::sqrt(d)), at::kFloat);
  at::Tensor w1 = gaussian(n, spec.d, spec.seed, 0) * freq_scale;
  if (map_family(spec.name).id == MapId::FlexStationary) {
    resolve_init(spec, {"gaussian"});
    return std::make_unique<FlexFourierMap>(spec.name, w1, at::Tensor(), tau);
  }
  const std::string init = resolve_init(spec, {"gaussian", "independent"});
  at::Tensor w2 = init == "gaussian" ? w1.clone() : gaussian(n, spec.d, spec.seed, 1) * freq_scale;
  return std::make_unique<FlexFourierMap>(spec.name, w1, w2, tau);
}

}  // namespace fmap
}  // namespace attnscope
