// Feature maps that are a learned per-head linear layer u = x W + b (W [d, d'], paper 004's
// convention) followed by a fixed activation:
//   hedgehog (paper 004, eq. 3 and App. A.1): W = identity, b = 0 at init, then one of
//            exp            [exp(u), exp(-u)], the negation map (eq. 6);
//            softmax        [softmax(u), softmax(-u)], a softmax over each half (eq. 5 applied to
//                           each sign, as LoLCATs does): bounded, hence more stable;
//            softmax-joint  softmax([u, -u]) over all 2d' outputs (flash-linear-attention's form).
//   t2r      (Kasai et al. 2021, the paper's T2R baseline): ReLU(u), M = d' features.
// Queries and keys share the layer (tied, as the paper trains Hedgehog) or have one each.
#include <ATen/ATen.h>

#include <cmath>
#include <optional>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "feature_map_families.h"

namespace attnscope {
namespace {

struct Linear {
  at::Tensor W;  // [d, d']
  at::Tensor b;  // [d']
  at::Tensor operator()(const at::Tensor& x) const {
    return at::matmul(x, fmap::like(W, x)) + fmap::like(b, x);
  }
};

// identity: W_im = 1 when m mod d == i (the identity for d' = d, tiled copies of it beyond);
// random: W ~ N(0, 1/d), so u has the scale of x. b = 0 either way.
Linear init_linear(int64_t d, int64_t out, const std::string& init, uint64_t seed, uint64_t stream) {
  Linear l;
  if (init == "identity") {
    l.W = at::zeros({d, out}, at::kFloat);
    auto w = l.W.accessor<float, 2>();
    for (int64_t m = 0; m < out; ++m) w[m % d][m] = 1.0f;
  } else {
    l.W = fmap::gaussian(d, out, seed, stream) / std::sqrt(double(d));
  }
  l.b = at::zeros({out}, at::kFloat);
  return l;
}

class LinearActivationMap : public FeatureMap {
 public:
  enum class Activation { NegationExp, NegationSoftmax, NegationSoftmaxJoint, Relu };

  LinearActivationMap(std::string name, int64_t d, Activation act, Linear q, std::optional<Linear> k)
      : name_(std::move(name)), d_(d), act_(act), q_(std::move(q)), k_(std::move(k)) {}

  std::string name() const override { return name_; }
  int64_t input_dim() const override { return d_; }
  int64_t feature_dim() const override {
    return act_ == Activation::Relu ? q_.W.size(1) : 2 * q_.W.size(1);
  }

  at::Tensor query_features(const at::Tensor& x) const override { return apply(q_, x); }
  at::Tensor key_features(const at::Tensor& x) const override { return apply(k_ ? *k_ : q_, x); }
  Features scaled_query_features(const at::Tensor& x) const override { return apply_scaled(q_, x); }
  Features scaled_key_features(const at::Tensor& x) const override { return apply_scaled(k_ ? *k_ : q_, x); }

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() override {
    if (!k_) return {{"W", q_.W}, {"b", q_.b}};
    return {{"q.W", q_.W}, {"q.b", q_.b}, {"k.W", k_->W}, {"k.b", k_->b}};
  }

 private:
  at::Tensor apply(const Linear& l, const at::Tensor& x) const {
    fmap::check_input(name_, d_, x);
    const at::Tensor u = l(x);
    switch (act_) {
      case Activation::NegationExp: return at::cat({at::exp(u), at::exp(-u)}, -1);
      case Activation::NegationSoftmax: return at::cat({at::softmax(u, -1), at::softmax(-u, -1)}, -1);
      case Activation::NegationSoftmaxJoint: return at::softmax(at::cat({u, -u}, -1), -1);
      case Activation::Relu: break;
    }
    return at::relu(u);
  }

  // exp's features overflow once |u| passes ~709 (float64): take max |u| out as the log scale. The
  // softmax and ReLU features are bounded by their input already.
  Features apply_scaled(const Linear& l, const at::Tensor& x) const {
    if (act_ != Activation::NegationExp) return Features(apply(l, x));
    fmap::check_input(name_, d_, x);
    const at::Tensor u = l(x);
    const at::Tensor max_abs = std::get<0>(u.abs().max(-1, /*keepdim=*/true));
    return {at::cat({at::exp(u - max_abs), at::exp(-u - max_abs)}, -1), max_abs};
  }

  std::string name_;
  int64_t d_;
  Activation act_;
  Linear q_;
  std::optional<Linear> k_;  // empty when tied
};

}  // namespace

namespace fmap {

std::unique_ptr<FeatureMap> make_mlp(const FeatureMapSpec& spec) {
  using Act = LinearActivationMap::Activation;
  int64_t out = 0;
  std::string init;
  Act act = Act::Relu;
  if (map_family(spec.name).id == MapId::Hedgehog) {
    out = chosen_features(spec) / 2;  // d' = M / 2: the negation map doubles it
    init = resolve_init(spec, {"identity", "random"});
    if (spec.activation == "exp") act = Act::NegationExp;
    else if (spec.activation == "softmax") act = Act::NegationSoftmax;
    else if (spec.activation == "softmax-joint") act = Act::NegationSoftmaxJoint;
    else fail(where(spec.name), "unknown activation '" + spec.activation + "' (valid: exp, softmax, softmax-joint)");
  } else {  // t2r
    out = chosen_features(spec);
    init = resolve_init(spec, {"random", "identity"});
  }
  Linear q = init_linear(spec.d, out, init, spec.seed, 0);
  std::optional<Linear> k;
  if (!spec.tied) k = init_linear(spec.d, out, init, spec.seed, 1);
  return std::make_unique<LinearActivationMap>(spec.name, spec.d, act, std::move(q), std::move(k));
}

}  // namespace fmap
}  // namespace attnscope
