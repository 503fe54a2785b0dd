#include "attnscope/analysis/head_analysis_table.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace attnscope {
namespace {

nlohmann::ordered_json number(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json metrics_json(const HeadMetrics& m) {
  nlohmann::ordered_json j;
  j["entropy"] = number(m.entropy);
  j["normalized_entropy"] = number(m.normalized_entropy);
  if (m.monotonicity) {
    j["monotonicity"] = number(m.monotonicity->spearman);
    j["discordant_fraction"] = number(m.monotonicity->discordant_fraction);
  }
  if (m.kl) j["kl"] = number(*m.kl);
  if (m.cross_entropy) j["cross_entropy"] = number(*m.cross_entropy);
  if (m.kernel_rel_error) j["kernel_rel_error"] = number(*m.kernel_rel_error);
  if (m.output_rel_error) j["output_rel_error"] = number(*m.output_rel_error);
  if (m.nonpositive_row_fraction) j["nonpositive_row_fraction"] = number(*m.nonpositive_row_fraction);
  j["undefined_rows"] = m.undefined_rows;
  if (m.sampled()) {
    // Which metrics are estimates, from how many rows, and their standard errors.
    nlohmann::ordered_json se;
    for (const auto& [name, v] : m.standard_error) se[name] = number(v);
    j["sampled_rows"] = {{"rows", m.rows}, {"of", m.rows_total}, {"standard_error", se}};
  }
  return j;
}

}  // namespace

nlohmann::ordered_json head_analysis_json(const std::vector<HeadAnalysis>& heads) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const HeadAnalysis& a : heads) {
    nlohmann::ordered_json j;
    j["layer"] = a.layer;
    j["head"] = a.head;
    j["softmax"] = metrics_json(a.softmax);
    j["decay_length"] = number(a.decay_length);  // null: +inf (no decay fits) or not measured
    if (a.linear) j["linear"] = metrics_json(*a.linear);
    if (a.mixers)
      j["mixers"] = {{"state_size", a.mixers->state_size}, {"tokens", a.mixers->tokens}, {"toeplitz", number(a.mixers->toeplitz)},
                     {"causal_low_rank", number(a.mixers->causal_low_rank)}, {"retnet", number(a.mixers->retnet)},
                     {"ssd", number(a.mixers->ssd)},           {"ssd_d", number(a.mixers->ssd_d)},
                     {"semiseparable", number(a.mixers->semiseparable)}, {"window_size", a.mixers->window_size},
                     {"window", number(a.mixers->window)}, {"student", student_name(best_student(*a.mixers))}};
    arr.push_back(j);
  }
  return arr;
}

Table head_analysis_table(const std::vector<HeadAnalysis>& heads) {
  Table t;
  t.header = {"layer", "head", "entropy", "normalized_entropy", "monotonicity", "discordant_fraction", "decay_length"};
  const bool lin = !heads.empty() && heads.front().linear.has_value();
  const bool mix = !heads.empty() && heads.front().mixers.has_value();
  // The linear-map columns carry the JSON names with a "linear_" prefix where softmax has the same.
  if (lin)
    for (const char* c : {"linear_entropy", "linear_monotonicity", "kl", "cross_entropy", "kernel_rel_error",
                          "output_rel_error", "nonpositive_row_fraction", "undefined_rows"})
      t.header.push_back(c);
  if (mix)
    for (const char* c : {"toeplitz", "causal_low_rank", "retnet", "ssd", "ssd_d", "semiseparable", "window", "student"})
      t.header.push_back(c);
  auto f = [](double v) { return fmt_number(v, 6); };
  for (const HeadAnalysis& a : heads) {
    const HeadMetrics& m = a.softmax;
    std::vector<std::string> row = {std::to_string(a.layer), std::to_string(a.head), f(m.entropy),
                                    f(m.normalized_entropy), f(m.monotonicity ? m.monotonicity->spearman : NAN),
                                    f(m.monotonicity ? m.monotonicity->discordant_fraction : NAN), f(a.decay_length)};
    if (lin) {
      const HeadMetrics& l = *a.linear;
      for (double v : {l.entropy, l.monotonicity ? l.monotonicity->spearman : NAN, l.kl.value_or(NAN),
                       l.cross_entropy.value_or(NAN), l.kernel_rel_error.value_or(NAN),
                       l.output_rel_error.value_or(NAN), l.nonpositive_row_fraction.value_or(NAN)})
        row.push_back(f(v));
      row.push_back(std::to_string(l.undefined_rows));
    }
    if (mix) {
      const MixerDistances& x = *a.mixers;
      for (double v : {x.toeplitz, x.causal_low_rank, x.retnet, x.ssd, x.ssd_d, x.semiseparable, x.window}) row.push_back(f(v));
      row.push_back(student_name(best_student(x)));
    }
    t.add_row(row);
  }
  return t;
}

std::string sampling_note(const std::vector<HeadAnalysis>& heads) {
  // The rows of the first sampled head (every head samples the same number), and per metric the
  // largest standard error over the heads.
  int64_t rows = 0, total = 0;
  std::map<std::string, double> worst[2];
  for (const HeadAnalysis& a : heads) {
    const HeadMetrics* sides[2] = {&a.softmax, a.linear ? &*a.linear : nullptr};
    for (int i = 0; i < 2; ++i) {
      if (!sides[i] || !sides[i]->sampled()) continue;
      rows = sides[i]->rows, total = sides[i]->rows_total;
      for (const auto& [name, se] : sides[i]->standard_error)
        if (!worst[i].count(name) || se > worst[i][name] || std::isnan(se)) worst[i][name] = se;
    }
  }
  if (rows == 0) return "";
  std::string out = "Estimated from " + std::to_string(rows) + " of " + std::to_string(total) +
                    " query rows per head (positions sampled per head, the same in every window; largest standard error over the heads):";
  const char* side_name[2] = {" softmax", "; linear map"};
  for (int i = 0; i < 2; ++i) {
    if (worst[i].empty()) continue;
    out += side_name[i];
    const char* sep = " ";
    for (const auto& [name, se] : worst[i]) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2g", se);
      out += sep + name + " (SE " + buf + ")";
      sep = ", ";
    }
  }
  return out + ". Every other metric is exact.";
}

}  // namespace attnscope
