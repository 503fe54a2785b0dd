// Where a run stands, in words: the Train tab's run label and `attnscope jobs` say the same thing,
// made here from what the run's files (or a window following them) hold.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "attnscope/pipeline/linearize.h"
#include "attnscope/run/run_dir.h"

namespace attnscope {

struct RunStatus {
  std::optional<RunState> state;  // none: there is no run
  bool linearize = false;         // a linearize run (stages)
  bool finetune = false;          // a finetune run; neither: a distill run
  int64_t step = 0, steps = 0;    // (stage 1's) last step and its steps
  int64_t finetune_step = 0, finetune_steps = 0;  // linearize's stage 2
  // Killed distill runs: the last checkpoint's step (0: none yet), or why it cannot be read.
  int64_t checkpoint_step = 0;
  std::string checkpoint_error;
  // Finished: a linearize run's held-out result at its length; a distill run's mean over layers of
  // the last validation KL (NaN when it held nothing out).
  std::optional<LengthResult> result;
  double validation_kl = std::nan("");
};

// "Linearizing: stage 2 (finetune) step 3 of 200", "Stopped at step 40 of 100: Resume continues from
// the checkpoint at step 40", "Finished: held-out perplexity 26.76 at 512 tokens (original 25.10)", ...
std::string run_status_text(const RunStatus& status);

// The status of the run in `dir`, read from its files (job.json, metrics.jsonl, the checkpoint,
// linearize.json) for a distill, finetune or linearize run. Error naming a file that is there but
// does not read, or a job.json of another kind.
RunStatus read_run_status(const std::string& dir);

// The step of RUN's checkpoint (0 when there is none). Error naming the checkpoint when its "step"
// is missing or not a step number.
int64_t checkpoint_step(const std::string& run_dir);

}  // namespace attnscope
