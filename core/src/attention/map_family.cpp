// The feature-map families, one row each (map_family.h).
#include "attnscope/attention/map_family.h"

#include "attnscope/attention/feature_map.h"
#include "attnscope/base/error.h"

namespace attnscope {
namespace {

// clang-format off
constexpr MapFamily kMapFamilies[] = {
  // id                        name                  train  pairs                                            features                  k>=0   fixed  pos    budget
  {MapId::Prf,               "prf",                false, nullptr,                                         MapFeatures::Positive,    true,  false, false, 1},
  {MapId::PrfOrthogonal,     "prf-orthogonal",     false, nullptr,                                         MapFeatures::Positive,    true,  false, false, 1},
  {MapId::PrfHyperbolic,     "prf-hyperbolic",     false, "[exp(w.x' - |x'|^2/2), exp(-w.x' - |x'|^2/2)]", MapFeatures::Positive,    true,  false, false, 1},
  {MapId::LearnedPrf,        "learned-prf",        true,  nullptr,                                         MapFeatures::Positive,    true,  false, false, 1},
  {MapId::Hedgehog,          "hedgehog",           true,  "[exp(u), exp(-u)]",                             MapFeatures::Positive,    true,  false, false, 2},
  {MapId::T2r,               "t2r",                true,  nullptr,                                         MapFeatures::NonNegative, true,  false, false, 1},
  {MapId::Elu,               "elu",                false, nullptr,                                         MapFeatures::Positive,    true,  true,  false, 1},
  {MapId::Relu,              "relu",               false, nullptr,                                         MapFeatures::NonNegative, true,  true,  false, 1},
  {MapId::Exp,               "exp",                false, nullptr,                                         MapFeatures::Positive,    true,  true,  false, 1},
  {MapId::Taylor2,           "taylor2",            false, nullptr,                                         MapFeatures::Signed,      true,  true,  false, 1},
  {MapId::Cosformer,         "cosformer",          false, nullptr,                                         MapFeatures::NonNegative, true,  true,  true,  1},
  {MapId::FlexStationary,    "flex-stationary",    true,  "[cos, sin]",                                    MapFeatures::Signed,      false, false, false, 1},
  {MapId::FlexNonstationary, "flex-nonstationary", true,  "[cos, sin]",                                    MapFeatures::Signed,      false, false, false, 1},
};
// clang-format on

}  // namespace

const MapFamily& map_family(const std::string& name) {
  for (const MapFamily& f : kMapFamilies)
    if (name == f.name) return f;
  std::string valid;
  for (const MapFamily& f : kMapFamilies) valid += (valid.empty() ? "" : ", ") + std::string(f.name);
  fail("feature map", "unknown name '" + name + "' (valid: " + valid + ")");
}

std::vector<std::string> trainable_map_names() {
  std::vector<std::string> out;
  for (const MapFamily& f : kMapFamilies)
    if (f.trainable) out.push_back(f.name);
  return out;
}

std::vector<std::string> feature_map_names() {
  std::vector<std::string> out;
  for (const MapFamily& f : kMapFamilies) out.push_back(f.name);
  return out;
}

bool feature_map_has_fixed_size(const std::string& name) {
  for (const MapFamily& f : kMapFamilies)
    if (name == f.name) return f.fixed_size;
  return false;
}

int64_t default_budget(const std::string& map, int64_t head_dim) { return map_family(map).budget_per_head_dim * head_dim; }

}  // namespace attnscope
