// A float64 reference of decayed heads' layerwise losses (kl and output), pair by pair in the log
// domain, written with plain loops for the decay tests: phi from the map's own features (core's
// FeatureMap), log w_ij = log max(phi(q_i).phi(k_j), 0) + Lambda_i - Lambda_j, or in a hybrid head
// log g + s_ij on the last W keys and log(1 - g) + that on the older. t2r's kernel is formed directly
// (no log domain), so its values are floored at 1e-30 (distill.h): a hybrid's kernel value, a linear
// head's Ahat.
#pragma once
#include <ATen/core/Tensor.h>

#include "attnscope/distill/layer_maps.h"

namespace attnscope::test {

struct DecayedLosses {
  double kl = 0, output = 0;
};
// q, k [B, H, L, d], v [B, H, L, d_v]; lambda [B, H, L]: each window's and head's Lambda_i.
DecayedLosses decayed_losses_reference(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const at::Tensor& lambda);

}  // namespace attnscope::test
