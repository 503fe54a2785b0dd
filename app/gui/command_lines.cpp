#include "command_lines.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "attnscope/base/table.h"

namespace attnscope::gui {

namespace {

std::string str(int64_t v) { return std::to_string(v); }
std::string str(uint64_t v) { return std::to_string(v); }
std::string str(int v) { return std::to_string(v); }

void add_feature_map(std::vector<std::string>& a, const AnalysisOptions& o) {
  if (o.feature_map.empty()) return;
  a.insert(a.end(), {"--feature-map", o.feature_map});
  if (o.features > 0) a.insert(a.end(), {"--features", str(o.features)});
  if (o.window > 0) a.insert(a.end(), {"--window", str(o.window)});
}

void add_texts(std::vector<std::string>& a, const std::vector<std::string>& texts) {
  // One --text per file: CLI11 accumulates repeated options, and a file name can never be taken
  // for the next option.
  for (const std::string& t : texts) a.insert(a.end(), {"--text", t});
}

void add_dof_settings(std::vector<std::string>& a, const DofSettings& d) {
  const DofSettings defaults;
  a.insert(a.end(), {"--samples", str(d.samples), "--normalize", dof_normalize_name(d.normalize), "--seed", str(d.seed)});
  if (d.exact_limit != defaults.exact_limit) a.insert(a.end(), {"--exact-limit", str(d.exact_limit)});
  if (d.top_k != defaults.top_k) a.insert(a.end(), {"--top-k", str(d.top_k)});
}

}  // namespace

std::vector<std::string> model_args(const Session& s) {
  std::vector<std::string> a = {"--model", s.model};
  if (!s.tokenizer.empty()) a.insert(a.end(), {"--tokenizer", s.tokenizer});
  return a;
}

std::string capture_command(const Session& s, const std::vector<std::string>& texts, const std::string& out_dir) {
  std::vector<std::string> a = {"capture"};
  const auto m = model_args(s);
  a.insert(a.end(), m.begin(), m.end());
  add_texts(a, texts);
  a.insert(a.end(), {"--seq-len", str(s.capture.seq_len), "--num-seqs", str(s.capture.num_seqs), "--seed",
                     str(s.capture.seed)});
  if (s.capture.dtype == DType::F16) a.insert(a.end(), {"--store-dtype", "f16"});
  if (s.capture.pre_rope) a.push_back("--pre-rope");
  a.insert(a.end(), {"--out", out_dir});
  return attnscope_command(a);
}

std::string spectra_command(const std::string& capture_dir, const DofSettings& dof, const std::string& spectra_out) {
  std::vector<std::string> a = {"dof", "--capture", capture_dir};
  add_dof_settings(a, dof);
  a.insert(a.end(), {"--out", spectra_out});
  return attnscope_command(a);
}

std::string dof_command(const std::string& spectra, double lambda) {
  return attnscope_command({"dof", "--spectra", spectra, "--lambda", lambda_arg(lambda), "--json"});
}

std::string allocate_command(const std::string& spectra, double lambda, int64_t budget, AllocStrategy strategy,
                             int64_t multiple) {
  std::vector<std::string> a = {"allocate",   "--spectra", spectra, "--lambda", lambda_arg(lambda),
                                "--budget",   str(budget), "--strategy", alloc_strategy_name(strategy)};
  if (multiple > 1) a.insert(a.end(), {"--multiple-of", str(multiple)});
  a.push_back("--markdown");
  return attnscope_command(a);
}

std::string metrics_command(const std::string& capture_dir, const AnalysisOptions& o) {
  std::vector<std::string> a = {"metrics", "--capture", capture_dir};
  add_feature_map(a, o);
  a.insert(a.end(), {"--seed", str(o.seed)});
  if (o.max_seqs > 0) a.insert(a.end(), {"--max-seqs", str(o.max_seqs)});
  if (o.mixer_state > 0) a.insert(a.end(), {"--mixer-state", str(o.mixer_state)});
  a.push_back("--csv");
  return attnscope_command(a);
}

std::string maps_command(const std::string& capture_dir, int layer, int head, int seq, const AnalysisOptions& o) {
  std::vector<std::string> a = {"maps", "--capture", capture_dir, "--layer", str(layer), "--head", str(head),
                                "--seq", str(seq)};
  add_feature_map(a, o);
  a.insert(a.end(), {"--seed", str(o.seed), "--out",
                     "layer" + str(layer) + "_head" + str(head) + "_seq" + str(seq)});
  return attnscope_command(a);
}

std::string report_command(const Session& s, const std::vector<std::string>& texts, const std::string& out_dir) {
  std::vector<std::string> a = {"report"};
  const auto m = model_args(s);
  a.insert(a.end(), m.begin(), m.end());
  add_texts(a, texts);
  a.insert(a.end(), {"--seq-len", str(s.capture.seq_len), "--num-seqs", str(s.capture.num_seqs), "--capture-seed",
                     str(s.capture.seed), "--lambda", lambda_arg(s.lambda)});
  add_dof_settings(a, s.dof);
  a.insert(a.end(), {"--budget", str(s.budget), "--multiple-of", str(s.multiple)});
  // `report` measures softmax only when given an empty feature map; its default is PRF.
  a.insert(a.end(), {"--feature-map", s.analysis.feature_map});
  if (!s.analysis.feature_map.empty() && s.analysis.features > 0)
    a.insert(a.end(), {"--features", str(s.analysis.features)});
  if (!s.analysis.feature_map.empty() && s.analysis.window > 0) a.insert(a.end(), {"--window", str(s.analysis.window)});
  a.insert(a.end(), {"--max-seqs", str(s.analysis.max_seqs), "--mixer-state", str(s.analysis.mixer_state), "--out",
                     out_dir});
  return attnscope_command(a);
}

std::string info_command(const Session& s) {
  std::vector<std::string> a = {"info"};
  const auto m = model_args(s);
  a.insert(a.end(), m.begin(), m.end());
  return attnscope_command(a);
}

std::string convert_job_command(const std::string& run_dir, const std::string& out_dir) {
  return attnscope_command({"convert", "--job", run_dir, "--out", out_dir});
}

std::string eval_converted_command(const std::string& model_dir, const std::vector<std::string>& texts,
                                   const ConvertedEvalOptions& o) {
  std::vector<std::string> a = {"eval", "--model", model_dir};
  add_texts(a, texts);
  if (o.seq_len > 0) a.insert(a.end(), {"--seq-len", str(o.seq_len)});
  a.insert(a.end(), {"--closeness-windows", str(o.closeness_windows)});
  if (!o.speed_lengths.empty()) {
    std::string lengths;
    for (const int l : o.speed_lengths) lengths += (lengths.empty() ? "" : ",") + str(l);
    a.insert(a.end(), {"--speed-lengths", lengths});
  }
  a.insert(a.end(), {"--min-seconds", number_arg(o.min_seconds), "--json"});
  return attnscope_command(a);
}

}  // namespace attnscope::gui
