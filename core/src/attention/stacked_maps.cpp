// The trainable feature maps, each family written once, stacked over heads (stacked_maps.h).
#include "attnscope/attention/stacked_maps.h"

#include <ATen/ATen.h>

#include <cmath>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "feature_map_families.h"

namespace attnscope {

const at::Tensor& StackedMaps::param(const std::string& name) const {
  for (const auto& [n, t] : params)
    if (n == name) return t;
  fail(fmap::where(map), "has no parameter '" + name + "'");
}

bool StackedMaps::has_param(const std::string& name) const {
  for (const auto& p : params)
    if (p.first == name) return true;
  return false;
}

namespace {

// A trainable family's parameter names in their order (tied: one layer for both sides).
std::vector<std::string> stacked_param_names(const std::string& map, bool tied) {
  switch (map_family(map).id) {
    case MapId::LearnedPrf: return {"z", "alpha"};
    case MapId::Hedgehog:
    case MapId::T2r:
      if (tied) return {"W", "b"};
      return {"q.W", "q.b", "k.W", "k.b"};
    case MapId::FlexStationary: return {"omega", "tau"};
    case MapId::FlexNonstationary: return {"omega1", "omega2", "tau"};
    default: break;
  }
  fail(fmap::where(map), "is not a trainable map");
}

// identity: W_im = 1 when m mod d == i (the identity for d' = d, tiled copies of it beyond);
// random: W ~ N(0, 1/d), so u has the scale of x. b = 0 either way.
std::pair<at::Tensor, at::Tensor> init_linear(int64_t d, int64_t out, const std::string& init, uint64_t seed,
                                              uint64_t stream) {
  at::Tensor W;
  if (init == "identity") {
    W = at::zeros({d, out}, at::kFloat);
    auto w = W.accessor<float, 2>();
    for (int64_t m = 0; m < out; ++m) w[m % d][m] = 1.0f;
  } else {
    W = fmap::gaussian(d, out, seed, stream) / std::sqrt(double(d));
  }
  return {W, at::zeros({out}, at::kFloat)};
}

// One head's initial parameters (SPEC 7's shapes) by its family's initialization.
std::vector<std::pair<std::string, at::Tensor>> initial_params(const FeatureMapSpec& spec) {
  const std::string& n = spec.name;
  switch (map_family(n).id) {
    case MapId::LearnedPrf: {
      const int64_t M = fmap::chosen_features(spec);
      const std::string init = fmap::resolve_init(spec, {"gaussian", "orthogonal", "leverage"});
      if (init == "leverage") {
        if (!spec.data.defined() || spec.data.dim() != 2 || spec.data.size(1) != spec.d)
          fail(fmap::where(n), "init 'leverage' needs the captured vectors as data [J, d] with d = " + std::to_string(spec.d));
        LeverageInit li = leverage_init(spec.data, M, spec.seed, spec.leverage);
        return {{"z", li.z}, {"alpha", li.alpha}};
      }
      at::Tensor z = init == "gaussian" ? fmap::gaussian(M, spec.d, spec.seed) : fmap::orthogonal_gaussian(M, spec.d, spec.seed);
      return {{"z", z}, {"alpha", at::zeros({M}, at::kFloat)}};
    }
    case MapId::Hedgehog:
    case MapId::T2r: {
      // hedgehog: d' = M / 2, the negation map doubles it
      const bool hedgehog = map_family(n).id == MapId::Hedgehog;
      const int64_t out = hedgehog ? fmap::chosen_features(spec) / 2 : fmap::chosen_features(spec);
      const std::string init = fmap::resolve_init(spec, hedgehog ? std::vector<std::string>{"identity", "random"}
                                                                 : std::vector<std::string>{"random", "identity"});
      if (hedgehog && spec.activation != "exp" && spec.activation != "softmax" && spec.activation != "softmax-joint")
        fail(fmap::where(n), "unknown activation '" + spec.activation + "' (valid: exp, softmax, softmax-joint)");
      auto [qW, qb] = init_linear(spec.d, out, init, spec.seed, 0);
      if (spec.tied) return {{"W", qW}, {"b", qb}};
      auto [kW, kb] = init_linear(spec.d, out, init, spec.seed, 1);
      return {{"q.W", qW}, {"q.b", qb}, {"k.W", kW}, {"k.b", kb}};
    }
    case MapId::FlexStationary:
    case MapId::FlexNonstationary: {
      // w ~ N(0, I / sqrt d) (the spectral density of the Gaussian factor) and tau = log(2 sqrt d):
      // phi(q).phi(k) is then an unbiased estimate of exp(q.k / sqrt d).
      const int64_t half = fmap::chosen_features(spec) / 2;
      const double d = double(spec.d);
      const double freq_scale = 1.0 / std::pow(d, 0.25);
      at::Tensor tau = at::full({1}, std::log(2.0 * std::sqrt(d)), at::kFloat);
      at::Tensor w1 = fmap::gaussian(half, spec.d, spec.seed, 0) * freq_scale;
      if (map_family(n).id == MapId::FlexStationary) {
        fmap::resolve_init(spec, {"gaussian"});
        return {{"omega", w1}, {"tau", tau}};
      }
      const std::string init = fmap::resolve_init(spec, {"gaussian", "independent"});
      at::Tensor w2 = init == "gaussian" ? w1.clone() : fmap::gaussian(half, spec.d, spec.seed, 1) * freq_scale;
      return {{"omega1", w1}, {"omega2", w2}, {"tau", tau}};
    }
    default: break;
  }
  fail(fmap::where(n), "is not a trainable map");
}

}  // namespace

at::Tensor stacked_log_features(const StackedMaps& m, const at::Tensor& x, MapSide side) {
  if (map_family(m.map).id == MapId::LearnedPrf) {
    // With x_s = x d^(-1/4): x_s.z - |x_s|^2 / 2 + alpha / 2 - log(M) / 2, in as few calls as it takes
    // (generation runs this once per layer and token).
    const double s = std::pow(double(m.d), -0.25);
    const at::Tensor z = m.param("z");          // [H, M, d]
    const at::Tensor alpha = m.param("alpha");  // [H, M]
    // The scalars go into the small parameters (z s, alpha / 2 - log(M) / 2), not into [B, H, L, M].
    const at::Tensor proj = at::matmul(x, (z * s).unsqueeze(0).transpose(-1, -2));  // [B, H, L, M]
    const at::Tensor l = at::sub(proj, (x * x).sum(-1, true), 0.5 * s * s);
    return l + (0.5 * alpha - 0.5 * std::log(double(m.features))).unsqueeze(0).unsqueeze(2);
  }
  const std::string pre = m.has_param("W") ? "" : side == MapSide::Query ? "q." : "k.";  // untied: q.* or k.*
  const at::Tensor W = m.param(pre + "W");  // [H, d, d']
  const at::Tensor b = m.param(pre + "b");  // [H, d']
  const at::Tensor u = at::matmul(x, W.unsqueeze(0)) + b.unsqueeze(0).unsqueeze(2);
  if (m.activation == "softmax") return at::cat({at::log_softmax(u, -1), at::log_softmax(-u, -1)}, -1);
  if (m.activation == "softmax-joint") return at::log_softmax(at::cat({u, -u}, -1), -1);
  return at::cat({u, -u}, -1);
}

at::Tensor stacked_relu_features(const StackedMaps& m, const at::Tensor& x, MapSide side) {
  const std::string pre = m.has_param("W") ? "" : side == MapSide::Query ? "q." : "k.";
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

StackedMaps stack_of(const FeatureMapSpec& spec, int64_t heads) {
  StackedMaps m;
  m.map = spec.name;
  m.activation = spec.activation;
  m.heads = heads;
  m.d = spec.d;
  m.features = spec.features;
  return m;
}

// One head of a stack as a FeatureMap. Its parameters are either its own tensors (SPEC 7's shapes;
// a stack of one at each call) or a stack's, of which each call takes slice `head`: either way the
// autograd graph of its features reaches the tensors it holds.
class StackHead : public FeatureMap {
 public:
  StackHead(StackedMaps maps, int64_t head, bool own) : maps_(std::move(maps)), head_(head), own_(own) {}

  std::string name() const override { return maps_.map; }
  int64_t input_dim() const override { return maps_.d; }
  int64_t feature_dim() const override { return maps_.features; }

  // phi itself: exp(log phi) for the families with positive features, else values * exp(log_scale).
  at::Tensor query_features(const at::Tensor& x) const override { return phi(x, MapSide::Query); }
  at::Tensor key_features(const at::Tensor& x) const override { return phi(x, MapSide::Key); }
  Features scaled_query_features(const at::Tensor& x) const override { return scaled(x, MapSide::Query); }
  Features scaled_key_features(const at::Tensor& x) const override { return scaled(x, MapSide::Key); }

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() override {
    if (!own_) return {};
    return maps_.params;
  }
  const StackedMaps& stack() const { return maps_; }
  bool own() const { return own_; }

 private:
  // The stack of one this head computes with, its parameters in x's dtype and on its device.
  StackedMaps one(const at::Tensor& x) const {
    StackedMaps m = maps_;
    m.heads = 1;
    for (auto& [name, t] : m.params) t = fmap::like(own_ ? t.unsqueeze(0) : t.narrow(0, head_, 1), x);
    return m;
  }

  // x [..., L, d] as sequences of the stack's one head [B, 1, L, d] (a 1-D x: one token), and a
  // result [B, 1, L, k] back as [..., L, k].
  at::Tensor as_stack(const at::Tensor& x) const {
    fmap::check_input(maps_.map, maps_.d, x);
    return x.reshape({-1, 1, x.dim() >= 2 ? x.size(-2) : 1, maps_.d});
  }
  static at::Tensor back(const at::Tensor& y, const at::Tensor& x) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = y.size(-1);
    return y.reshape(shape);
  }

  at::Tensor phi(const at::Tensor& x, MapSide side) const {
    if (map_family(maps_.map).features == MapFeatures::Positive)
      return back(at::exp(stacked_log_features(one(x), as_stack(x), side)), x);
    const Features f = scaled(x, side);
    return f.values * at::exp(f.log_scale);
  }

  Features scaled(const at::Tensor& x, MapSide side) const {
    const Features f = stacked_features(one(x), as_stack(x), side);
    return {back(f.values, x), back(f.log_scale, x)};
  }

  StackedMaps maps_;
  int64_t head_;
  bool own_;
};

// The stack's head `head` with its parameters (only the family's: not a trainer's others beside
// them) as they are, or copied (CPU float32, SPEC 7's shapes).
StackedMaps head_params(const StackedMaps& maps, int64_t head, bool copy) {
  if (head < 0 || head >= maps.heads)
    fail(fmap::where(maps.map), "head " + std::to_string(head) + " outside the " + std::to_string(maps.heads) + " stacked heads");
  StackedMaps m = maps;
  m.params.clear();
  for (const std::string& name : stacked_param_names(maps.map, maps.has_param("W") || !maps.has_param("q.W"))) {
    const at::Tensor& t = maps.param(name);
    m.params.emplace_back(name, copy ? t.select(0, head).detach().to(at::kCPU, at::kFloat).clone() : t);
  }
  return m;
}

}  // namespace

