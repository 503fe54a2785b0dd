// A head's rule, written once (head.h).
#include "attnscope/attention/head.h"

#include <ATen/ATen.h>

#include <limits>
#include <vector>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"

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

}  // namespace attnscope
