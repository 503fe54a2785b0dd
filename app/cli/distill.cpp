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
namespace {

// SIGINT and SIGTERM (Ctrl-C; torchrun or Slurm stopping the job) cancel at the next step: the last
// checkpoint stays whole for --resume and, in a distributed run, the other ranks stop at the same
// step. A second signal acts as usual (the default handler is back).
std::atomic<bool> stop_requested{false};
extern "C" void request_stop(int sig) {
  stop_requested.store(true);
  std::signal(sig, SIG_DFL);
}

}  // namespace


void register_distill(CLI::App& app) {
  auto* cmd = app.add_subcommand("distill", "Train feature maps layerwise on a capture, or directly in the model on a "
                                            "text (a job in a run directory)");
  auto o = std::make_shared<DistillOptions>();
  auto out = std::make_shared<std::string>();
  auto resume = std::make_shared<std::string>();
  auto untied = std::make_shared<bool>(false);
  cmd->add_option("-c,--capture", o->capture, "capture directory (attnscope capture); --loss direct: optional, its model");
  cmd->add_option("--val-capture", o->val_capture, "held-out capture for validation (default: a share of the windows)");
  cmd->add_option("--val-share", o->val_share, "share of the windows held out when there is no --val-capture")
      ->capture_default_str();
  cmd->add_option("--feature-map", o->feature_map, "learned-prf | hedgehog | t2r | flex-stationary | flex-nonstationary")
      ->capture_default_str();
  cmd->add_option("--init", o->init, "initialization of the map (learned-prf: gaussian | orthogonal; hedgehog: identity | random)");
  cmd->add_flag("--untied", *untied, "hedgehog, t2r: separate layers for queries and keys");
  cmd->add_option("--activation", o->activation, "hedgehog: exp | softmax")->capture_default_str();
  auto* f = cmd->add_option("-M,--features", o->features, "feature dimension M for every layer");
  auto* a = cmd->add_option("--allocation", o->allocation, "per-layer or per-head dimensions: `attnscope allocate --json` output");
  f->excludes(a);
  cmd->add_option("--strategy", o->strategy, "dimensions from the capture's DoF, as `attnscope allocate`: fix | dof | dof-clip | per-head")
      ->check(CLI::IsMember({"fix", "dof", "dof-clip", "per-head"}));
  cmd->add_option("-C,--budget", o->budget, "with --strategy: cost C, the mean feature dimension");
  cmd->add_option("--lambda", o->lambda, "with --strategy: DoF tolerance lambda (2^-8, 0.0625, 1e-3)")->capture_default_str();
  cmd->add_option("-J,--samples", o->dof_samples, "with --strategy: vectors sampled per head for the DoF")
      ->capture_default_str()->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  cmd->add_option("--loss", o->loss, "kl | softmax | l2 (layerwise, on the capture) | direct (next-token loss of the "
                                     "whole model with the maps in place, on --text)")->capture_default_str();
  cmd->add_option("-t,--text", o->text, "--loss direct: the training text (.txt or .jsonl)");
  cmd->add_option("-L,--seq-len", o->seq_len, "--loss direct: tokens per window (default: the capture's, else 128)");
  cmd->add_option("-m,--model", o->model, "--loss direct: the model (default: the capture's)");
  cmd->add_option("--steps", o->steps, "training steps")->capture_default_str();
  cmd->add_option("--lr", o->lr, "learning rate of z (learned-prf) or W, b (hedgehog)")->capture_default_str();
  cmd->add_option("--lr-alpha", o->lr_alpha, "learning rate of alpha (learned-prf)")->capture_default_str();
  cmd->add_option("--weight-decay", o->weight_decay, "AdamW weight decay")->capture_default_str();
  cmd->add_option("--schedule", o->schedule, "constant | cosine")->capture_default_str();
  cmd->add_option("--batch", o->batch, "windows per mini-batch")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the maps, the split and the mini-batches")->capture_default_str();
  cmd->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints")->capture_default_str();
  auto* dev = cmd->add_option("--device", o->device, "cpu | cuda (with --resume: the job's unless given)")
                  ->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  auto* op = cmd->add_option("-o,--out", *out, "run directory to create");
  auto* rp = cmd->add_option("--resume", *resume, "continue the killed job in this run directory");
  op->excludes(rp);
  cmd->callback([=] {
    o->tied = !*untied;
    if (!resume->empty() && dev->count() == 0) o->device = "";  // resume on the job's device
    if (resume->empty()) {
      if (o->loss == "direct") {
        if (o->text.empty()) throw CLI::RequiredError("--text FILE (with --loss direct)");
        if (o->capture.empty() && o->model.empty()) throw CLI::RequiredError("--capture or --model (with --loss direct)");
      } else if (o->capture.empty()) {
        throw CLI::RequiredError("--capture");
      }
      if (out->empty()) throw CLI::RequiredError("--out");
      const auto maps = trainable_feature_maps();
      if (std::find(maps.begin(), maps.end(), o->feature_map) == maps.end()) {
        std::string names;
        for (const auto& m : maps) names += (names.empty() ? "" : ", ") + m;
        throw CLI::ValidationError("--feature-map", "'" + o->feature_map + "' cannot be trained; trainable maps: " + names);
      }
      const int given = int(o->features > 0) + int(!o->allocation.empty()) + int(!o->strategy.empty());
      if (given != 1)
        throw CLI::ValidationError("dimensions", "give exactly one of --features M, --allocation FILE or "
                                                 "--strategy S (with --budget C --lambda X)");
      if (!o->strategy.empty() && o->budget < 1) throw CLI::RequiredError("--budget C (with --strategy)");
    }
    std::ostringstream line;
    line << "attnscope distill";
    if (!resume->empty()) line << " --resume " << *resume;
    else line << (o->capture.empty() ? "" : " --capture " + o->capture) << (o->model.empty() ? "" : " --model " + o->model)
              << (o->text.empty() ? "" : " --text " + o->text) << " --feature-map " << o->feature_map << " --loss "
              << o->loss << " --steps " << o->steps << " --seed " << o->seed << " --device " << o->device << " --out " << *out;
    if (resume->empty() && !o->strategy.empty())
      line << " --strategy " << o->strategy << " --budget " << o->budget << " --lambda " << o->lambda << " --samples "
           << o->dof_samples;
    o->command = line.str();
    const std::string run = resume->empty() ? *out : *resume;
    // The other ranks of a distributed run (WORLD_SIZE > 1, distributed.h) work quietly: rank 0
    // reports and writes.
    const bool rank0 = dist_env_from_environment().rank == 0;
    DistillResult r;
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
    try {
      run_job("distill", "distill " + o->feature_map, o->command,
              [&](Job& job) {
                r = distill(*o, run, sub_progress(job.progress(), 0, 1, &stop_requested), !resume->empty());
              },
              rank0 ? terminal_progress("distill") : nullptr);
    } catch (const Cancelled&) {
      if (rank0) std::cerr << "\ndistill: stopped; continue with: attnscope distill --resume " << run << "\n";
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
