// Feature dimensions per layer (or head) under a cost budget: Algorithm 1 of paper 000 and the
// variants of SPEC section 5.
//
//   N_s = max_h DoF_{s,h}                      the layer's DoF
//   fix       M_s = C
//   dof       M_s = round(C N_s / mean_s N_s)  mean cost C up to rounding
//   dof-clip  the dof dimensions clamped to at most head_dim, with no redistribution: the mean cost
//             falls below C (the paper's DoF + Clip)
//   per-head  M_{s,h} = round(C DoF_{s,h} / mean over all heads of DoF): the same total budget
//             spread over heads (the paper's stated future work)
//
// Every dimension is at least 1; with multiple > 1 every one is rounded to the nearest multiple
// (at least `multiple`) instead of the nearest integer. An all-zero DoF table is refused rather than
// silently replaced by `fix`: the exp kernel's Gram has a positive diagonal, so a zero DoF everywhere
// means the input is broken.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/analysis/dof.h"
#include "attnscope/attention/head.h"

namespace attnscope {

enum class AllocStrategy { Fix, Dof, DofClip, PerHead };
AllocStrategy parse_alloc_strategy(const std::string& name);  // one of alloc_strategy_names(); else Error
const char* alloc_strategy_name(AllocStrategy s);
std::vector<std::string> alloc_strategy_names();  // fix, dof, dof-clip, per-head

// Head types under a state budget (issue 28; SPEC 5's head types and their state): with a budget of
// B bytes per sequence at context T (state_budget, or state_share of the original's key-value cache
// there), every head starts as a map head, map_head_type(window) at Algorithm 1's dimension, and
// heads are kept softmax (exact, their cache over the whole context) in order of decreasing DoF while
// the model's state fits B. The predicted loss this minimises is the sum of the DoF of the heads
// left to a map: the DoF (at the allocation's lambda) measures how far a head is from what a map of
// few features reproduces, and a softmax head loses nothing. State per head is head_cost's (head.h):
// a softmax head keeps its keys and values per query head, as the converted model runs it; the
// original's cache counts each key/value head once.
struct StateBudget {
  int64_t bytes = 0;        // B; 0: use share
  double share = 0;         // of the original's key-value cache at T, in (0, 1]; 0: use bytes
  int64_t context = 0;      // T, tokens per sequence the state is counted at
  int64_t window = 0;       // W of the map heads (0: linear heads)
  int64_t kv_heads = 0;     // the original's key/value heads per layer (0: one per query head)
  int64_t value_bytes = 4;  // bytes per value of the cache and the state (float32)
  bool given() const { return bytes > 0 || share > 0; }
};

struct AllocOptions {
  AllocStrategy strategy = AllocStrategy::Dof;
  int64_t budget = 64;    // C, the mean feature dimension of the fixed baseline
  int64_t head_dim = 64;  // d, the dof-clip cap
  int64_t multiple = 1;   // round every dimension to a multiple of this (8 suits tensor cores)
  StateBudget state;      // head types under a state budget when given
};

struct Allocation {
  AllocStrategy strategy = AllocStrategy::Dof;
  int64_t budget = 0;
  int64_t multiple = 1;
  std::vector<std::vector<int64_t>> dims;  // [S][H]: every head of a layer the same except per-head
  std::vector<double> layer_dof;           // N_s (max over heads)
  double mean_cost = 0;                    // mean over all heads of Algorithm 1's dims
  // Under a state budget: each head's type (dims 0 for softmax heads), the converted model's state
  // and the original's key-value cache per sequence at the budget's context, in bytes, and the
  // predicted loss (the DoF of the heads left to a map). Empty types and 0 without a budget.
  std::vector<std::vector<HeadType>> types;
  int64_t state_bytes = 0, original_bytes = 0;
  double predicted_loss = 0;
  // Why a state budget gave no types (the workbench's share below the cheapest model); "" otherwise.
  std::string state_note;

  std::vector<int64_t> layer_dims() const;  // per layer: dims[s][0], or the layer max for per-head
};

// The rule of StateBudget, on any per-head measure of how much a head loses to its map (`loss`
// [S][H]: the DoF, or stage 1's attention KL per head): every head a map head at dims[s][h], then the
// heads of largest loss kept softmax while the state fits the budget. Returns the types; `state_bytes`
// and `original_bytes` (optional) get the model's state and the original's cache per sequence. Error
// (quantity "state budget") for a budget below the cheapest model or above the original's cache.
std::vector<std::vector<HeadType>> keep_exact_under(const StateBudget& budget, const std::vector<std::vector<double>>& loss,
                                                    const std::vector<std::vector<int64_t>>& dims, int64_t head_dim,
                                                    int64_t* state_bytes = nullptr, int64_t* original_bytes = nullptr);

// head_dof: [S][H], finite and non-negative, every layer with the same H >= 1. Throws Error for bad
// input (empty, ragged, NaN, negative, all zero with a DoF strategy) or options (budget < 1,
// multiple < 1, head_dim < 1); under a state budget, for a budget below the cheapest model (every
// head a map head) or above the original's cache, or without a context (quantity "state budget").
Allocation allocate(const std::vector<std::vector<double>>& head_dof, const AllocOptions& options);

// Everything one lambda and one allocation choice give from a model's spectra: the DoF of every
// head (with its fast-path bounds), its convergence between J/2 and J, the heads whose bounds are
// wider than 1% (the allocation uses their midpoints), and Algorithm 1's dimensions. Every caller
// (`allocate`, `report`, `distill --strategy`, `compare`, the DoF view's sliders) composes them here.
struct DofAllocation {
  double lambda = kDefaultLambda;
  std::vector<std::vector<DofValue>> head_dof;           // [S][H]
  std::vector<std::vector<DofConvergence>> convergence;  // [S][H]
  std::vector<WideBound> wide_bounds;
  Allocation allocation;

  std::vector<std::pair<int, int>> unconverged_heads() const;  // (layer, head) flagged by convergence
};

// options.head_dim is the spectra's (the dof-clip cap). Throws Error for a bad lambda or options.
DofAllocation allocation_at(const DofSpectra& spectra, double lambda, AllocOptions options);

// `at`'s DoF, convergence and bounds (one lambda) under another budget, strategy or multiple: only
// allocate() runs, O(S H) instead of allocation_at's O(S H J) (the DoF view's budget slider).
// Equal to allocation_at(spectra, at.lambda, options) for the spectra `at` came from.
DofAllocation reallocate(DofAllocation at, int64_t head_dim, AllocOptions options);

}  // namespace attnscope
