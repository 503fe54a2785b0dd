// A head's rule, written once (head.h).
#include "attnscope/attention/head.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "attnscope/base/names.h"

namespace attnscope {
namespace {

// gamma [...] (one per head) as [..., 1, 1], in `like`'s dtype and on its device, to broadcast over
// a head's rows and keys (or rows and outputs).
at::Tensor balance_per_head(const at::Tensor& gamma, const at::Tensor& like) {
  std::vector<int64_t> shape(gamma.sizes().begin(), gamma.sizes().end());
  shape.push_back(1);
  shape.push_back(1);
  return gamma.to(like.device(), like.scalar_type()).reshape(shape);
}

}  // namespace

HeadCost head_cost(HeadType type, int64_t d_k, int64_t d_v, int64_t T, int64_t M, int64_t W, bool decayed) {
  if (type == HeadType::Softmax) return {T * (d_k + d_v), 2 * T * (d_k + d_v)};
  HeadCost c{M * d_v + M, 2 * d_k * M + 4 * M * d_v + 2 * M};
  if (decayed) c.flops_per_token += M * d_v + M;
  if (type == HeadType::Hybrid) {
    c.state_values += W * (d_k + d_v);
    c.flops_per_token += 2 * W * (d_k + d_v);
  }
  return c;
}

HeadType map_head_type(int64_t window) { return window > 0 ? HeadType::Hybrid : HeadType::Linear; }

void check_head(const std::string& map, int64_t window) {
  if (window < 0) fail_value("window", std::to_string(window) + " must be 0 (plain linear attention) or a number of keys");
  if (window > 0 && !map.empty() && !map_family(map).nonnegative_kernel)
    fail_value("window", "hybrid heads take maps whose kernel values are >= 0; " + map +
                             " can give negative ones (its rows are clamped pair by pair in the map, not in the sums)");
}

at::Tensor head_log_weights(const HeadLogTerms& t) {
  const double ninf = -std::numeric_limits<double>::infinity();
  if (t.window <= 0) return t.log_linear.masked_fill(t.lag < 0, ninf);
  // Every weight of a row divided by g (softmax does not see a factor common to a row): the window
  // part is softmax's scores as they are, so a row whose keys are all in the window (the first W
  // rows; every row when W >= L) is softmax's row exactly, and the linear part carries (1 - g) / g.
  const at::Tensor g = balance_per_head(t.gamma, t.log_linear);
  const at::Tensor log_lin = t.log_linear + (at::log_sigmoid(-g) - at::log_sigmoid(g));
  return at::where(t.lag < t.window, t.scores, log_lin).masked_fill(t.lag < 0, ninf);
}

at::Tensor combine_head_parts(const HeadPart& window, const HeadPart& linear, const at::Tensor& gamma) {
  const at::Tensor g = balance_per_head(gamma, window.lse);
  const at::Tensor a = linear.lse + at::log_sigmoid(-g), b = window.lse + at::log_sigmoid(g);
  const at::Tensor m = at::maximum(a, b);  // finite: b is
  const at::Tensor ea = at::exp(a - m), eb = at::exp(b - m);
  // Where the linear part has no weight (a = -inf) its output is 0/0: read as 0 (weight 0 anyway).
  const at::Tensor lin = at::where(at::isfinite(a), linear.y, at::zeros_like(linear.y));
  return (ea * lin + eb * window.y) / (ea + eb);
}

namespace {
constexpr Named<Decay> kDecays[] = {{Decay::None, "none"}, {Decay::Fixed, "fixed"}, {Decay::Gated, "gated"}, {Decay::Mixer, "mixer"}};
constexpr Named<HeadType> kHeadTypes[] = {{HeadType::Softmax, "softmax"}, {HeadType::Hybrid, "hybrid"}, {HeadType::Linear, "linear"}};
constexpr Named<DecayInit> kDecayInits[] = {{DecayInit::Fit, "fit"}, {DecayInit::None, "none"}};
}  // namespace

HeadType parse_head_type(const std::string& name) { return parse_name(kHeadTypes, name, "head type"); }
const char* head_type_name(HeadType type) { return name_of(kHeadTypes, type); }
std::vector<std::string> head_type_names() { return names_of(kHeadTypes); }
int64_t softmax_head_count(const std::vector<std::vector<HeadType>>& types) {
  int64_t n = 0;
  for (const auto& layer : types) n += std::count(layer.begin(), layer.end(), HeadType::Softmax);
  return n;
}
Decay parse_decay(const std::string& name) { return parse_name(kDecays, name, "decay"); }
Decay parse_head_decay(const std::string& name) {
  const Decay d = parse_decay(name);
  if (d == Decay::Mixer)
    fail_value("decay", "mixer is how training chooses each head's decay; a model's head is none, fixed or gated");
  return d;
}
const char* decay_name(Decay decay) { return name_of(kDecays, decay); }
std::vector<std::string> decay_names() { return names_of(kDecays); }
DecayInit parse_decay_init(const std::string& name) { return parse_name(kDecayInits, name, "decay initialization"); }
const char* decay_init_name(DecayInit init) { return name_of(kDecayInits, init); }
std::vector<std::string> decay_init_names() { return names_of(kDecayInits); }

double delta_of_log_decay(double log_a) {
  if (!(log_a <= 0)) fail_value("decay", "log a must be <= 0 (a in (0, 1])");
  if (log_a == 0) return kUndecayedDelta;
  // log(1 - a) = log(-expm1(log a)): exact for a near 1.
  return std::min(kUndecayedDelta, log_a - std::log(-std::expm1(log_a)));
}

at::Tensor decay_log_cumsum(const at::Tensor& log_a) {
  const at::Tensor bad = at::logical_or(log_a > 0, at::isnan(log_a));
  if (bad.any().item<bool>()) fail_value("decay", "log a must be <= 0 (a in (0, 1]): got a value above 0 or NaN");
  return log_a.to(at::kDouble).cumsum(-1).to(log_a.scalar_type());
}

at::Tensor fixed_decay_lambda(const at::Tensor& delta, int64_t length) {
  const at::Tensor log_a = at::log_sigmoid(delta.to(at::kDouble)).unsqueeze(-1);  // [..., 1]
  const at::Tensor steps = at::arange(1, length + 1, delta.options().dtype(at::kDouble));
  return (log_a * steps).to(delta.scalar_type());
}

at::Tensor gated_decay_lambda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (x.dim() != 3 || w.dim() != 2 || b.dim() != 1 || x.size(2) != w.size(1) || w.size(0) != b.size(0))
    fail_value("decay", "a gate needs the layer input x [B, L, D], w [H, D] and b [H]");
  // log sigmoid of the gate's logit in float64: a_t near 1 (logit ~ 10) keeps log a_t ~ -4.5e-5 exact.
  const at::Tensor logit = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t()) + b.to(at::kDouble);  // [B, L, H]
  return decay_log_cumsum(at::log_sigmoid(logit).transpose(1, 2)).to(x.scalar_type());
}

DecayedFeatures decayed_features(const Features& phi_q, const Features& phi_k, const at::Tensor& lambda) {
  const at::Tensor l = lambda.unsqueeze(-1).to(phi_k.log_scale.scalar_type());
  return {Features(phi_q.values, phi_q.log_scale + l), Features(phi_k.values, phi_k.log_scale - l)};
}

}  // namespace attnscope
