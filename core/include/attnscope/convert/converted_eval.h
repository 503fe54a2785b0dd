// How close and how fast a converted model (SPEC 7) is against its original: `attnscope eval` on a
// converted model. The original is the same weights with softmax attention, so both share every
// other part of the network and the comparison isolates the attention.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/progress.h"
#include "attnscope/convert/faithfulness.h"

namespace attnscope {

class Model;

struct ConvertedEvalOptions {
  int seq_len = 0;                 // window length for loss and closeness; 0 = the context length
  // Closeness (attention KL, output error) reads the first `closeness_windows` full windows of
  // `seq_len` tokens (fewer when the text is shorter; the text's only window when it is shorter
  // than seq_len). It materializes L x L maps per head, so it is kept to a sample.
  int closeness_windows = 4;
  std::vector<int> speed_lengths;  // empty: default_speed_lengths(n_ctx)
  bool speed = true;               // false: no timings (e.g. the second length of `eval --seq-len a,b`)
  bool losses = true;              // false: no losses over the text (closeness only: linearize's per-head KL)
  double min_seconds = 0.2;        // each timing repeats until it has run this long (and >= 2 times)
  // Recall at distance and generation agreement (faithfulness.h) against `original` (default, null:
  // the converted model's own weights with softmax attention, which for a finetuned conversion is
  // not the model it was made from). Off: neither is measured.
  bool faithfulness = true;
  const Model* original = nullptr;
};

struct LayerCloseness {
  int layer = 0;
  // Mean over rows (all heads, all closeness windows) of KL(A || Ahat), A the original model's
  // softmax map and Ahat the head's linear map of the same q, k (teacher-forced: both from the
  // original model's activations). head_metrics.h conventions (undefined rows excluded).
  double attention_kl = 0;
  // ||Y_lin - Y||_F / ||Y||_F over all heads, rows and windows, Y the softmax attention output per
  // head and Y_lin = linear_attention_output of the same q, k, v (before the output projection).
  double output_rel_error = 0;
  // The same KL per head (its rows only): which heads lose most to their map (0 for softmax heads).
  std::vector<double> head_kl;
};

struct SpeedEntry {
  int seq_len = 0;
  bool generate = false;  // false: one batch forward of seq_len tokens; true: greedy generation of a
                          // seq_len-token sequence from a 1-token prompt (linear: the recurrent form;
                          // softmax: with a key-value cache, Model::generate_greedy)
  double softmax_tokens_per_s = 0;
  double linear_tokens_per_s = 0;
  // Extra bytes of tensors one run (a forward, or a whole generation) needs at its peak, above what
  // was live before it (the weights): memory_meter.h's PeakMemoryMeter. Measured in a separate,
  // untimed run so the meter's counting does not touch the timings.
  int64_t softmax_peak_bytes = 0, linear_peak_bytes = 0;
};

// Where in a window a model loses: positions first..last of every window (in powers of two: 0-63,
// 64-127, 128-255, ...). Losses are of predicting the token at a position (1 and up); the attention
// KL is the mean over the closeness windows' rows at those positions, all layers and heads.
struct PositionBucket {
  int first = 0, last = 0;
  int64_t tokens = 0;                            // predicted tokens in the bucket
  double original_loss = 0, converted_loss = 0;  // mean next-token loss (nats); NaN with no tokens
  double attention_kl = 0;                       // NaN with no defined rows
};
// The bucket of position p: 0 for p < 64, then one per power of two.
int position_bucket(int p);

struct ConvertedEvaluation {
  int seq_len = 0;
  std::string compute_dtype;  // the models' (--dtype): compute_dtype_name
  // The window length the maps were trained on (the converted model's "trained_length"; 0 unknown)
  // and whether this evaluation goes beyond it, where trained maps are known to break.
  int64_t trained_length = 0;
  bool beyond_trained_length() const { return trained_length > 0 && seq_len > trained_length; }
  std::vector<PositionBucket> positions;
  int64_t tokens = 0;
  int closeness_windows = 0;  // windows actually used
  double original_loss = 0, converted_loss = 0;  // mean next-token loss (nats), Model::mean_loss windows
  std::vector<LayerCloseness> layers;
  std::vector<SpeedEntry> speed;
  std::vector<RecallBucket> recall;  // empty when not measured
  std::optional<GenerationAgreement> generation;
};

// `converted` must run linear attention (Model::feature_maps() non-null): Error otherwise.
// `ids` is the held-out text's tokens (>= 2). Throws Error for a bad seq_len or speed length.
ConvertedEvaluation evaluate_converted(const Model& converted, const std::vector<int64_t>& ids,
                                       const ConvertedEvalOptions& options, const ProgressFn& progress = nullptr);

// The default speed lengths for a context of n_ctx: 64, 128, 256, ... up to n_ctx or 4096, whichever
// is smaller (that one included).
std::vector<int> default_speed_lengths(int n_ctx);

}  // namespace attnscope
