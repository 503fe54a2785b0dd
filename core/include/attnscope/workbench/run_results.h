// What the Train tab shows of a run beyond its metrics.jsonl: the evaluation of its converted model
// (RUN/converted), kept in RUN/evaluation.json so that reopening the run (a session, Open run…)
// shows it again without evaluating again, and the run's one number, its final validation KL.
//
//   RUN/evaluation.json  {"command": "attnscope eval --model RUN/converted ...",
//                         "evaluation": {...converted_eval_to_json: `attnscope eval --json`...}}
#pragma once
#include <optional>
#include <string>

#include "attnscope/convert/converted_eval.h"
#include "attnscope/distill/run_metrics.h"

namespace attnscope {

struct RunEvaluation {
  ConvertedEvaluation evaluation;
  std::string command;  // the `attnscope eval` line that measures the same
};

// Atomic; Error naming the file when it cannot be written.
void write_run_evaluation(const std::string& run_dir, const RunEvaluation& evaluation);
// nullopt when RUN/evaluation.json is absent, or RUN/converted is (the evaluation is of a model that
// is gone); Error naming the file when it is not what write_run_evaluation writes.
std::optional<RunEvaluation> read_run_evaluation(const std::string& run_dir);

// The mean over layers of each layer's last validation KL; NaN when the run has none.
double final_validation_kl(const RunMetrics& metrics);

}  // namespace attnscope
