// One trainable family's maps stacked over heads (stacked_maps.h).
#include "attnscope/attention/stacked_maps.h"

#include <ATen/ATen.h>

#include <cmath>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"

namespace attnscope {

const at::Tensor& StackedMaps::param(const std::string& name) const {
  for (const auto& [n, t] : params)
    if (n == name) return t;
  fail("distill", "layer maps have no parameter '" + name + "'");
}

bool StackedMaps::has_param(const std::string& name) const {
  for (const auto& p : params)
    if (p.first == name) return true;
  return false;
}

at::Tensor stacked_log_features(const StackedMaps& m, const at::Tensor& x, const std::string& side) {
  if (map_family(m.map).id == MapId::LearnedPrf) {
    const at::Tensor xs = x / std::pow(double(m.d), 0.25);
    const at::Tensor z = m.param("z");          // [H, M, d]
    const at::Tensor alpha = m.param("alpha");  // [H, M]
    const at::Tensor proj = at::matmul(xs, z.unsqueeze(0).transpose(-1, -2));  // [B, H, L, M]
    const at::Tensor half_sq = 0.5 * (xs * xs).sum(-1, true);
    return proj - half_sq + 0.5 * alpha.unsqueeze(0).unsqueeze(2) - 0.5 * std::log(double(m.features));
  }
  const std::string pre = m.has_param("W") ? "" : side;
  const at::Tensor W = m.param(pre + "W");  // [H, d, d']
  const at::Tensor b = m.param(pre + "b");  // [H, d']
  const at::Tensor u = at::matmul(x, W.unsqueeze(0)) + b.unsqueeze(0).unsqueeze(2);
  if (m.activation == "softmax") return at::cat({at::log_softmax(u, -1), at::log_softmax(-u, -1)}, -1);
  return at::cat({u, -u}, -1);
}

at::Tensor stacked_relu_features(const StackedMaps& m, const at::Tensor& x, const std::string& side) {
  const std::string pre = m.has_param("W") ? "" : side;
  const at::Tensor W = m.param(pre + "W");  // [H, d, M]
  const at::Tensor b = m.param(pre + "b");  // [H, M]
  return at::relu(at::matmul(x, W.unsqueeze(0)) + b.unsqueeze(0).unsqueeze(2));
}

std::pair<at::Tensor, at::Tensor> stacked_fourier_features(const StackedMaps& m, const at::Tensor& x) {
  const at::Tensor tau = m.param("tau");  // [H, 1]
  const bool stationary = map_family(m.map).id == MapId::FlexStationary;
  const at::Tensor w1 = m.param(stationary ? "omega" : "omega1");  // [H, n, d]
  const at::Tensor ls = (x * x).sum(-1) * at::exp(-tau).unsqueeze(0) - 0.5 * std::log(double(w1.size(1)));
  if (stationary) {
    const at::Tensor a = at::matmul(x, w1.unsqueeze(0).transpose(-1, -2));  // [B, H, L, n]
    return {at::cat({at::cos(a), at::sin(a)}, -1), ls};
  }
  const at::Tensor w2 = m.param("omega2");
  const at::Tensor a = at::matmul(x, (0.5 * (w1 + w2)).unsqueeze(0).transpose(-1, -2));           // w1'.x
  const at::Tensor c = at::cos(at::matmul(x, (0.5 * (w1 - w2)).unsqueeze(0).transpose(-1, -2)));  // cos(w2'.x)
  return {at::cat({at::cos(a) * c, at::sin(a) * c}, -1), ls};
}

namespace {

// One head of stacked maps as a core FeatureMap, computed from the stacked tensors (a slice of them
// at each call, so the autograd graph of every forward pass reaches the stacked leaves). The
// features are layer_maps' own formulas on one head, as scaled features: the largest log feature
// taken out (learned-prf, hedgehog; the scale is detached: the kernel does not depend on it), the
// norm factor as the scale (flex-*: it carries tau's gradient), or no scale (t2r).
class TrainableHeadMap : public FeatureMap {
 public:
  TrainableHeadMap(StackedMaps maps, int64_t head) : maps_(std::move(maps)), head_(head) {}
  std::string name() const override { return maps_.map; }
  int64_t input_dim() const override { return maps_.d; }
  int64_t feature_dim() const override { return maps_.features; }
  at::Tensor query_features(const at::Tensor& x) const override {
    const Features f = scaled_query_features(x);
    return f.values * at::exp(f.log_scale);
  }
  at::Tensor key_features(const at::Tensor& x) const override {
    const Features f = scaled_key_features(x);
    return f.values * at::exp(f.log_scale);
  }
  Features scaled_query_features(const at::Tensor& x) const override { return features(x, "q."); }
  Features scaled_key_features(const at::Tensor& x) const override { return features(x, "k."); }

 private:
  Features features(const at::Tensor& x, const std::string& side) const {
    if (x.dim() < 2 || x.size(-1) != maps_.d)
      fail("feature map " + maps_.map, "input must be [..., L, " + std::to_string(maps_.d) + "]");
    StackedMaps one = maps_;
    one.heads = 1;
    for (auto& [name, t] : one.params) t = t.narrow(0, head_, 1).to(x.scalar_type());
    std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - 1);  // [..., L]
    const at::Tensor x4 = x.reshape({-1, 1, x.size(-2), maps_.d});
    at::Tensor values, log_scale;
    const MapFeatures form = map_family(one.map).features;
    if (form == MapFeatures::Signed) {
      auto [v, ls] = stacked_fourier_features(one, x4);
      values = v;
      log_scale = ls.unsqueeze(-1);
    } else if (form == MapFeatures::NonNegative) {
      values = stacked_relu_features(one, x4, side);
      log_scale = at::zeros_like(values.narrow(-1, 0, 1));
    } else {
      const at::Tensor l = stacked_log_features(one, x4, side);
      log_scale = std::get<0>(l.max(-1, true)).detach();
      values = at::exp(l - log_scale);
    }
    std::vector<int64_t> vshape = lead, sshape = lead;
    vshape.push_back(values.size(-1));
    sshape.push_back(1);
    return {values.reshape(vshape), log_scale.reshape(sshape)};
  }

  StackedMaps maps_;
  int64_t head_;
};

}  // namespace

std::shared_ptr<FeatureMap> stacked_head_view(const StackedMaps& maps, int64_t head) {
  return std::make_shared<TrainableHeadMap>(maps, head);
}

}  // namespace attnscope
