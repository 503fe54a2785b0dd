// Internal to the feature-map zoo: one factory per family file, and the checks and random draws the
// families share. make_feature_map (feature_map.cpp) dispatches on the name.
#pragma once
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/attention/feature_map.h"

namespace attnscope::fmap {

// feature_map_prf.cpp: prf, prf-orthogonal, prf-hyperbolic
std::unique_ptr<FeatureMap> make_prf(const FeatureMapSpec& spec);
// feature_map_prf.cpp: the random draws w of prf, prf-orthogonal, prf-hyperbolic (undefined for any
// other map), and the map of that name rebuilt around given draws (feature_map_tensors.cpp).
at::Tensor prf_draws(const FeatureMap& map);
std::unique_ptr<FeatureMap> make_prf_from_draws(const std::string& name, at::Tensor w);
// stacked_maps.cpp: the trainable maps (learned-prf, hedgehog, t2r, flex-*), a stack of one head
std::unique_ptr<FeatureMap> make_trainable(const FeatureMapSpec& spec);
// feature_map_simple.cpp: elu, relu, exp, taylor2, cosformer
std::unique_ptr<FeatureMap> make_simple(const FeatureMapSpec& spec);

// "feature map <name>": the `where` of every error a map raises.
std::string where(const std::string& name);

// Throws unless x is a floating tensor with at least one dimension and last dimension d.
void check_input(const std::string& name, int64_t d, const at::Tensor& x);

// The spec's init, or `allowed[0]` when empty; throws when not in `allowed`.
std::string resolve_init(const FeatureMapSpec& spec, const std::vector<std::string>& allowed);

// M for a map whose size is a choice: spec.features, which must be > 0 (and even for a family of
// feature pairs, MapFamily::pairs).
int64_t chosen_features(const FeatureMapSpec& spec);

// M for a fixed-size map: `natural`, after checking spec.features is 0 or equal to it.
int64_t fixed_features(const FeatureMapSpec& spec, int64_t natural);

// The CPU generator of (seed, stream), seeded with derive_seed(seed, stream) (random.h): `stream`
// separates independent draws made from one seed.
at::Generator generator(uint64_t seed, uint64_t stream);
// Seeded float32 N(0, 1) draws.
at::Tensor gaussian(int64_t rows, int64_t cols, uint64_t seed, uint64_t stream = 0);
// `rows` vectors in R^d: stacked blocks of d orthonormal rows (QR of a Gaussian matrix), each row
// rescaled by an independent chi(d) norm so that every row is marginally N(0, I_d) while rows within
// a block are exactly orthogonal (Performer's ORF).
at::Tensor orthogonal_gaussian(int64_t rows, int64_t d, uint64_t seed, uint64_t stream = 0);

// A parameter `p` in the dtype and on the device of `x` (a no-op when they already agree, so
// autograd flows into the parameter itself in the common case).
at::Tensor like(const at::Tensor& p, const at::Tensor& x);

}  // namespace attnscope::fmap
