// Every tensor that defines a feature map, by name, and a map rebuilt from them: what a converted
// model stores per head (SPEC 7) so that a reader never reproduces attnscope's random numbers.
//
//   learnable maps (learned-prf, hedgehog, t2r, flex-*)  their named_parameters(): z, alpha; W, b or
//                                                        q.W, q.b, k.W, k.b; omega, tau; ...
//   prf, prf-orthogonal                                  w [M, d], the random draws
//   prf-hyperbolic                                       w [M/2, d] (features [w.x', -w.x'])
//   elu, relu, exp, taylor2, cosformer                   none
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/attention/feature_map.h"

namespace attnscope {

// The map's defining tensors (its own storage, not copies), in a fixed order.
std::vector<std::pair<std::string, at::Tensor>> feature_map_tensors(FeatureMap& map);

// The map `spec` describes (name, d, features, activation, tied, temperature, horizon; init and
// seed do not matter) with its defining tensors replaced by `tensors`, which must hold exactly the
// names feature_map_tensors gives for such a map, with the same shapes, float32 (SPEC 7) and
// finite; they are copied. Throws Error naming `where` (e.g. the file and head) for a missing,
// extra, misshapen, non-float32 or non-finite tensor, or a spec no map can be made of.
std::unique_ptr<FeatureMap> feature_map_from_tensors(const FeatureMapSpec& spec,
                                                     const std::map<std::string, at::Tensor>& tensors,
                                                     const std::string& where);

}  // namespace attnscope
