// Reading a run directory's metrics.jsonl (SPEC 6) while the job writes it or after it stopped:
// `attnscope jobs` and the workbench's live loss curves read the same lines the same way.
//   {"step", "layer", "loss", "lr", "elapsed_s"}      a training step of one layer
//   {"step", "layer", "val_loss", "val_kl"}           a validation of one layer
// Direct training's lines are the whole model's: no "layer", read as layer kModelLayer (-1).
// A line that does not parse (cut short by a kill) or lacks a step is skipped.
//
// A finetune run's metrics.jsonl (finetune.h; linearize's OUT/stage2) has lines of its own, read by
// the second reader here into FinetuneMetrics:
//   {"step", "loss", "ce", "lr", "elapsed_s"}         a training step: loss = ce + KL weight x KL
//   {"step", "val_loss", "val_perplexity"}            a validation on the held-out windows
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnscope {

inline constexpr int kModelLayer = -1;  // a line of the whole model (direct training)

struct TrainingPoint {
  int64_t step = 0;
  int layer = 0;
  double loss = 0, lr = 0, elapsed_s = 0;
};

struct ValidationPoint {
  int64_t step = 0;
  int layer = 0;
  double val_loss = 0, val_kl = 0;
};

struct RunMetrics {
  std::vector<TrainingPoint> training;     // in file order
  std::vector<ValidationPoint> validation;
  int num_layers() const;    // 1 + the largest layer seen (0 when empty; model lines do not count)
  int64_t last_step() const; // the largest training step (0 when empty)
};

struct FinetuneStep {
  int64_t step = 0;
  double loss = 0, ce = 0, lr = 0, elapsed_s = 0;  // ce: the next-token cross-entropy (nats)
};

struct FinetuneValidation {
  int64_t step = 0;
  double val_loss = 0, val_perplexity = 0;  // next-token loss on the held-out windows, its exp
};

struct FinetuneMetrics {
  std::vector<FinetuneStep> training;  // in file order
  std::vector<FinetuneValidation> validation;
  int64_t last_step() const;  // the largest training step (0 when empty)
};

// Appends the complete lines of `text` (metrics.jsonl content) to `into`: a distill run's lines.
void parse_metrics_lines(const std::string& text, RunMetrics& into);
// The same for a finetune run's lines.
void parse_metrics_lines(const std::string& text, FinetuneMetrics& into);

// The mean over layers of each layer's last validation KL; NaN when the run has none.
double final_validation_kl(const RunMetrics& metrics);

// All of RUN/metrics.jsonl; empty when the file does not exist yet.
RunMetrics read_run_metrics(const std::string& run_dir);
FinetuneMetrics read_finetune_metrics(const std::string& run_dir);

// Follows RUN/metrics.jsonl as it grows: poll() parses only the complete lines appended since the
// last call. A file that shrank or was replaced (a resume drops the lines after its checkpoint) is
// read again from the start. Metrics: RunMetrics (a distill run) or FinetuneMetrics.
template <class Metrics>
class JsonlTail {
 public:
  explicit JsonlTail(std::string run_dir = {});
  // True when new lines were read (or the metrics were reset).
  bool poll();
  void reset();  // forget what was read: the next poll() reads the whole file
  const Metrics& metrics() const { return metrics_; }
  const std::string& run_dir() const { return dir_; }

 private:
  std::string dir_;
  Metrics metrics_;
  uint64_t offset_ = 0;  // bytes consumed: up to the end of the last complete line
  uint64_t inode_ = 0;
};
using MetricsTail = JsonlTail<RunMetrics>;
using FinetuneTail = JsonlTail<FinetuneMetrics>;

}  // namespace attnscope
