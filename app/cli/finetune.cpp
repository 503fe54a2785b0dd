// `attnscope finetune`: stage 2 of a conversion, low-rank adapters and the feature maps trained on
// the next-token loss (and the KL to the original), merged into RUN/model (core: finetune.h).
#include <cmath>
#include <iostream>

#include "attnscope/finetune/finetune.h"
#include "common.h"

namespace attnscope::cli {

void register_finetune(CLI::App& app) {
  auto* cmd = app.add_subcommand("finetune", "Stage 2: low-rank adapters on q, k, v, o and the feature maps of a converted "
                                             "model, trained on a text; merged into RUN/model (a job in a run directory)");
  add_resumable_job<FinetuneOptions, FinetuneResult>(
      cmd, {"finetune", JobKind::Finetune, "run directory to create; the finetuned converted model is RUN/model",
            finetune_option_table, check_finetune_options, finetune_command,
            [](const FinetuneOptions& o, const std::string& run, const ProgressFn& p) { return finetune(o, run, p); },
            [](const std::string& run, const ProgressFn& p) { return resume_finetune(run, p); },
            [](const FinetuneResult& r) {
              std::cout << "held-out perplexity at " << r.seq_len << " tokens: original " << std::exp(r.original_val_loss)
                        << ", converted " << std::exp(r.initial_val_loss) << " -> finetuned " << std::exp(r.val_loss) << "\n"
                        << "wrote " << r.model_dir << " (" << r.seconds << " s)\n";
            }});
}

}  // namespace attnscope::cli
