// compare(): fix, dof and dof-clip end to end at one budget, and the tables of paper 000's
// Tables 3-5 and 7 in Markdown, LaTeX, CSV and JSON (compare.h).
#include "attnscope/pipeline/compare.h"

#include "attnscope/model/compute_dtype.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attnscope/capture/capture.h"
#include "attnscope/convert/convert_job.h"
#include "attnscope/convert/converted_eval_json.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/distill/distill.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/error.h"
#include "attnscope/model/model.h"
#include "attnscope/base/output_dir.h"
#include "attnscope/base/table.h"
#include "attnscope/base/text_file.h"
#include "attnscope/io/text_source.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace attnscope {
namespace {

const char* display_name(const std::string& strategy) {
  if (strategy == "fix") return "Fix";
  if (strategy == "dof") return "DoF";
  return "DoF + Clip";
}

void write_compare_table(const OutputDir& out, const std::string& name, const Table& t) {
  write_text_file(out.file(name + ".md"), to_markdown(t));
  write_text_file(out.file(name + ".tex"), to_latex(t));
  write_text_file(out.file(name + ".csv"), to_csv(t));
}

// The generate entry of eval's speed table at the evaluation length (compare asks for that one).
const SpeedEntry& generation_entry(const ConvertedEvaluation& e) {
  for (const auto& s : e.speed)
    if (s.generate) return s;
  fail("compare", "the evaluation has no generation timing");
}
const SpeedEntry& batch_entry(const ConvertedEvaluation& e) {
  for (const auto& s : e.speed)
    if (!s.generate) return s;
  fail("compare", "the evaluation has no batch timing");
}

void write_outputs(const OutputDir& out, const Comparison& cmp, const CompareOptions& o) {
  const auto& rows = cmp.strategies;
  const ConvertedEvaluation& first = rows.front().eval;
  const std::string setting = "budget C = " + std::to_string(o.budget) + ", lambda = " + fmt_lambda(cmp.lambda) +
                              ", " + o.feature_map + ", " + distill_loss_name(o.loss) + " loss, " + std::to_string(o.steps) + " steps, computing in " +
                              first.compute_dtype;

  Table quality;  // Table 3's shape, with held-out language-model quality in place of downstream tasks
  quality.caption = "Held-out next-token loss, perplexity and attention KL of the converted models (" + setting + ").";
  quality.header = {"Strategy", "Method", "Dims", "Loss", "Perplexity", "Attention KL", "Output rel. error"};
  quality.add_row({"Original", "softmax", "-", fmt_number(first.original_loss, 4), fmt_number(std::exp(first.original_loss), 2),
                   "-", "-"});
  for (const auto& r : rows) {
    std::string dims;
    for (int64_t d : r.dims) dims += (dims.empty() ? "" : " ") + std::to_string(d);
    double err = 0;
    for (const auto& l : r.eval.layers) err += l.output_rel_error;
    quality.add_row({display_name(r.strategy), distill_loss_name(o.loss), dims, fmt_number(r.eval.converted_loss, 4),
                     fmt_number(std::exp(r.eval.converted_loss), 2), fmt_number(r.mean_attention_kl(), 4),
                     fmt_number(err / double(r.eval.layers.size()), 4)});
  }
  write_compare_table(out, "quality", quality);

  Table speed;  // Table 4's shape
  const int L = first.seq_len;
  speed.caption = "Inference time per sequence of " + std::to_string(L) + " generated tokens and throughput (" + setting + ").";
  speed.header = {"", "Original"};
  for (const auto& r : rows) speed.header.push_back(display_name(r.strategy));
  std::vector<std::string> sec{"Speed (sec/sequence)"}, gen{"Generation (tokens/s; softmax with a KV cache)"},
      bat{"Batch forward (tokens/s)"}, peak{"Generation peak memory (MB)"};
  const SpeedEntry& og = generation_entry(first);
  sec.push_back(fmt_number(double(L - 1) / og.softmax_tokens_per_s, 3));
  gen.push_back(fmt_number(og.softmax_tokens_per_s, 1));
  bat.push_back(fmt_number(batch_entry(first).softmax_tokens_per_s, 1));
  peak.push_back(fmt_number(double(og.softmax_peak_bytes) / 1e6, 2));
  for (const auto& r : rows) {
    const SpeedEntry& g = generation_entry(r.eval);
    sec.push_back(fmt_number(double(L - 1) / g.linear_tokens_per_s, 3));
    gen.push_back(fmt_number(g.linear_tokens_per_s, 1));
    bat.push_back(fmt_number(batch_entry(r.eval).linear_tokens_per_s, 1));
    peak.push_back(fmt_number(double(g.linear_peak_bytes) / 1e6, 2));
  }
  for (auto* row : {&sec, &gen, &bat, &peak}) speed.add_row(*row);
  write_compare_table(out, "speed", speed);

  Table training;  // Table 5's shape
  training.caption = "Training time per sample of " + std::to_string(L) + " tokens, all layers (" + setting + ").";
  training.header = {"Type of loss"};
  std::vector<std::string> ms{distill_loss_name(o.loss)};
  for (const auto& r : rows) {
    training.header.push_back(std::string(display_name(r.strategy)) + " (ms/sample)");
    ms.push_back(fmt_number(r.train_ms_per_sample, 1));
  }
  training.add_row(ms);
  write_compare_table(out, "training", training);

  Table next_token;  // Table 7's shape
  next_token.caption = "Held-out next-token loss of the converted models (" + setting + ").";
  next_token.header = {"", distill_loss_name(o.loss), "Baseline method", "Loss"};
  for (size_t i = 0; i < rows.size(); ++i)
    next_token.add_row({display_name(rows[i].strategy), fmt_number(rows[i].eval.converted_loss, 4),
                        i == 0 ? "Original" : "", i == 0 ? fmt_number(first.original_loss, 4) : ""});
  write_compare_table(out, "next_token", next_token);

  json j = {{"model", o.model},
            {"texts", o.texts},
            {"budget", o.budget},
            {"lambda", cmp.lambda},
            {"feature_map", o.feature_map},
            {"loss", distill_loss_name(o.loss)},
            {"steps", o.steps},
            {"seq_len", L},
            {"heldout_tokens", first.tokens},
            {"original", converted_eval_to_json(first)["original"]},
            {"strategies", json::array()}};
  for (const auto& r : rows) {
    const json e = converted_eval_to_json(r.eval);  // what `attnscope eval --json` prints for this model
    j["strategies"].push_back({{"strategy", r.strategy},
                               {"dims", r.dims},
                               {"model", "models/" + r.strategy},
                               {"train_ms_per_sample", r.train_ms_per_sample},
                               {"original", e["original"]},
                               {"converted", e["converted"]},
                               {"mean_attention_kl", r.mean_attention_kl()},
                               {"layers", e["layers"]},
                               {"speed", e["speed"]}});
  }
  write_text_file(out.file("compare.json"), j.dump(2) + "\n");
}

}  // namespace

