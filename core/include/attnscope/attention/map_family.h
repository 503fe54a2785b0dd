// The feature-map families (SPEC 5's zoo), one row each, in one array (map_family.cpp, as llama.cpp's
// llama-arch.cpp): whatever attnscope asks of a map by its name, it reads from that row.
//
//   name                trainable  even M: pairs of                      features      kernel >= 0  fixed size  budget
//   prf                                                                  positive      yes                      d
//   prf-orthogonal                                                       positive      yes                      d
//   prf-hyperbolic                 [exp(w.x' - |x'|^2/2), exp(-w.x' ...)] positive      yes                      d
//   learned-prf         yes                                              positive      yes                      d
//   hedgehog            yes        [exp(u), exp(-u)]                     positive      yes                      2 d
//   t2r                 yes                                              non-negative  yes                      d
//   elu                                                                  positive      yes          d           d
//   relu                                                                 non-negative  yes          d           d
//   exp                                                                  positive      yes          d           d
//   taylor2                                                              signed        yes          1 + d + d^2 d
//   cosformer (positional)                                               non-negative  yes          2 d         d
//   flex-stationary     yes        [cos, sin]                            signed        no                       d
//   flex-nonstationary  yes        [cos, sin]                            signed        no                       d
//
// d = head dimension; "budget" is the default mean feature dimension of a strategy. feature_map_names()
// (feature_map.h) lists the rows' names.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnscope {

enum class MapId {
  Prf, PrfOrthogonal, PrfHyperbolic, LearnedPrf, Hedgehog, T2r, Elu, Relu, Exp, Taylor2, Cosformer,
  FlexStationary, FlexNonstationary
};

// The sign of a map's features, which decides how a kernel is formed from them.
enum class MapFeatures {
  Positive,     // every feature > 0: log phi is finite, so kernels are formed in the log domain
  NonNegative,  // >= 0 with exact zeros (ReLU): kernels are formed from phi itself
  Signed,       // either sign: kernel values that come out negative are clamped at 0 (SPEC 5)
};

struct MapFamily {
  MapId id;
  const char* name;
  bool trainable;          // distill trains it (its maps are stacked_maps.h's)
  const char* pairs;       // needs an even M, its features being these pairs; nullptr: any M
  MapFeatures features;
  bool nonnegative_kernel; // phi(q).phi(k) >= 0 for every q, k: hybrid heads take it (head.h)
  bool fixed_size;         // M follows from d (feature_map.h's table)
  bool positional;         // reads token positions: cannot run in a converted model
  int budget_per_head_dim; // the default budget (mean M of a strategy), in multiples of d
};

// The row of `name`; Error (where "feature map") for an unknown name, listing the valid ones.
const MapFamily& map_family(const std::string& name);

// The names of the trainable families, in the table's order.
std::vector<std::string> trainable_map_names();

// The budget a strategy allocates by default for `map` at head dimension d (linearize's, and a new
// model's in the workbench): budget_per_head_dim x d.
int64_t default_budget(const std::string& map, int64_t head_dim);

}  // namespace attnscope
