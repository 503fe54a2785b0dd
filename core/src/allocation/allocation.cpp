// Algorithm 1 of paper 000 and its variants; the definitions are in allocation.h.
#include "attnscope/allocation/allocation.h"

#include <algorithm>
#include <cmath>

#include "attnscope/attention/feature_map.h"
#include "attnscope/base/error.h"
#include "attnscope/base/names.h"

namespace attnscope {
namespace {

constexpr const char* kAllocateWhere = "allocate";

// The nearest integer (or multiple of m) to t, at least 1 (or m).
int64_t round_dim(double t, int64_t m) {
  return std::max<int64_t>(m, m * std::llround(t / double(m)));
}

}  // namespace

constexpr Named<AllocStrategy> kStrategies[] = {{AllocStrategy::Fix, "fix"},
                                                {AllocStrategy::Dof, "dof"},
                                                {AllocStrategy::DofClip, "dof-clip"},
                                                {AllocStrategy::PerHead, "per-head"}};

std::vector<std::string> alloc_strategy_names() { return names_of(kStrategies); }
AllocStrategy parse_alloc_strategy(const std::string& name) { return parse_name(kStrategies, name, "strategy"); }
const char* alloc_strategy_name(AllocStrategy s) { return name_of(kStrategies, s); }

std::vector<int64_t> Allocation::layer_dims() const {
  std::vector<int64_t> out;
  for (const auto& row : dims) out.push_back(row.empty() ? 0 : *std::max_element(row.begin(), row.end()));
  return out;
}

Allocation allocate(const std::vector<std::vector<double>>& head_dof, const AllocOptions& opt) {
  if (opt.budget < 1 || opt.budget > kMaxFeatureDim)
    fail_value("budget", "(cost C) " + std::to_string(opt.budget) + " is outside 1.." + std::to_string(kMaxFeatureDim) +
                             ", the feature dimensions attnscope takes");
  if (opt.multiple < 1) fail(kAllocateWhere, "the rounding multiple must be at least 1, got " + std::to_string(opt.multiple));
  if (opt.head_dim < 1) fail(kAllocateWhere, "the head dimension must be at least 1, got " + std::to_string(opt.head_dim));
  if (head_dof.empty()) fail(kAllocateWhere, "no layers to allocate");
  const size_t S = head_dof.size(), H = head_dof[0].size();
  if (H == 0) fail(kAllocateWhere, "layer 0 has no heads");
  double total = 0;
  for (size_t s = 0; s < S; ++s) {
    if (head_dof[s].size() != H)
      fail(kAllocateWhere, "layer " + std::to_string(s) + " has " + std::to_string(head_dof[s].size()) + " heads, layer 0 has " + std::to_string(H));
    for (size_t h = 0; h < H; ++h) {
      const double v = head_dof[s][h];
      if (!std::isfinite(v) || v < 0)
        fail(kAllocateWhere, "DoF of layer " + std::to_string(s) + " head " + std::to_string(h) + " is " + std::to_string(v) + " (must be finite and >= 0)");
      total += v;
    }
  }

  Allocation a;
  a.strategy = opt.strategy;
  a.budget = opt.budget;
  a.multiple = opt.multiple;
  for (const auto& row : head_dof) a.layer_dof.push_back(*std::max_element(row.begin(), row.end()));
  const double C = double(opt.budget);
  const int64_t m = opt.multiple;
  if (opt.strategy != AllocStrategy::Fix && !(total > 0))
    fail(kAllocateWhere, "every head has DoF 0, so there is nothing to allocate in proportion to (the fix strategy needs no DoF)");

  a.dims.assign(S, std::vector<int64_t>(H, 0));
  if (opt.strategy == AllocStrategy::PerHead) {
    const double mean = total / double(S * H);
    for (size_t s = 0; s < S; ++s)
      for (size_t h = 0; h < H; ++h) a.dims[s][h] = round_dim(C * head_dof[s][h] / mean, m);
  } else {
    double mean = 0;
    for (double n : a.layer_dof) mean += n / double(S);
    // The clip cap respects the rounding multiple too (the largest multiple <= d, at least m).
    const int64_t cap = std::max<int64_t>(m, opt.head_dim / m * m);
    for (size_t s = 0; s < S; ++s) {
      int64_t M = opt.strategy == AllocStrategy::Fix ? round_dim(C, m) : round_dim(C * a.layer_dof[s] / mean, m);
      if (opt.strategy == AllocStrategy::DofClip) M = std::min(M, cap);
      std::fill(a.dims[s].begin(), a.dims[s].end(), M);
    }
  }
  double cost = 0;
  for (const auto& row : a.dims)
    for (int64_t M : row) cost += double(M);
  a.mean_cost = cost / double(S * H);
  if (opt.state.given()) {
    a.types = keep_exact_under(opt.state, head_dof, a.dims, opt.head_dim, &a.state_bytes, &a.original_bytes);
    for (size_t s = 0; s < S; ++s)
      for (size_t h = 0; h < H; ++h) {
        if (a.types[s][h] == HeadType::Softmax) a.dims[s][h] = 0;
        else a.predicted_loss += head_dof[s][h];
      }
  }
  return a;
}

std::vector<std::vector<HeadType>> keep_exact_under(const StateBudget& b, const std::vector<std::vector<double>>& loss,
                                                    const std::vector<std::vector<int64_t>>& dims, int64_t head_dim,
                                                    int64_t* state_bytes, int64_t* original_bytes) {
  const size_t S = dims.size(), H = S ? dims[0].size() : 0;
  if (loss.size() != S) fail(kAllocateWhere, "a loss for " + std::to_string(loss.size()) + " layers, dimensions for " + std::to_string(S));
  if (b.context < 1) fail_value("state budget", "needs the context length it is counted at (tokens per sequence)");
  if (b.window < 0 || b.window >= b.context)
    fail_value("state budget", "the window " + std::to_string(b.window) + " must be below the context " + std::to_string(b.context));
  if (b.value_bytes < 1) fail_value("state budget", "bytes per value must be at least 1");
  if (b.bytes > 0 && b.share > 0) fail_value("state budget", "give bytes or a share of the original's cache, not both");
  const int64_t d = head_dim, kv = b.kv_heads > 0 ? b.kv_heads : int64_t(H);
  const HeadType mapped = map_head_type(b.window);
  const auto bytes = [&](HeadType t, int64_t M) { return head_cost(t, d, d, b.context, M, b.window).state_values * b.value_bytes; };
  const int64_t original = int64_t(S) * kv * bytes(HeadType::Softmax, 0);
  const int64_t budget = b.bytes > 0 ? b.bytes : int64_t(std::floor(b.share * double(original)));
  if (budget > original)
    fail_value("state budget", std::to_string(budget) + " bytes per sequence is more than the original's key-value cache at " +
                                   std::to_string(b.context) + " tokens (" + std::to_string(original) + " bytes): keep the original");
  std::vector<std::vector<HeadType>> types(S, std::vector<HeadType>(H, mapped));
  int64_t used = 0;
  for (size_t s = 0; s < S; ++s) {
    if (dims[s].size() != H || loss[s].size() != H) fail(kAllocateWhere, "layer " + std::to_string(s) + " lists another number of heads");
    for (size_t h = 0; h < H; ++h) used += bytes(mapped, dims[s][h]);
  }
  if (used > budget)
    fail_value("state budget", std::to_string(budget) + " bytes per sequence is below the cheapest model of these maps: every head " +
                                   head_type_name(mapped) + " at its feature dimension keeps " + std::to_string(used) + " bytes");
  std::vector<std::pair<size_t, size_t>> order;
  for (size_t s = 0; s < S; ++s)
    for (size_t h = 0; h < H; ++h) order.emplace_back(s, h);
  std::stable_sort(order.begin(), order.end(), [&](const auto& x, const auto& y) { return loss[x.first][x.second] > loss[y.first][y.second]; });
  for (const auto& [s, h] : order) {
    const int64_t more = bytes(HeadType::Softmax, 0) - bytes(mapped, dims[s][h]);
    if (used + more > budget) continue;
    used += more;
    types[s][h] = HeadType::Softmax;
  }
  if (state_bytes) *state_bytes = used;
  if (original_bytes) *original_bytes = original;
  return types;
}

std::vector<std::pair<int, int>> DofAllocation::unconverged_heads() const {
  std::vector<std::pair<int, int>> out;
  for (size_t s = 0; s < convergence.size(); ++s)
    for (size_t h = 0; h < convergence[s].size(); ++h)
      if (convergence[s][h].unconverged()) out.emplace_back(int(s), int(h));
  return out;
}

DofAllocation allocation_at(const DofSpectra& spectra, double lambda, AllocOptions options) {
  DofAllocation a;
  a.lambda = lambda;
  a.head_dof = head_dofs(spectra, lambda);
  a.convergence = head_convergence(spectra, lambda);
  a.wide_bounds = wide_bounds(a.head_dof);
  options.head_dim = spectra.head_dim;
  a.allocation = allocate(dof_values(a.head_dof), options);
  return a;
}

DofAllocation reallocate(DofAllocation at, int64_t head_dim, AllocOptions options) {
  options.head_dim = head_dim;
  at.allocation = allocate(dof_values(at.head_dof), options);
  return at;
}

}  // namespace attnscope