StackedMaps init_stacked_maps(const FeatureMapSpec& spec, const std::vector<uint64_t>& seeds) {
  if (!map_family(spec.name).trainable) fail(fmap::where(spec.name), "has nothing to train");
  StackedMaps m = stack_of(spec, int64_t(seeds.size()));
  std::vector<std::vector<at::Tensor>> per_param;
  std::vector<std::string> names;
  for (size_t i = 0; i < seeds.size(); ++i) {
    FeatureMapSpec s = spec;
    s.seed = seeds[i];
    auto fm = make_feature_map(s);  // every check of the spec, and the family's draws
    const auto np = fm->named_parameters();
    if (i == 0) {
      for (const auto& p : np) names.push_back(p.first);
      per_param.resize(np.size());
    }
    for (size_t j = 0; j < np.size(); ++j) per_param[j].push_back(np[j].second.to(at::kFloat).detach().clone());
  }
  for (size_t j = 0; j < names.size(); ++j) m.params.emplace_back(names[j], at::stack(per_param[j]).contiguous());
  return m;
}

Features stacked_features(const StackedMaps& m, const at::Tensor& x, MapSide side) {
  switch (map_family(m.map).features) {
    case MapFeatures::Signed: {
      const auto [values, ls] = stacked_fourier_features(m, x);
      return {values, ls.unsqueeze(-1)};
    }
    case MapFeatures::NonNegative: {
      const at::Tensor values = stacked_relu_features(m, x, side);
      return {values, at::zeros_like(values.narrow(-1, 0, 1))};
    }
    case MapFeatures::Positive: break;
  }
  const at::Tensor l = stacked_log_features(m, x, side);
  const at::Tensor log_scale = std::get<0>(l.max(-1, true)).detach();
  return {at::exp(l - log_scale), log_scale};
}

