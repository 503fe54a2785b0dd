// Feature maps to and from their defining tensors (feature_map_tensors.h). Building the map from its
// spec first and then overwriting its tensors keeps one source of truth for each family's shapes.
#include "attnscope/attention/feature_map_tensors.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include "attnscope/base/error.h"
#include "feature_map_families.h"

namespace attnscope {

namespace {

std::string shape_of(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> feature_map_tensors(FeatureMap& map) {
  if (at::Tensor w = fmap::prf_draws(map); w.defined()) return {{"w", w}};
  return map.named_parameters();
}

std::unique_ptr<FeatureMap> feature_map_from_tensors(const FeatureMapSpec& spec,
                                                     const std::map<std::string, at::Tensor>& tensors,
                                                     const std::string& where) {
  FeatureMapSpec s = spec;
  s.init.clear();  // every tensor is replaced; leverage init would need data it does not use
  s.data = at::Tensor();
  std::unique_ptr<FeatureMap> map;
  try {
    map = make_feature_map(s);  // e.g. an odd M for a map of feature pairs: say whose map it is
  } catch (const Error& e) {
    fail(where, e.what());
  }
  const auto expected = feature_map_tensors(*map);
  for (const auto& [name, t] : tensors) {
    bool known = false;
    for (const auto& e : expected) known = known || e.first == name;
    if (!known) {
      std::string names;
      for (const auto& e : expected) names += (names.empty() ? "" : ", ") + e.first;
      fail(where, "unexpected tensor '" + name + "' for feature map " + spec.name + " (it has: " +
                      (names.empty() ? "none" : names) + ")");
    }
  }
  std::vector<std::pair<std::string, at::Tensor>> given;
  for (const auto& [name, ref] : expected) {
    auto it = tensors.find(name);
    if (it == tensors.end()) fail(where, "missing tensor '" + name + "' of feature map " + spec.name);
    const at::Tensor& t = it->second;
    if (!t.defined() || !t.sizes().equals(ref.sizes()))
      fail(where, "tensor '" + name + "' has shape " + (t.defined() ? shape_of(t) : "none") + ", feature map " +
                      spec.name + " needs " + shape_of(ref));
    if (t.scalar_type() != at::kFloat) fail(where, "tensor '" + name + "' is not float32");
    at::Tensor c = t.contiguous().clone();
    if (!at::isfinite(c).all().item<bool>()) fail(where, "tensor '" + name + "' holds NaN or inf");
    given.emplace_back(name, c);
  }
  if (at::Tensor w = fmap::prf_draws(*map); w.defined()) return fmap::make_prf_from_draws(spec.name, given[0].second);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < expected.size(); ++i) expected[i].second.copy_(given[i].second);
  return map;
}

}  // namespace attnscope
