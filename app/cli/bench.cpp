// `attnscope bench`: the named speed benchmarks on a GPT-2-small-shaped model with random weights
// (core: speed_bench.h). `bench generate`: generation and batch tokens/s and peak memory of softmax
// against linear attention at growing contexts; `bench train`: milliseconds per training sample of
// the distillation losses. A Markdown table, or --json.
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/bench/speed_bench.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/base/table.h"
#include "common.h"

namespace attnscope::cli {
namespace {

std::string megabytes(int64_t bytes) { return fmt_number(double(bytes) / 1e6, 1); }

void print_generate(const std::vector<ContextSpeed>& rows, const GenerateBenchOptions& o) {
  Table t;
  t.caption = "Generation (" + std::to_string(o.tokens) + " tokens timed per context, tokens/s of all sequences) and batch "
              "forward (batch 1), " + o.shape + " shape (random weights), " + o.feature_map + " M = " + std::to_string(o.features) +
              (o.window > 0 ? ", hybrid window " + std::to_string(o.window) : std::string()) + ", device " + o.device;
  t.header = {"context", "batch", "softmax gen tok/s (KV cache)", "linear gen tok/s", "gen speedup vs KV cache",
              "softmax gen tok/s (no cache)", "softmax batch tok/s", "linear batch tok/s",
              "softmax gen peak MB (KV cache)", "linear gen peak MB", "softmax batch peak MB", "linear batch peak MB"};
  for (const auto& r : rows) {
    // Softmax not run (it would not fit), or a column not measured at this batch size.
    const std::string skipped = "out of memory (needs ~" + fmt_number(double(r.softmax_skipped_bytes) / 1e9, 1) + " GB)";
    auto softmax = [&](const std::string& v) { return r.softmax_skipped_bytes > 0 ? skipped : v; };
    auto measured = [](double v, int digits) { return v > 0 ? fmt_number(v, digits) : std::string("-"); };
    t.add_row({std::to_string(r.context), std::to_string(r.batch), softmax(fmt_number(r.softmax_generate_tokens_per_s, 2)),
               fmt_number(r.linear_generate_tokens_per_s, 2),
               softmax(fmt_number(r.linear_generate_tokens_per_s / r.softmax_generate_tokens_per_s, 2)),
               softmax(measured(r.softmax_nocache_generate_tokens_per_s, 2)), softmax(measured(r.softmax_batch_tokens_per_s, 1)),
               measured(r.linear_batch_tokens_per_s, 1), softmax(megabytes(r.softmax_generate_peak_bytes)),
               megabytes(r.linear_generate_peak_bytes), softmax(megabytes(r.softmax_batch_peak_bytes)),
               megabytes(r.linear_batch_peak_bytes)});
  }
  std::cout << to_markdown(t);
}

nlohmann::json generate_json(const std::vector<ContextSpeed>& rows, const GenerateBenchOptions& o) {
  nlohmann::json out = {{"benchmark", "generate"}, {"model", "gpt2-small shape, random weights"},
                        {"vocab_size", o.vocab},   {"feature_map", o.feature_map},
                        {"features", o.features},  {"tokens", o.tokens},
                        {"device", o.device},      {"rows", nlohmann::json::array()}};
  for (const auto& r : rows)
    out["rows"].push_back({{"context", r.context},
                           {"batch", r.batch},
                           {"softmax_generate_tokens_per_s", r.softmax_generate_tokens_per_s},
                           {"linear_generate_tokens_per_s", r.linear_generate_tokens_per_s},
                           {"softmax_nocache_generate_tokens_per_s", r.softmax_nocache_generate_tokens_per_s},
                           {"softmax_batch_tokens_per_s", r.softmax_batch_tokens_per_s},
                           {"linear_batch_tokens_per_s", r.linear_batch_tokens_per_s},
                           {"softmax_generate_peak_bytes", r.softmax_generate_peak_bytes},
                           {"linear_generate_peak_bytes", r.linear_generate_peak_bytes},
                           {"softmax_batch_peak_bytes", r.softmax_batch_peak_bytes},
                           {"linear_batch_peak_bytes", r.linear_batch_peak_bytes},
                           {"softmax_skipped_bytes", r.softmax_skipped_bytes}});
  return out;
}

void register_generate_bench(CLI::App* bench) {
  auto* cmd = bench->add_subcommand("generate", "Generation and batch tokens/s and peak memory, softmax against linear "
                                                "attention, at growing contexts (GPT-2-small or a Llama shape, random weights)");
  auto o = std::make_shared<GenerateBenchOptions>();
  auto fmt = std::make_shared<FormatOptions>();
  add_option_table(cmd, generate_bench_option_table(), o);
  add_format_options(cmd, fmt, {OutputFormat::Json});
  cmd->callback([=] {
    const auto rows = bench_generate(*o, terminal_progress("bench generate"));
    if (fmt->format == OutputFormat::Json)
      std::cout << generate_json(rows, *o).dump(2) << "\n";
    else
      print_generate(rows, *o);
  });
}

void register_train_bench(CLI::App* bench) {
  auto* cmd = bench->add_subcommand("train", "Milliseconds per training sample of the distillation losses (GPT-2-small "
                                             "shape: 12 layers x 12 heads, head dimension 64)");
  auto o = std::make_shared<TrainBenchOptions>();
  auto fmt = std::make_shared<FormatOptions>();
  add_option_table(cmd, train_bench_option_table(), o);
  add_format_options(cmd, fmt, {OutputFormat::Json});
  cmd->callback([=] {
    const auto rows = bench_train(*o, terminal_progress("bench train"));
    if (fmt->format == OutputFormat::Json) {
      nlohmann::json out = {{"benchmark", "train"}, {"model", "gpt2-small shape"}, {"layers", 12},
                            {"heads", 12},          {"head_dim", 64},             {"seq_len", o->seq_len},
                            {"features", o->features}, {"feature_map", o->feature_map}, {"batch", o->batch},
                            {"device", o->device},  {"rows", nlohmann::json::array()}};
      for (const auto& r : rows)
        out["rows"].push_back({{"loss", r.loss}, {"ms_per_sample", r.ms_per_sample}, {"steps", r.steps}, {"seconds", r.seconds}});
      std::cout << out.dump(2) << "\n";
      return;
    }
    Table t;
    t.caption = "Training, ms per sample of " + std::to_string(o->seq_len) + " tokens, all 12 layers, " + o->feature_map +
                " M = " + std::to_string(o->features) + ", device " + o->device;
    t.header = {"loss", "ms per sample", "steps"};
    for (const auto& r : rows) t.add_row({r.loss, fmt_number(r.ms_per_sample, 1), std::to_string(r.steps)});
    std::cout << to_markdown(t);
  });
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Speed benchmarks: models of GPT-2-small shape, attention kernels, DoF spectra (docs/PERFORMANCE.md)");
  bench->require_subcommand(1);
  register_generate_bench(bench);
  register_train_bench(bench);
  register_attention_bench(bench);
  register_dof_bench(bench);
  register_scale_bench(bench);
}

}  // namespace attnscope::cli
