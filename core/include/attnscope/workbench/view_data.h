// What the workbench's views draw, computed here so that the views only draw it (docs/ARCHITECTURE.md:
// views draw only, app wires): the per-head values that tint the heads grid, the metrics view's
// layer x head heatmaps with their colour ranges and its histograms over common bins, the DoF view's
// curve of DoF against lambda, and one colour range shared by the softmax and linear maps of a head.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/workbench/session.h"

namespace attnscope {

// [S][H] of one value per head; NaN where there is none.
using HeadValues = std::vector<std::vector<double>>;

// The values of `metric` for every head of an S x H capture from analyze_capture's result and the
// DoF allocation (null: none yet). All NaN when the metric needs what is not there (a linear map,
// spectra).
HeadValues grid_metric_values(GridMetric metric, const std::vector<HeadAnalysis>& analysis,
                              const DofAllocation* dof, int layers, int heads);
// The metrics that have values now, in grid_metric_names() order.
std::vector<GridMetric> available_grid_metrics(const std::vector<HeadAnalysis>& analysis, const DofAllocation* dof);

// One layer x head (or head x class) heatmap: its values and its colour range (lo < hi).
struct ValueGrid {
  HeadValues values;
  double lo = 0, hi = 1;
};

// The metrics view: softmax and linear entropy on one colour range (so they compare by colour),
// the linear map's monotonicity on [-1, 1] and its discordant pairs on [0, 1] (softmax's are 1 and
// 0 for every head, by construction: nothing to show), KL from 0, the entropies' histograms over
// common bins, and the structured-mixer distances (one row per head, "L0 H1", one column per class).
struct MetricsFigures {
  bool has_analysis = false;  // any head measured
  bool has_linear = false;    // a feature map's linear map measured
  ValueGrid softmax_entropy, linear_entropy, linear_monotonicity, linear_discordant, kl;
  Histogram softmax_histogram, linear_histogram;  // the same edges; linear empty without a map
  bool has_mixers = false;
  int64_t mixer_state = 0;
  int64_t mixer_window = 0;          // W of the window class (0: not measured, no column)
  ValueGrid mixers;                  // [S H][6, or 7 with the window class]
  std::vector<std::string> mixer_rows;     // "L0 H0", ...
  std::vector<std::string> mixer_classes;  // Toeplitz, causal low-rank, RetNet decay, SSD, SSD + D, semiseparable[, window W + SSD]
  // Each head's best student (best_student: the row name ends "→ none|fixed|gated", "→ window + gated"
  // etc.), counted per Decay (none, fixed, gated) and with a window, and the --decay most heads point at
  // ("most heads: --decay X").
  std::array<int, 3> mixer_students{};
  int mixer_windows = 0;
  std::string mixer_advice;
};
MetricsFigures metrics_figures(const std::vector<HeadAnalysis>& analysis, int layers, int heads);

// Histograms of several series over common bins: `bins` equal bins over the finite values of all
// of them (one bin when they are all equal). Every histogram has the same edges; empty ones when no
// value of any series is finite. A series with no finite value gets the edges and zero counts.
std::vector<Histogram> common_histograms(const std::vector<std::vector<double>>& series, int bins);
// The number of bins of a histogram of n per-head values: sqrt(n) + 2, in 5..24.
int histogram_bins(size_t n);

// DoF against lambda for one head (panel (c) of the DoF view): at each lambda, the head's DoF, its
// J/2 subset's (empty without one) and the largest DoF over the heads of its layer.
struct DofCurve {
  std::vector<double> lambdas, head, half, layer_max;
};
DofCurve dof_curve(const DofSpectra& spectra, int layer, int head, const std::vector<double>& lambdas);
// How many of a head's kept eigenvalues are above lambda (as dof_at compares them).
int64_t eigenvalues_above(const HeadSpectrum& spectrum, double lambda);

// One colour range for a head's softmax and linear maps in `scale` (the union of map_image's
// ranges of both), so that the two compare by eye; the softmax map's alone without a linear map.
std::pair<double, double> shared_map_range(const HeadDetail& view, ColourScale scale);

}  // namespace attnscope
