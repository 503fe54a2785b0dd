// The feature-map zoo (SPEC section 5): maps phi: R^d -> R^M whose inner products phi(q).phi(k) stand
// in for the attention kernel K(q, k) = exp(q.k / sqrt(d)) in linear attention.
//
//   name                maps x [..., d] to                                                     M
//   prf                 exp(w_m.x' - |x'|^2/2) / sqrt(M), x' = x / d^(1/4), w_m ~ N(0, I)       features
//   prf-orthogonal      same, w in orthogonal blocks of d rows with chi(d)-distributed norms    features
//   prf-hyperbolic      [exp(w.x' - |x'|^2/2), exp(-w.x' - |x'|^2/2)] / sqrt(M), M/2 w's       features (even)
//   learned-prf         sqrt(a_m / M) exp(z_m.x' - |x'|^2/2), a_m = exp(alpha_m); z, alpha     features
//                       learnable; init gaussian | orthogonal | leverage (leverage_init.h)
//   hedgehog            u = x W + b (W [d, d'] = identity, b = 0 at init, per head), then      features = 2 d'
//                       activation exp: [exp(u), exp(-u)];  softmax: [softmax(u), softmax(-u)]
//                       (each half its own softmax, paper 004 eq. 5, LoLCATs);  softmax-joint:
//                       softmax([u, -u]) over all 2d' outputs (flash-linear-attention)
//   t2r                 ReLU(x W + b), W [d, M]; init random (N(0, 1/d)) | identity (W_im =     features
//                       [m mod d == i]), b = 0
//   elu                 1 + ELU(x)                                                             d
//   relu                ReLU(x)                                                                d
//   exp                 exp(t x), temperature t                                                d
//   taylor2             [1, x/d^(1/4), vec(x x^T)/(sqrt(2) sqrt(d))]: phi(q).phi(k) = 1+s+s^2/2  1 + d + d^2
//   cosformer           [ReLU(x_i) cos(pi i / 2H), ReLU(x_i) sin(pi i / 2H)] (i = position)     2d
//   flex-stationary     exp(|x|^2 / e^tau) / sqrt(n) [cos(w.x), sin(w.x)]; w [n, d], tau        features = 2n
//   flex-nonstationary  exp(|x|^2 / e^tau) / sqrt(n) [cos(w1'.x) cos(w2'.x), sin(w1'.x) cos(w2'.x)]
//                       with w1' = (w1 + w2)/2, w2' = (w1 - w2)/2; w1, w2 [n, d], tau          features = 2n
//
// What each family is (trainable, pairs of features, the sign of its features and kernel values,
// fixed size, default budget) is its row of one table, map_family.h. The trainable families
// (learned-prf, hedgehog, t2r, flex-*) are written once, stacked over heads (stacked_maps.h): a map
// of theirs is one head of a stack.
//
// The random and PRF maps are unbiased estimators of K: E[phi(q).phi(k)] = exp(q.k / sqrt(d)). The
// Fourier maps (flex-*) can give negative kernel values; linear_map() clamps them (attention/attention.h).
//
// Positions for cosformer: x is read as a sequence [..., L, d] and token i is the index along dim -2
// (0-based); the horizon H is FeatureMapSpec::horizon, or the L of each call when that is 0. A 1-D
// input [d] is one token at position 0. cosformer_features() takes explicit positions instead.
//
// Features are computed in the input's floating dtype (parameters are cast to it).
// query_features() returns phi itself, exactly as defined: what training differentiates. For the
// exponential maps (prf*, learned-prf, hedgehog exp, exp, flex-*) phi under- or overflows once
// |x|^2 / sqrt(d) reaches a few hundred (float64) or about 88 (float32), which real heads reach.
// scaled_query_features() returns the same phi as exp(log_scale) * values (features.h) with values
// in range: the largest exponent of each vector is taken out (prf*, learned-prf, hedgehog exp,
// exp), or the norm factor exp(|x|^2 / e^tau) / sqrt(n) (flex-*). The other maps return
// {phi, 0}. Analysis (linear_map, linear_attention_output, compute_head_metrics) takes these.
// One scale per vector: a feature more than ~745 (float64) below its vector's largest becomes 0 in
// values. That loses nothing for the PRF family at |x|^2 / sqrt(d) in the thousands (its exponents
// spread over a few hundred), but exp(t x) with t |x_i| in the hundreds can drop a feature that
// another vector's largest feature would have met.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/attention/features.h"
#include "attnscope/attention/leverage_init.h"

