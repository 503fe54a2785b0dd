#include "attnscope/allocation/allocation_tables.h"

#include <algorithm>
#include <functional>

namespace attnscope {

namespace {

std::vector<bool> top3(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < v.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] > v[b]; });
  std::vector<bool> b(v.size(), false);
  for (size_t i = 0; i < idx.size() && i < 3; ++i) b[idx[i]] = true;
  return b;
}

}  // namespace

Table allocation_table(const std::string& model, const std::vector<Allocation>& allocations,
                       const std::vector<std::vector<DofConvergence>>& convergence) {
  Table t;
  t.caption = "Feature dimension of each layer (Algorithm 1; layers numbered from 0, the three largest in bold); Cost = the budget C, Mean = the mean dimension actually used.";
  std::string layers;
  int64_t most = 0;
  for (size_t s = 0; s < convergence.size(); ++s) {
    std::string heads;
    for (size_t h = 0; h < convergence[s].size(); ++h) {
      const DofConvergence& c = convergence[s][h];
      if (!c.unconverged()) continue;
      heads += (heads.empty() ? "" : ", ") + std::to_string(h);
      most = std::max(most, c.samples);
    }
    if (!heads.empty()) layers += (layers.empty() ? "" : "; ") + std::to_string(s) + " (heads " + heads + ")";
  }
  if (!layers.empty())
    t.caption += " Rests on unconverged DoF: layers " + layers + " have heads whose DoF still moves by more than " +
                 fmt_number(100 * kDofConvergenceTolerance, 0) + "% between J/2 and J at the J they ended with (at most " +
                 std::to_string(most) + "), so these dimensions depend on J.";
  t.header = {"Model", "Strategy", "Cost"};
  const size_t S = allocations.empty() ? 0 : allocations.front().dims.size();
  for (size_t s = 0; s < S; ++s) t.header.push_back(std::to_string(s));
  t.header.push_back("Mean");
  // Under a state budget: the heads kept softmax and the state per sequence against the original's cache.
  const bool typed = std::any_of(allocations.begin(), allocations.end(), [](const Allocation& a) { return !a.types.empty(); });
  if (typed) {
    t.header.push_back("Softmax heads");
    t.header.push_back("State bytes (of KV)");
    t.caption += " Under a state budget the heads with the largest DoF stay softmax (their layer's dimension counts the "
                 "map heads only); State = bytes per sequence at the budget's context, and its share of the original's "
                 "key-value cache there.";
  }
  for (const Allocation& a : allocations) {
    const auto dims = a.layer_dims();
    std::vector<std::string> row = {model, alloc_strategy_name(a.strategy), fmt_number(a.budget, 0)};
    std::vector<double> values;
    for (int64_t m : dims) {
      row.push_back(std::to_string(m));
      values.push_back(double(m));
    }
    row.push_back(fmt_number(a.mean_cost, 1));
    if (typed) {
      const int64_t kept = softmax_head_count(a.types);
      row.push_back(a.types.empty() ? "" : std::to_string(kept));
      row.push_back(a.types.empty() ? "" : std::to_string(a.state_bytes) + " (" +
                                               fmt_number(100.0 * double(a.state_bytes) / double(std::max<int64_t>(1, a.original_bytes)), 1) + "%)");
    }
    std::vector<bool> b = {false, false, false};
    // Nothing to highlight when every layer got the same (fix, or dof-clip with every layer clipped).
    if (std::adjacent_find(values.begin(), values.end(), std::not_equal_to<>()) != values.end()) {
      const auto t3 = top3(values);
      b.insert(b.end(), t3.begin(), t3.end());
    }
    t.add_row(row, b);
  }
  return t;
}

Table dof_grid_table(const std::vector<std::vector<DofValue>>& head_dof, double lambda,
                     const std::vector<std::vector<DofConvergence>>& convergence) {
  Table t;
  t.caption = "DoF with lambda = " + fmt_lambda(lambda) + " of each head; the maximum of each layer in bold.";
  const bool conv = !convergence.empty();
  if (conv)
    t.caption += " Unconverged: heads whose DoF at J differs from that at J/2 by more than " +
                 fmt_number(100 * kDofConvergenceTolerance, 0) + "% (they need a larger J).";
  t.header = {"Layer"};
  const size_t H = head_dof.empty() ? 0 : head_dof.front().size();
  for (size_t h = 0; h < H; ++h) t.header.push_back(std::to_string(h));
  if (conv) t.header.push_back("Unconverged");
  for (size_t s = 0; s < head_dof.size(); ++s) {
    std::vector<std::string> row = {std::to_string(s)};
    size_t best = 0;
    for (size_t h = 0; h < H; ++h) {
      row.push_back(fmt_number(head_dof[s][h].value, 1));
      if (head_dof[s][h].value > head_dof[s][best].value) best = h;
    }
    if (conv) {
      std::string heads;
      for (size_t h = 0; h < H && s < convergence.size() && h < convergence[s].size(); ++h)
        if (convergence[s][h].unconverged()) heads += (heads.empty() ? "" : ", ") + std::to_string(h);
      row.push_back(heads.empty() ? "-" : heads);
    }
    std::vector<bool> b(row.size(), false);
    if (H) b[best + 1] = true;
    t.add_row(row, b);
  }
  return t;
}

Table head_dims_table(const Allocation& a) {
  Table t;
  t.caption = "Feature dimension of each head (per-head allocation, budget " + fmt_number(a.budget, 0) + ").";
  t.header = {"Layer"};
  const size_t H = a.dims.empty() ? 0 : a.dims.front().size();
  for (size_t h = 0; h < H; ++h) t.header.push_back(std::to_string(h));
  for (size_t s = 0; s < a.dims.size(); ++s) {
    std::vector<std::string> row = {std::to_string(s)};
    for (int64_t m : a.dims[s]) row.push_back(std::to_string(m));
    t.add_row(row);
  }
  return t;
}

}  // namespace attnscope
