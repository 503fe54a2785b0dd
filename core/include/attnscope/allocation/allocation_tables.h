// The paper's two tables for any model: Table 1 (feature dimension per layer under a budget, one
// row per strategy) and Table 2 (DoF of every head, layer maximum highlighted).
#pragma once
#include <string>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/table.h"

namespace attnscope {

// Model | Strategy | Cost | 0 .. S-1 | Mean : the layer dimensions M_s (for per-head: the layer maximum);
// the three largest layers of each row bold, as the paper highlights them.
// With `convergence` ([S][H], head_convergence in dof.h) the caption says which layers' dimensions
// rest on unconverged DoF (a head of the layer still flagged at the J it ended with) and the
// largest J used: those dimensions depend on J.
Table allocation_table(const std::string& model, const std::vector<Allocation>& allocations,
                       const std::vector<std::vector<DofConvergence>>& convergence = {});

// Layer | 0 .. H-1 : DoF of each head at lambda (layers and heads numbered from 0, as everywhere in attnscope);
// each layer's maximum bold. With `convergence` ([S][H], head_convergence in dof.h) a last column
// lists the heads whose estimate has not converged ("-" when all have).
Table dof_grid_table(const std::vector<std::vector<DofValue>>& head_dof, double lambda,
                     const std::vector<std::vector<DofConvergence>>& convergence = {});

// Layer | 0 .. H-1 : the per-head feature dimensions of a per-head allocation.
Table head_dims_table(const Allocation& allocation);

}  // namespace attnscope
