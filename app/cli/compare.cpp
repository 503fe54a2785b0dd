// `attnscope compare`: fix, dof and dof-clip end to end at one budget (capture -> spectra ->
// allocation -> distillation -> conversion -> evaluation on held-out text), tables in the shape of
// paper 000's Tables 3-5 and 7 (core: compare.h).
#include <cmath>
#include <iostream>

#include "attnscope/pipeline/compare.h"
#include "attnscope/distill/distill.h"
#include "attnscope/base/table.h"
#include "common.h"

namespace attnscope::cli {

void register_compare(CLI::App& app) {
  auto* cmd = app.add_subcommand("compare", "Run fix, dof and dof-clip end to end at one budget and write paper-style "
                                            "tables (Markdown, LaTeX, CSV, JSON)");
  auto o = std::make_shared<CompareOptions>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("-m,--model", o->model, "model directory, HF cache name or llama2.c .bin (default: the bundled model)");
  add_compute_dtype_option(cmd, o->compute);
  cmd->add_option("-t,--text", o->texts, ".txt or .jsonl files; the tail (--heldout-share) is held out")->required();
  cmd->add_option("-C,--budget", o->budget, "cost C: the mean feature dimension per layer")->required();
  add_lambda_option(cmd, o->lambda, "DoF tolerance lambda (2^-8, 0.0625, 1e-3)");
  cmd->add_option("--feature-map", o->feature_map, "trainable map: learned-prf | hedgehog | t2r | flex-stationary")
      ->capture_default_str();
  cmd->add_option_function<std::string>("--loss", [o](const std::string& v) { o->loss = parse_distill_loss(v); },
                                         "distillation loss: kl | softmax | l2 | output")
      ->default_str(distill_loss_name(o->loss));
  cmd->add_option("--steps", o->steps, "distillation steps per strategy")->capture_default_str();
  cmd->add_option("--features-from", o->features_from, "where the DoF spectra come from: capture")->capture_default_str();
  cmd->add_option("--heldout-share", o->heldout_share, "share of the text held out for evaluation")->capture_default_str();
  cmd->add_option("-L,--seq-len", o->seq_len, "window length (default: the context length, at most 256)");
  cmd->add_option("-n,--num-seqs", o->num_seqs, "capture windows")->capture_default_str();
  cmd->add_option("-J,--samples", o->dof_samples, "vectors sampled per head for the DoF")->capture_default_str();
  cmd->add_option("--closeness-windows", o->closeness_windows, "held-out windows for attention KL")->capture_default_str();
  cmd->add_option("--min-seconds", o->min_seconds, "each timing runs at least this long")->capture_default_str();
  cmd->add_option("--seed", o->seed, "capture, maps and mini-batches")->capture_default_str();
  cmd->add_option("-o,--out", *out, "output directory (written whole or not at all)")->required();
  cmd->callback([=] {
    if (o->model.empty()) o->model = default_model();
    o->python_module = resources_dir() + "/python/attnscope_linear.py";
    const Comparison c = compare(*o, *out, terminal_progress("compare"));
    Table t;
    t.header = {"strategy", "dims", "held-out loss", "perplexity", "attention KL", "train ms/sample"};
    for (const auto& s : c.strategies) {
      std::string dims;
      for (int64_t d : s.dims) dims += (dims.empty() ? "" : " ") + std::to_string(d);
      t.add_row({s.strategy, dims, fmt_number(s.eval.converted_loss, 4), fmt_number(std::exp(s.eval.converted_loss), 2),
                 fmt_number(s.mean_attention_kl(), 4), fmt_number(s.train_ms_per_sample, 1)});
    }
    std::cout << "original held-out loss " << fmt_number(c.strategies.front().eval.original_loss, 4) << "\n"
              << to_markdown(t) << "tables in " << *out << "\n";
  });
}

}  // namespace attnscope::cli
