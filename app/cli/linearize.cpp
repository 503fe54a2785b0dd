// `attnscope linearize`: the whole conversion recipe as one resumable job: capture, stage-1
// distillation, conversion, stage-2 finetune, held-out evaluation and a report (core: linearize.h).
#include <atomic>
#include <cmath>
#include <csignal>
#include <iostream>

#include "attnscope/base/job.h"
#include "attnscope/pipeline/linearize.h"
#include "common.h"

namespace attnscope::cli {

void register_linearize(CLI::App& app) {
  auto* cmd = app.add_subcommand("linearize", "Convert a model to linear attention in one job: capture, distill, convert, "
                                              "finetune, evaluate on held-out text, report (OUT/linearize.md)");
  auto o = std::make_shared<LinearizeOptions>();
  auto out = std::make_shared<std::string>();
  auto resume = std::make_shared<std::string>();
  add_option_table(cmd, linearize_option_table(), o);
  auto* op = cmd->add_option("-o,--out", *out, "run directory to create (the final model is OUT/stage2/model)");
  auto* rp = cmd->add_option("--resume", *resume, "continue the killed job in this run directory");
  op->excludes(rp);
  cmd->callback([=] {
    const bool resuming = !resume->empty();
    if (resuming)
      for (const auto& row : linearize_option_table())
        if (cmd->count(long_flag(row.flags)))
          throw CLI::ValidationError(long_flag(row.flags), "a resumed run keeps its job.json's options");
    if (!resuming) {
      if (out->empty()) throw CLI::RequiredError("--out");
      try {
        check_linearize_options(*o);
      } catch (const Error& e) {
        const std::string flag = option_for_quantity(e.quantity());
        if (flag.empty()) throw;
        throw CLI::ValidationError(flag, e.what());
      }
      o->python_module = resources_dir() + "/python/attnscope_linear.py";
    }
    const std::string run = resuming ? *resume : *out;
    const std::atomic<bool>* stop_requested = stop_on_interrupt();
    LinearizeResult r;
    try {
      run_job(JobKind::Linearize, "linearize", resuming ? attnscope_command({"linearize", "--resume", run}) : linearize_command(*o, run),
              [&](Job& job) {
                const ProgressFn progress = sub_progress(job.progress(), 0, 1, stop_requested);
                r = resuming ? resume_linearize(run, progress) : linearize(*o, run, progress);
              },
              terminal_progress("linearize"));
    } catch (const Cancelled&) {
      std::cerr << "\nlinearize: stopped; continue with: " << attnscope_command({"linearize", "--resume", run}) << "\n";
      throw;
    }
    std::cout << "held-out perplexity (original / untrained map / stage 1 / final):\n";
    for (const auto& l : r.lengths)
      std::cout << "  " << l.seq_len << " tokens: " << std::exp(l.original_loss) << " / " << std::exp(l.untrained_loss) << " / "
                << std::exp(l.stage1_loss) << " / " << std::exp(l.final_loss) << "\n";
    std::cout << "final model " << r.final_model << "\nreport " << r.report << " (" << r.seconds << " s)\n";
  });
}

}  // namespace attnscope::cli