double StrategyResult::mean_attention_kl() const {
  double s = 0;
  for (const auto& l : eval.layers) s += l.attention_kl;
  return eval.layers.empty() ? std::nan("") : s / double(eval.layers.size());
}

std::vector<std::string> compare_strategies() { return {"fix", "dof", "dof-clip"}; }

Comparison compare(const CompareOptions& o, const std::string& out_dir, const ProgressFn& progress) {
  // Everything that can be checked before the work starts.
  if (o.budget < 1) fail_value("budget", std::to_string(o.budget) + " must be a positive integer (the mean feature dimension)");
  if (o.features_from != "capture")
    fail_value("features source", "'" + o.features_from + "' is not known: the DoF spectra come from the capture (capture)");
  if (!(o.heldout_share > 0 && o.heldout_share < 1)) fail_value("held-out share", "must be in (0, 1)");
  if (o.steps < 1) fail_value("steps", std::to_string(o.steps) + " must be >= 1");
  // The distillation each strategy runs (distill() checks it again with the capture it writes).
  const auto distill_options = [&](AllocStrategy strategy, const std::string& capture) {
    DistillOptions d;
    d.capture = capture;
    d.feature_map = o.feature_map;
    d.strategy = strategy;
    d.budget = o.budget;
    d.lambda = o.lambda;
    d.dof_samples = o.dof_samples;
    d.loss = o.loss;
    d.steps = o.steps;
    d.seed = o.seed;
    d.checkpoint_every = o.steps;  // one checkpoint, at the end: nothing here resumes
    return d;
  };
  if (o.loss == DistillLoss::Direct) fail_value("loss", "direct trains on a text, not a capture: compare takes a layerwise loss");
  check_distill_options(distill_options(AllocStrategy::Dof, "capture"));
  if (o.python_module.empty() || !fs::is_regular_file(o.python_module))
    fail(o.python_module.empty() ? "attnscope_linear.py" : o.python_module, "the PyTorch module to ship is missing");
  const std::vector<TextDocument> docs = read_text_documents(o.texts);
  const auto [train_text, heldout_text] = split_text(docs, o.heldout_share);
  if (heldout_text.find_first_not_of(" \t\r\n") == std::string::npos)
    fail("compare", "the text is too short to hold out a share of it");
  LoadedModel m = load_model(o.model, "", compute_dtype_of(o.compute, Device::Cpu));
  const ModelConfig& c = m.model->config();
  const int L = o.seq_len > 0 ? o.seq_len : std::min(c.n_ctx, 256);
  if (L < 2 || L > c.n_ctx)
    fail_value("sequence length", std::to_string(L) + " must be in 2.." + std::to_string(c.n_ctx));

  OutputDir out(out_dir);
  fs::create_directories(out.file("texts"));
  fs::create_directories(out.file("runs"));
  fs::create_directories(out.file("models"));
  write_text_file(out.file("texts/train.txt"), train_text);
  write_text_file(out.file("texts/heldout.txt"), heldout_text);

  CaptureOptions co;
  co.seq_len = L;
  co.num_seqs = o.num_seqs;
  co.seed = o.seed;
  capture_to_dir(m, {{"texts/train.txt", train_text}}, co, out.file("capture"), sub_progress(progress, 0.0, 0.1));
  const std::vector<int64_t> heldout = encode_documents(*m.tokenizer, read_text_documents({out.file("texts/heldout.txt")}));

  Comparison cmp;
  cmp.loss = o.loss;
  cmp.budget = o.budget;
  cmp.lambda = o.lambda;
  // The converted models reference the original's weights, except a llama2.c checkpoint's, which
  // are converted to Hugging Face layout and so copied into each.
  const bool copy_weights = c.arch == Arch::Llama2C;
  const auto strategies = compare_strategies();
  for (size_t i = 0; i < strategies.size(); ++i) {
    const std::string& s = strategies[i];
    const double base = 0.1 + 0.9 * double(i) / double(strategies.size()), span = 0.9 / double(strategies.size());
    const DistillOptions d = distill_options(parse_alloc_strategy(s), out.file("capture"));
    const std::string run = out.file("runs/" + s);
    const DistillResult dr = distill(d, run, sub_progress(progress, base, base + 0.6 * span));

    StrategyResult r;
    r.strategy = s;
    for (const auto& l : dr.layers) r.dims.push_back(l.features);
    // Windows per step: distill's mini-batch, capped by the training windows (the capture's less
    // the held-out validation share, as distill splits them).
    const int64_t n_val = std::max<int64_t>(1, int64_t(std::llround(d.val_share * double(o.num_seqs))));
    const int64_t windows = std::max<int64_t>(1, std::min<int64_t>(d.batch, o.num_seqs - n_val));
    r.train_ms_per_sample = 1000.0 * dr.seconds / double(std::max<int64_t>(1, dr.steps) * windows);
    // The converted model, as `attnscope convert --job RUN --weights reference` writes it: the three
    // strategies share the original's weights (a llama2.c model's are copied).
    const std::string model_dir = out.file("models/" + s);
    ConvertOptions conv = distill_run_convert_options(run, c);
    conv.copy_weights = copy_weights;
    conv.python_module = o.python_module;
    convert_model(m, conv, model_dir);

    // Evaluated as `attnscope eval --model DIR/models/S --text DIR/texts/heldout.txt` does.
    LoadedModel converted = load_model(model_dir, "", m.model->weights().compute);
    ConvertedEvalOptions eo;
    eo.seq_len = L;
    eo.closeness_windows = o.closeness_windows;
    eo.speed_lengths = {L};
    eo.min_seconds = o.min_seconds;
    eo.faithfulness = false;  // compare ranks maps by closeness and loss
    r.eval = evaluate_converted(*converted.model, heldout, eo, sub_progress(progress, base + 0.6 * span, base + span));
    cmp.strategies.push_back(std::move(r));
  }
  write_outputs(out, cmp, o);
  out.commit();
  report_progress(progress, 1.0, "done");
  return cmp;
}

}  // namespace attnscope
