// `attnscope metrics`: every metric of every head of a capture (SPEC section 5).
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/head_analysis.h"
#include "attnscope/table.h"
#include "common.h"

namespace attnscope::cli {

namespace {

nlohmann::ordered_json metrics_json(const HeadMetrics& m) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  nlohmann::ordered_json j;
  j["entropy"] = num(m.entropy);
  j["normalized_entropy"] = num(m.normalized_entropy);
  if (m.monotonicity) {
    j["monotonicity"] = num(m.monotonicity->spearman);
    j["discordant_fraction"] = num(m.monotonicity->discordant_fraction);
  }
  if (m.kl) j["kl"] = num(*m.kl);
  if (m.cross_entropy) j["cross_entropy"] = num(*m.cross_entropy);
  if (m.kernel_rel_error) j["kernel_rel_error"] = num(*m.kernel_rel_error);
  if (m.output_rel_error) j["output_rel_error"] = num(*m.output_rel_error);
  if (m.nonpositive_row_fraction) j["nonpositive_row_fraction"] = num(*m.nonpositive_row_fraction);
  return j;
}

}  // namespace

void AnalysisArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--feature-map", opt.feature_map, "also measure this feature map's linear attention (e.g. prf, hedgehog, elu)");
  cmd->add_option("-M,--features", opt.features, "feature dimension M of the feature map")->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", opt.seed, "seed for the feature map and sampled pairs")->capture_default_str();
  cmd->add_option("--max-seqs", opt.max_seqs, "use the first N windows only (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--mixer-state", opt.mixer_state, "state size N for structured-mixer distances (0 = skip)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
}

nlohmann::ordered_json analysis_json(const std::vector<HeadAnalysis>& heads) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const HeadAnalysis& a : heads) {
    nlohmann::ordered_json j;
    j["layer"] = a.layer;
    j["head"] = a.head;
    j["softmax"] = metrics_json(a.softmax);
    if (a.linear) j["linear"] = metrics_json(*a.linear);
    if (a.mixers)
      j["mixers"] = {{"state_size", a.mixers->state_size}, {"toeplitz", a.mixers->toeplitz},
                     {"causal_low_rank", a.mixers->causal_low_rank}, {"retnet", a.mixers->retnet},
                     {"ssd", a.mixers->ssd}, {"ssd_d", a.mixers->ssd_skip}, {"semiseparable", a.mixers->semiseparable}};
    arr.push_back(j);
  }
  return arr;
}

Table analysis_table(const std::vector<HeadAnalysis>& heads) {
  Table t;
  t.header = {"layer", "head", "entropy", "norm_entropy", "monotonicity", "discordant"};
  const bool lin = !heads.empty() && heads.front().linear.has_value();
  const bool mix = !heads.empty() && heads.front().mixers.has_value();
  if (lin)
    for (const char* c : {"lin_entropy", "lin_monotonicity", "kl", "cross_entropy", "kernel_rel_error",
                          "output_rel_error", "nonpositive_row_fraction"})
      t.header.push_back(c);
  if (mix)
    for (const char* c : {"toeplitz", "low_rank", "retnet", "ssd", "ssd_d", "semiseparable"}) t.header.push_back(c);
  auto f = [](double v) { return fmt_number(v, 6); };
  for (const HeadAnalysis& a : heads) {
    const auto& m = a.softmax;
    std::vector<std::string> row = {std::to_string(a.layer), std::to_string(a.head), f(m.entropy),
                                    f(m.normalized_entropy), f(m.monotonicity ? m.monotonicity->spearman : NAN),
                                    f(m.monotonicity ? m.monotonicity->discordant_fraction : NAN)};
    if (lin) {
      const auto& l = *a.linear;
      for (double v : {l.entropy, l.monotonicity ? l.monotonicity->spearman : NAN, l.kl.value_or(NAN),
                       l.cross_entropy.value_or(NAN), l.kernel_rel_error.value_or(NAN),
                       l.output_rel_error.value_or(NAN), l.nonpositive_row_fraction.value_or(NAN)})
        row.push_back(f(v));
    }
    if (mix) {
      const auto& x = *a.mixers;
      for (double v : {x.toeplitz, x.causal_low_rank, x.retnet, x.ssd, x.ssd_skip, x.semiseparable}) row.push_back(f(v));
    }
    t.add_row(row);
  }
  return t;
}

void register_metrics(CLI::App& app) {
  auto* cmd = app.add_subcommand("metrics", "Entropy, monotonicity, linear-map errors and mixer distances of every head");
  auto capture = std::make_shared<std::string>();
  auto args = std::make_shared<AnalysisArgs>();
  auto format = std::make_shared<std::string>("text");
  cmd->add_option("-c,--capture", *capture, "capture directory")->required();
  args->add_to(cmd);
  auto* g = cmd->add_option_group("format");
  g->add_flag_callback("--json", [format] { *format = "json"; }, "JSON");
  g->add_flag_callback("--csv", [format] { *format = "csv"; }, "CSV");
  g->require_option(0, 1);
  cmd->callback([=] {
    check_feature_map(args->opt.feature_map, args->opt.features);
    CaptureStore store(*capture);
    const auto heads = analyze_capture(store, args->opt, terminal_progress("metrics"));
    if (*format == "json") {
      nlohmann::ordered_json j;
      j["capture"] = *capture;
      if (!args->opt.feature_map.empty()) j["feature_map"] = {{"name", args->opt.feature_map}, {"features", args->opt.features}};
      j["heads"] = analysis_json(heads);
      std::cout << j.dump(2) << "\n";
    } else if (*format == "csv") {
      std::cout << to_csv(analysis_table(heads));
    } else {
      std::cout << to_markdown(analysis_table(heads));
    }
  });
}

}  // namespace attnscope::cli
