// Everything a researcher reads off the heads of a capture, in one pass over its layers: the
// softmax map's entropy, monotonicity and distance to structured mixers, and, for a chosen feature
// map, how well its linear map imitates softmax. The CLI's `metrics`, `maps` and `report` and the
// GUI all call this; none of them computes a metric itself.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/capture/capture.h"
#include "attnscope/analysis/head_metrics.h"
#include "attnscope/base/progress.h"
#include "attnscope/analysis/structured_mixers.h"

namespace attnscope {

struct AnalysisOptions {
  std::string feature_map;  // "" = softmax only; else a name from feature_map_names()
  int64_t features = 0;     // M for the feature map (0 = its natural size where it has one)
  int64_t window = 0;       // hybrid heads (SPEC 5): softmax over the last W keys beside the map, balance 1/2;
                            // 0 = the map alone; W >= L: softmax's map exactly. Negative: Error ("window")
  uint64_t seed = 0;        // feature-map draws (combined with layer and head) and sampled pairs
  int max_seqs = 0;         // use the first n windows of the capture (0 = all)
  int64_t mixer_state = 0;  // N for the structured-mixer distances (0 = skip them; first window)
  int64_t mixer_iterations = 25;
};

struct HeadAnalysis {
  int layer = 0, head = 0;
  HeadMetrics softmax;                   // of the softmax map
  std::optional<HeadMetrics> linear;     // the linear map, against softmax
  std::optional<MixerDistances> mixers;  // of the softmax map of the first window
};

// Layer by layer (one layer's q, k, v in memory). Throws Error for an unknown feature map.
std::vector<HeadAnalysis> analyze_capture(const CaptureStore& store, const AnalysisOptions& opt,
                                          const ProgressFn& progress = nullptr);

// The maps of one head on one window (sequence) of the capture, materialized L x L for display.
struct HeadMaps {
  at::Tensor softmax;  // float64 [L, L]
  at::Tensor linear;   // float64 [L, L], undefined without a feature map; the hybrid map with a window
  double nonpositive_row_fraction = 0;  // of the linear map (attention/attention.h)
  std::vector<int64_t> ids;  // the window's tokens
};
HeadMaps head_maps(const CaptureStore& store, int layer, int head, int seq, const AnalysisOptions& opt);

}  // namespace attnscope