std::shared_ptr<FeatureMap> stacked_head_view(const StackedMaps& maps, int64_t head) {
  return std::make_shared<StackHead>(head_params(maps, head, false), head, false);
}

std::unique_ptr<FeatureMap> stacked_head_copy(const StackedMaps& maps, int64_t head) {
  return std::make_unique<StackHead>(head_params(maps, head, true), 0, true);
}

std::unique_ptr<FeatureMap> make_learned_prf(at::Tensor z, at::Tensor alpha) {
  if (!z.defined() || z.dim() != 2 || z.size(0) < 1 || z.size(1) < 1)
    fail(fmap::where("learned-prf"), "z must be [M, d] with M, d >= 1");
  if (!alpha.defined() || alpha.dim() != 1 || alpha.size(0) != z.size(0))
    fail(fmap::where("learned-prf"), "alpha must be [M] with M = " + std::to_string(z.size(0)));
  if (!at::isFloatingType(z.scalar_type()) || !at::isFloatingType(alpha.scalar_type()))
    fail(fmap::where("learned-prf"), "z and alpha must be floating tensors");
  StackedMaps m;
  m.map = "learned-prf";
  m.heads = 1;
  m.d = z.size(1);
  m.features = z.size(0);
  m.params = {{"z", std::move(z)}, {"alpha", std::move(alpha)}};
  return std::make_unique<StackHead>(std::move(m), 0, true);
}

