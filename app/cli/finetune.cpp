// `attnscope finetune`: stage 2 of a conversion, low-rank adapters and the feature maps trained on
// the next-token loss (and the KL to the original), merged into RUN/model (core: finetune.h).
#include <atomic>
#include <cmath>
#include <csignal>
#include <iostream>

#include "attnscope/base/job.h"
#include "attnscope/finetune/finetune.h"
#include "common.h"

namespace attnscope::cli {

void register_finetune(CLI::App& app) {
  auto* cmd = app.add_subcommand("finetune", "Stage 2: low-rank adapters on q, k, v, o and the feature maps of a converted "
                                             "model, trained on a text; merged into RUN/model (a job in a run directory)");
  auto o = std::make_shared<FinetuneOptions>();
  auto out = std::make_shared<std::string>();
  auto resume = std::make_shared<std::string>();
  add_option_table(cmd, finetune_option_table(), o);
  auto* op = cmd->add_option("-o,--out", *out, "run directory to create; the finetuned converted model is RUN/model");
  auto* rp = cmd->add_option("--resume", *resume, "continue the killed job in this run directory");
  op->excludes(rp);
  cmd->callback([=] {
    const bool resuming = !resume->empty();
    if (resuming)
      for (const auto& row : finetune_option_table())
        if (cmd->count(long_flag(row.flags)))
          throw CLI::ValidationError(long_flag(row.flags), "a resumed run keeps its job.json's options");
    if (!resuming) {
      if (out->empty()) throw CLI::RequiredError("--out");
      try {
        check_finetune_options(*o);
      } catch (const Error& e) {
        const std::string flag = option_for_quantity(e.quantity());
        if (flag.empty()) throw;
        throw CLI::ValidationError(flag, e.what());
      }
      o->python_module = resources_dir() + "/python/attnscope_linear.py";
    }
    const std::string run = resuming ? *resume : *out;
    const std::atomic<bool>* stop_requested = stop_on_interrupt();
    FinetuneResult r;
    try {
      run_job(JobKind::Finetune, "finetune", resuming ? attnscope_command({"finetune", "--resume", run}) : finetune_command(*o, run),
              [&](Job& job) {
                const ProgressFn progress = sub_progress(job.progress(), 0, 1, stop_requested);
                r = resuming ? resume_finetune(run, progress) : finetune(*o, run, progress);
              },
              terminal_progress("finetune"));
    } catch (const Cancelled&) {
      std::cerr << "\nfinetune: stopped; continue with: " << attnscope_command({"finetune", "--resume", run}) << "\n";
      throw;
    }
    std::cout << "held-out perplexity at " << r.seq_len << " tokens: original " << std::exp(r.original_val_loss)
              << ", converted " << std::exp(r.initial_val_loss) << " -> finetuned " << std::exp(r.val_loss) << "\n"
              << "wrote " << r.model_dir << " (" << r.seconds << " s)\n";
  });
}

}  // namespace attnscope::cli
