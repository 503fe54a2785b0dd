// `attnscope linearize`: the whole conversion recipe as one resumable job: capture, stage-1
// distillation, conversion, stage-2 finetune, held-out evaluation and a report (core: linearize.h).
#include <cmath>
#include <iostream>

#include "attnscope/pipeline/linearize.h"
#include "common.h"

namespace attnscope::cli {

void register_linearize(CLI::App& app) {
  auto* cmd = app.add_subcommand("linearize", "Convert a model to linear attention in one job: capture, distill, convert, "
                                              "finetune, evaluate on held-out text, report (OUT/linearize.md)");
  add_resumable_job<LinearizeOptions, LinearizeResult>(
      cmd, {"linearize", JobKind::Linearize, "run directory to create (the final model is OUT/stage2/model)",
            linearize_option_table, check_linearize_options, linearize_command,
            [](const LinearizeOptions& o, const std::string& run, const ProgressFn& p) { return linearize(o, run, p); },
            [](const std::string& run, const ProgressFn& p) { return resume_linearize(run, p); },
            [](const LinearizeResult& r) {
              std::cout << "held-out perplexity (original / untrained map / stage 1 / final):\n";
              for (const auto& l : r.lengths)
                std::cout << "  " << l.seq_len << " tokens: " << std::exp(l.original_loss) << " / " << std::exp(l.untrained_loss)
                          << " / " << std::exp(l.stage1_loss) << " / " << std::exp(l.final_loss) << "\n";
              std::cout << "final model " << r.final_model << "\nreport " << r.report << " (" << r.seconds << " s)\n";
            }});
}

}  // namespace attnscope::cli
