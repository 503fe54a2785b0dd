// Everything a researcher reads off the heads of a capture, in one pass over its layers: the
// softmax map's entropy, monotonicity and distance to structured mixers, and, for a chosen feature
// map, how well its linear map imitates softmax. The softmax map is the one the model ran: with
// the captured model's sliding window (CaptureStore::sliding_window, Mistral) where it has one. The CLI's `metrics`, `maps` and `report` and the
// GUI all call this; none of them computes a metric itself.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/capture/capture.h"
#include "attnscope/analysis/head_metrics.h"
#include "attnscope/base/progress.h"
#include "attnscope/analysis/structured_mixers.h"
#include "attnscope/attention/head.h"

namespace attnscope {

struct AnalysisOptions {
  std::string feature_map;  // "" = softmax only; else a name from feature_map_names()
  int64_t features = 0;     // M for the feature map (0 = its natural size where it has one)
  int64_t window = 0;       // hybrid heads (SPEC 5): softmax over the last W keys beside the map, balance 1/2;
                            // 0 = the map alone; W >= L: softmax's map exactly. Negative, or beside a map
                            // whose kernel values can be negative (head.h's check_head): Error ("window");
                            // with mixer_state, also W of the mixers' window class (MixerFitOptions::window)
  Decay decay = Decay::None;  // fixed: each head's map decayed by the decay fitted to its softmax by lag
                             // (fit_decay_to_softmax: where training's --decay-init fit starts)
  uint64_t seed = 0;        // feature-map draws (combined with layer and head) and sampled pairs
  int max_seqs = 0;         // use the first n windows of the capture (0 = all)
  int64_t mixer_state = 0;  // N for the structured-mixer distances (0 = skip them; first window)
  int64_t mixer_iterations = 25;
  // The mixer distances are of the map of the first P = mixer_tokens tokens of the first window:
  // its top-left P x P block, which (causal) is exactly the softmax map of that prefix. The fits
  // grow ~L^3 (4.5 s per head at L = 512, 2-core VM): a long window's whole map would take about a
  // minute per head. 0 or >= L: the whole window. MixerDistances::tokens records the P used.
  int64_t mixer_tokens = kDefaultMixerTokens;
  static constexpr int64_t kDefaultMixerTokens = 256;
  // Query positions per window at which the row metrics are measured (head_metrics.h, "Sampled
  // rows"), R per head, the same in every window: the first R / 4 positions (the census), and
  // R - R / 4 of the later ones drawn without replacement, census + sample_without_replacement(L -
  // R / 4, R - R / 4, derive_seed(derive_seed(seed, layer, head), kRowSampleStream)).
  // 0 or >= L: every row (exact). The softmax map's entropies are always exact (all rows, from
  // logsumexp); its monotonicity and every linear-map row metric (entropy, monotonicity, KL,
  // cross-entropy, output error, non-positive rows) are estimates with standard errors when R < L.
  int64_t sample_rows = kDefaultSampleRows;
  static constexpr int64_t kDefaultSampleRows = 128;
  static constexpr uint64_t kRowSampleStream = 0x726f7773;  // "rows"
};

struct HeadAnalysis {
  int layer = 0, head = 0;
  HeadMetrics softmax;                   // of the softmax map
  std::optional<HeadMetrics> linear;     // the linear map, against softmax
  std::optional<MixerDistances> mixers;  // of the softmax map of the first window
  // Tokens 1 / (1 - a) of the decay fitted to the softmax map by lag over the windows' (sampled)
  // rows (fit_decay_by_lag): how fast a decayed head that matches it forgets; +inf: no decay fits
  // (attention to old keys, e.g. a sink), NaN: not measured.
  double decay_length = std::numeric_limits<double>::quiet_NaN();
};

// A head's structured-mixer distances (HeadAnalysis::mixers): of the softmax map (within the
// model's sliding window W, 0 = none) of the first opt.mixer_tokens tokens of the first window of
// q, k [T, L, d], at state size opt.mixer_state (>= 1) and opt.mixer_iterations. The mixer panel
// and training's --decay mixer (head_decays_for) read it.
MixerDistances head_mixer_distances(const at::Tensor& q, const at::Tensor& k, int64_t W, const AnalysisOptions& opt);

// The softmax side of each head (HeadAnalysis::softmax and mixers), which no feature-map option
// changes: analysing the same capture again with another feature map, M or window through the same
// cache computes only the linear side. Thread-safe (a job fills it while the GUI starts the next).
// It holds one capture's heads under one set of the options the softmax side depends on (seed,
// max_seqs, sample_rows, mixer_state, mixer_iterations, mixer_tokens, and with mixers the window: their
// window class); an analysis under others clears it first.
class SoftmaxSideCache {
 public:
  // The capture and the options the softmax side depends on, as one string.
  static std::string key(const CaptureStore& store, const AnalysisOptions& opt);
  // The head's softmax side when stored under `key`.
  std::optional<HeadAnalysis> find(const std::string& key, int layer, int head) const;
  void store(const std::string& key, const HeadAnalysis& head);
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::string key_;
  std::map<std::pair<int, int>, HeadAnalysis> heads_;
};

// Layer by layer (one layer's q, k, v in memory); the heads of a layer in parallel, one per thread
// (at::get_num_threads()), each result independent of the thread count. Throws Error for an unknown feature
// map. `progress` is called after every head and before each head's linear side (each call is a
// cancellation point: at most one head's softmax or linear side, ~T x L rows, runs between two).
// With `cache`, heads found there skip their softmax side, and computed ones are stored.
std::vector<HeadAnalysis> analyze_capture(const CaptureStore& store, const AnalysisOptions& opt,
                                          const ProgressFn& progress = nullptr, SoftmaxSideCache* cache = nullptr);

// Exact entropies of the causal softmax rows of one head, from logsumexp without materializing
// more than one window's [L, L] scores: H_i = lse_i - sum_j A_ij s_ij. q, k [T, L, d] (or [L, d]),
// float64 -> [T, L] (or [L]). `window` > 0: the model's sliding window (row i over keys i - j < W).
at::Tensor softmax_row_entropies(const at::Tensor& q, const at::Tensor& k, int64_t window = 0);

// The maps of one head on one window (sequence) of the capture, materialized L x L for display.
struct HeadMaps {
  at::Tensor softmax;  // float64 [L, L], within the captured model's sliding window (CaptureStore::sliding_window)
  at::Tensor linear;   // float64 [L, L], undefined without a feature map; the hybrid map with a window
  double nonpositive_row_fraction = 0;  // of the linear map (attention/attention.h)
  std::vector<int64_t> ids;  // the window's tokens
};
HeadMaps head_maps(const CaptureStore& store, int layer, int head, int seq, const AnalysisOptions& opt);

}  // namespace attnscope
