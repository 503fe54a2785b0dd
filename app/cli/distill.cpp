// `attnscope distill`: layerwise distillation of trainable feature maps on a capture (SPEC 6 job).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <iostream>
#include <sstream>

#include "attnscope/distill/distill.h"
#include "attnscope/distill/distributed.h"
#include "attnscope/base/error.h"
#include "attnscope/base/job.h"
#include "common.h"

namespace attnscope::cli {


void register_distill(CLI::App& app) {
  auto* cmd = app.add_subcommand("distill", "Train feature maps layerwise on a capture, or directly in the model on a "
                                            "text (a job in a run directory)");
  auto o = std::make_shared<DistillOptions>();
  auto dirs = std::make_shared<OutputOptions>();
  add_option_table(cmd, distill_option_table(), o);
  add_option_table(cmd,
                   resumable_out_option_table("run directory to create", "continue the killed job in this run directory "
                                                                         "(with --device: on that device, else on the job's)"),
                   dirs);
  exclusive(cmd, {"--out", "--resume"});
  cmd->callback([=] {
    const std::string* out = &dirs->out;
    const std::string* resume = &dirs->resume;
    const bool resuming = !resume->empty();
    if (!resuming && out->empty()) throw CLI::RequiredError("--out");
    // Every option of a resumed run is its job.json's: one given here would be silently ignored.
    if (resuming)
      for (const auto& row : distill_option_table())
        if (row.flag() != "--device" && cmd->count(row.flag()))
          throw CLI::ValidationError(row.flag(), "a resumed run keeps its job.json's options (only --device may change)");
    if (!resuming) {
      check_as_usage([&] { check_distill_options(*o); });  // before any work: a usage error naming the option
    }
    const std::optional<Device> device =
        resuming && cmd->count("--device") ? std::optional<Device>(o->device) : std::nullopt;
    const std::string run = resuming ? *resume : *out;
    const std::string command = resuming ? distill_resume_command(run, device) : distill_command(*o, run);
    // The other ranks of a distributed run (WORLD_SIZE > 1, distributed.h) work quietly: rank 0
    // reports and writes.
    const bool rank0 = dist_env_from_environment().rank == 0;
    DistillResult r;
    const std::atomic<bool>* stop_requested = stop_on_interrupt();
    try {
      run_job(JobKind::Distill, "distill " + o->feature_map, command,
              [&](Job& job) {
                const ProgressFn progress = sub_progress(job.progress(), 0, 1, stop_requested);
                r = resuming ? resume_distill(run, progress, device) : distill(*o, run, progress);
              },
              rank0 ? terminal_progress("distill") : nullptr);
    } catch (const Cancelled&) {
      if (rank0) std::cerr << "\ndistill: stopped; continue with: " << distill_resume_command(run) << "\n";
      else std::cerr << "distill: rank " << dist_env_from_environment().rank << " stopped with the job\n";
      throw;
    }
    if (!rank0) return;
    std::cout << "layer  M  first loss  final loss  val KL (initial -> final)\n";
    for (const auto& l : r.layers)
      std::cout << l.layer << "  " << l.features << "  " << l.initial_loss << "  " << l.final_loss << "  "
                << l.initial_val_kl << " -> " << l.val_kl << "\n";
    if (std::isfinite(r.val_loss))
      std::cout << "held-out next-token loss " << r.initial_val_loss << " -> " << r.val_loss << " (perplexity "
                << std::exp(r.initial_val_loss) << " -> " << std::exp(r.val_loss) << ")\n";
    std::cout << "wrote " << run << " (" << r.seconds << " s)\n";
  });
}

}  // namespace attnscope::cli