namespace attnscope {

class FeatureMap {  // phi: [..., d] -> [..., M]
 public:
  virtual ~FeatureMap();
  virtual std::string name() const = 0;   // one of feature_map_names()
  virtual int64_t input_dim() const = 0;  // d
  virtual int64_t feature_dim() const = 0;  // M
  // x: floating [..., d]. Throws Error when the last dimension is not d.
  virtual at::Tensor query_features(const at::Tensor& x) const = 0;
  // Equal to query_features except for maps with separate (untied) query and key parameters.
  virtual at::Tensor key_features(const at::Tensor& x) const;
  // phi as exp(log_scale) * values, log_scale [..., 1] (see above); {phi, 0} unless overridden.
  virtual Features scaled_query_features(const at::Tensor& x) const;
  virtual Features scaled_key_features(const at::Tensor& x) const;
  // The learnable tensors by name ("z", "alpha", "W", "q.W", "tau", ...); empty for fixed maps. The
  // tensors are the map's own (shared storage): a trainer may set requires_grad on them and update
  // them in place, and the map sees the change.
  virtual std::vector<std::pair<std::string, at::Tensor>> named_parameters();
  // The tensors of named_parameters(), in the same order.
  virtual std::vector<at::Tensor> parameters();
};

// The largest feature dimension M attnscope takes anywhere (command lines, allocation files,
// job.json, converted models): 64 times the largest head dimension of today's models, far above
// any useful M (paper 000's DoF dimensions reach 277), and small enough that one head's maps and
// their training state stay within a workstation's memory.
constexpr int64_t kMaxFeatureDim = 16384;
// M in [1, kMaxFeatureDim]: else Error with quantity "feature dimension", saying where it came from.
void check_feature_dim(int64_t m, const std::string& where);

struct FeatureMapSpec {
  std::string name;
  int64_t d = 0;          // input (head) dimension
  int64_t features = 0;   // M. Required (> 0) where M is a choice; 0 or the natural size for the
                          // fixed-size maps (elu, relu, exp: d; taylor2: 1+d+d^2; cosformer: 2d)
  uint64_t seed = 0;      // every random draw derives from it: same spec, same map
  // Initialization; "" = the family's default (first listed).
  //   learned-prf: gaussian | orthogonal | leverage;  hedgehog: identity | random;
  //   t2r: random | identity;  flex-stationary: gaussian;
  //   flex-nonstationary: gaussian (w1 = w2 ~ N(0, I/sqrt d): exactly the softmax random-Fourier
  //   estimator; note the gradient along w1 - w2 is zero there) | independent (w1, w2 independent:
  //   an estimator of (K + 1) / 2).
  std::string init;
  bool tied = true;              // hedgehog, t2r: one layer for queries and keys, or two
  std::string activation = "exp";  // hedgehog: exp | softmax | softmax-joint
  double temperature = 1.0;      // exp: t in exp(t x)
  int64_t horizon = 0;           // cosformer: H (> 0), or 0 = the sequence length of each call
  // learned-prf with init "leverage": the captured vectors x_j [J, d] and the options.
  at::Tensor data;
  LeverageOptions leverage;
};

// Throws Error for an unknown name (listing the valid ones), M <= 0 where M is a choice, a
// features value that contradicts a fixed size, d <= 0, or an init the family does not know.
std::unique_ptr<FeatureMap> make_feature_map(const FeatureMapSpec& spec);

// Every name make_feature_map accepts, in the order of the table above (map_family.h's rows).
std::vector<std::string> feature_map_names();

// True for the maps whose feature dimension follows from d (elu, relu, exp, taylor2, cosformer);
// every other map needs M from the user. False for unknown names.
bool feature_map_has_fixed_size(const std::string& name);

// A learned-prf map with the given parameters (z [M, d], alpha [M]); e.g. from leverage_init() or
// read back from a converted model. The tensors are used as they are (not copied).
std::unique_ptr<FeatureMap> make_learned_prf(at::Tensor z, at::Tensor alpha);

// cosFormer features at explicit positions: x [..., L, d], positions [L] (any real values), H > 0.
at::Tensor cosformer_features(const at::Tensor& x, const at::Tensor& positions, double horizon);

}  // namespace attnscope