namespace fmap {

std::unique_ptr<FeatureMap> make_trainable(const FeatureMapSpec& spec) {
  StackedMaps m = stack_of(spec, 1);
  m.params = initial_params(spec);
  return std::make_unique<StackHead>(std::move(m), 0, true);
}

}  // namespace fmap
std::optional<StackedMaps> stack_of_heads(const std::vector<const FeatureMap*>& heads) {
  if (heads.empty()) return std::nullopt;
  std::vector<const StackHead*> hs;
  for (const FeatureMap* m : heads) {
    const auto* h = dynamic_cast<const StackHead*>(m);
    if (!h || !h->own()) return std::nullopt;
    const StackedMaps& a = h->stack(), &b = hs.empty() ? a : hs[0]->stack();
    if (a.map != b.map || a.activation != b.activation || a.d != b.d || a.features != b.features || a.params.size() != b.params.size())
      return std::nullopt;
    hs.push_back(h);
  }
  StackedMaps out = hs[0]->stack();
  out.heads = int64_t(hs.size());
  for (size_t i = 0; i < out.params.size(); ++i) {
    std::vector<at::Tensor> parts;
    for (const StackHead* h : hs) {
      const auto& [name, t] = h->stack().params[i];
      if (name != out.params[i].first) return std::nullopt;
      parts.push_back(t.detach());
    }
    out.params[i].second = at::stack(parts, 0);
  }
  return out;
}

}  // namespace attnscope
