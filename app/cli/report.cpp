// `attnscope report`: the whole analysis of a model in one directory (core/report.h says what is in
// it). Parses options, calls write_report, says where the report is.
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "attnscope/base/error.h"
#include "attnscope/base/job.h"
#include "attnscope/pipeline/report.h"
#include "common.h"

namespace fs = std::filesystem;

namespace attnscope::cli {

namespace {

struct ReportArgs {
  ModelArgs model;
  ReportOptions report;
  DofArgs dof;
  AnalysisArgs analysis;
  std::string out;
};

void run_report(ReportArgs& a) {
  a.analysis.check();
  ReportOptions o = a.report;
  o.model = a.model.model;
  o.tokenizer = a.model.tokenizer;
  o.compute = a.model.compute;
  if (o.texts.empty()) o.texts = default_texts();
  o.lambda = a.dof.lambda;
  o.dof = a.dof.settings;
  o.dof.normalize = parse_dof_normalize(a.dof.normalize);
  o.analysis = a.analysis.opt;
  const FigureWriter* figures = figure_writer("report");
  // The same job runner as the workbench's, here in the foreground with a terminal bar.
  ReportResult r;
  run_job(JobKind::Report, "report of " + fs::path(o.model).filename().string(), invocation(),
          [&](Job& job) { r = write_report(o, a.out, figures, job.progress()); }, terminal_progress("report"));
  std::cout << "report written to " << r.dir << "/index.md\n";
}

}  // namespace

void register_report(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Capture, DoF, allocation for every strategy, metrics and maps, as tables and figures");
  auto a = std::make_shared<ReportArgs>();
  a->analysis.opt = ReportOptions::default_report_analysis();
  a->model.add_to(cmd);
  cmd->add_option("-t,--text", a->report.texts, "sample text files (default: resources/texts/*.txt)");
  cmd->add_option("-L,--seq-len", a->report.capture.seq_len, "tokens per window (capped at the context length)")
      ->capture_default_str()->check(CLI::Range(2, 1 << 20));
  cmd->add_option("-T,--num-seqs", a->report.capture.num_seqs, "windows to capture")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--capture-seed", a->report.capture.seed, "seed for drawing the windows")->capture_default_str();
  a->dof.add_to(cmd);
  cmd->add_option("-C,--budget", a->report.budget, "feature budget C (mean feature dimension)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--multiple-of", a->report.multiple, "round every dimension to a multiple of this")->capture_default_str()->check(CLI::PositiveNumber);
  // --seed belongs to the DoF options here; the feature-map seed follows it (DofArgs).
  cmd->add_option("--feature-map", a->analysis.opt.feature_map, "feature map of the linear maps (\"\" = softmax only)")
      ->check(feature_map_validator())->capture_default_str();
  cmd->add_option("-M,--features", a->analysis.opt.features, "its feature dimension M")->capture_default_str()->check(CLI::NonNegativeNumber);
  add_window_option(cmd, a->analysis.opt);
  cmd->add_option("--max-seqs", a->analysis.opt.max_seqs, "metrics on the first N windows (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--mixer-state", a->analysis.opt.mixer_state, "state size N of the structured mixers (0 = skip)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  add_scale_options(cmd, a->analysis.opt);
  cmd->add_option("-o,--out", a->out, "report directory (replaced only by a complete report)")->required();
  cmd->callback([a] { run_report(*a); });
}

}  // namespace attnscope::cli
