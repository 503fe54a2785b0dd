#include "attnscope/attention/feature_map.h"

#include <ATen/ATen.h>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "attnscope/base/random.h"
#include "feature_map_families.h"

namespace attnscope {

FeatureMap::~FeatureMap() = default;

Features::Features(at::Tensor v) : values(std::move(v)) {
  if (!values.defined() || values.dim() < 1) return;  // the consumers' shape checks report it
  std::vector<int64_t> shape(values.sizes().begin(), values.sizes().end());
  shape.back() = 1;
  log_scale = at::zeros(shape, values.options());
}

at::Tensor FeatureMap::key_features(const at::Tensor& x) const { return query_features(x); }

Features FeatureMap::scaled_query_features(const at::Tensor& x) const { return Features(query_features(x)); }
Features FeatureMap::scaled_key_features(const at::Tensor& x) const { return Features(key_features(x)); }

std::vector<std::pair<std::string, at::Tensor>> FeatureMap::named_parameters() { return {}; }

std::vector<at::Tensor> FeatureMap::parameters() {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void check_feature_dim(int64_t m, const std::string& where) {
  if (m < 1 || m > kMaxFeatureDim)
    fail_value("feature dimension", std::to_string(m) + (where.empty() ? "" : " (" + where + ")") + " is outside 1.." +
                                        std::to_string(kMaxFeatureDim));
}

std::unique_ptr<FeatureMap> make_feature_map(const FeatureMapSpec& spec) {
  const std::string& n = spec.name;
  const MapFamily& family = map_family(n);
  if (spec.features > 0) check_feature_dim(spec.features, "feature map " + n);
  if (spec.d <= 0) fail(fmap::where(n), "input dimension d must be positive, got " + std::to_string(spec.d));
  if (spec.features < 0) fail(fmap::where(n), "features must be positive, got " + std::to_string(spec.features));
  if (family.trainable) return fmap::make_trainable(spec);
  switch (family.id) {
    case MapId::Prf:
    case MapId::PrfOrthogonal:
    case MapId::PrfHyperbolic: return fmap::make_prf(spec);
    default: break;
  }
  return fmap::make_simple(spec);
}

namespace fmap {

std::string where(const std::string& name) { return "feature map " + name; }

void check_input(const std::string& name, int64_t d, const at::Tensor& x) {
  if (!x.defined() || x.dim() < 1) fail(where(name), "input must have at least one dimension [..., d]");
  if (!at::isFloatingType(x.scalar_type())) fail(where(name), "input must be a floating tensor");
  if (x.size(-1) != d)
    fail(where(name), "input has last dimension " + std::to_string(x.size(-1)) + ", expected d = " +
                          std::to_string(d));
}

std::string resolve_init(const FeatureMapSpec& spec, const std::vector<std::string>& allowed) {
  if (spec.init.empty()) return allowed.front();
  for (const auto& a : allowed)
    if (a == spec.init) return a;
  std::string valid;
  for (const auto& a : allowed) valid += (valid.empty() ? "" : ", ") + a;
  fail(where(spec.name), "unknown init '" + spec.init + "' (valid: " + valid + ")");
}

int64_t chosen_features(const FeatureMapSpec& spec) {
  if (spec.features <= 0)
    fail(where(spec.name), "features (M) must be positive, got " + std::to_string(spec.features));
  if (map_family(spec.name).pairs && spec.features % 2 != 0)
    fail(where(spec.name), "features (M) must be even (pairs of features), got " + std::to_string(spec.features));
  return spec.features;
}

int64_t fixed_features(const FeatureMapSpec& spec, int64_t natural) {
  if (spec.features != 0 && spec.features != natural)
    fail(where(spec.name), "has " + std::to_string(natural) + " features for d = " + std::to_string(spec.d) +
                               "; features must be 0 or " + std::to_string(natural) + ", got " +
                               std::to_string(spec.features));
  return natural;
}

at::Generator generator(uint64_t seed, uint64_t stream) {
  return at::detail::createCPUGenerator(derive_seed(seed, stream));
}

at::Tensor gaussian(int64_t rows, int64_t cols, uint64_t seed, uint64_t stream) {
  at::Generator gen = generator(seed, stream);
  return at::randn({rows, cols}, gen, at::TensorOptions().dtype(at::kFloat));
}

at::Tensor orthogonal_gaussian(int64_t rows, int64_t d, uint64_t seed, uint64_t stream) {
  at::Generator gen = generator(seed, stream);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  std::vector<at::Tensor> blocks;
  for (int64_t done = 0; done < rows; done += d) {
    at::Tensor g = at::randn({d, d}, gen, f64);
    auto [q, r] = at::linalg_qr(g);  // orthonormal columns
    // Fixing the signs of R's diagonal makes Q Haar-distributed (LAPACK's Householder signs do not).
    q = q * at::sign(r.diagonal()).unsqueeze(0);
    // The norms of independent Gaussian vectors: chi(d), so each row has the N(0, I) marginal.
    at::Tensor norms = at::randn({d, d}, gen, f64).norm(2, {1});
    blocks.push_back(q.t() * norms.unsqueeze(1));
  }
  return at::cat(blocks, 0).slice(0, 0, rows).to(at::kFloat).contiguous();
}

at::Tensor like(const at::Tensor& p, const at::Tensor& x) {
  if (p.scalar_type() == x.scalar_type() && p.device() == x.device()) return p;
  return p.to(x.device(), x.scalar_type());
}

}  // namespace fmap
}  // namespace attnscope
