// The workbench's command lines: each the options the workbench runs, written by command_for from
// the command's core option table (options.h), so what is shown is what the CLI parses and runs.
#include "command_lines.h"

#include "attnscope/allocation/allocate_options.h"
#include "attnscope/analysis/analysis_options.h"
#include "attnscope/analysis/dof_options.h"
#include "attnscope/base/output_options.h"
#include "attnscope/capture/capture_options.h"
#include "attnscope/convert/convert_options.h"
#include "attnscope/model/model_options.h"

namespace attnscope::gui {

namespace {

ModelOptions model_of(const Session& s) {
  ModelOptions m;
  m.model = s.model;
  m.tokenizer = s.tokenizer;
  return m;
}

}  // namespace

std::vector<std::string> model_args(const Session& s) { return option_args(model_source_option_table(), model_of(s)); }

std::string capture_command(const Session& s, const std::vector<std::string>& texts, const std::string& out_dir) {
  CaptureCommand c;
  c.model = model_of(s);
  c.texts = texts;
  c.capture = s.capture;
  return command_for("capture", capture_command_option_table(), c, out_args(out_dir));
}

std::string spectra_command(const std::string& capture_dir, const DofSettings& dof, const std::string& spectra_out) {
  DofCommand d;
  d.capture = capture_dir;
  d.settings = dof;
  return command_for("dof", dof_command_option_table(), d, out_args(spectra_out));
}

std::string dof_command(const std::string& spectra, double lambda) {
  DofCommand d;
  d.spectra = spectra;
  d.settings.lambda = lambda;
  return command_for("dof", dof_command_option_table(), d, format_args(OutputFormat::Json));
}

std::string load_spectra_command(const std::string& spectra) {
  DofCommand d;
  d.spectra = spectra;
  return command_for("dof", dof_command_option_table(), d, format_args(OutputFormat::Json));
}

std::string allocate_command(const std::string& spectra, double lambda, int64_t budget, AllocStrategy strategy,
                             int64_t multiple, const StateBudget& state) {
  AllocateCommand a;
  a.state = state;
  a.state.kv_heads = 0;  // not an option: allocate reads it from the capture
  a.spectra = spectra;
  a.dof.lambda = lambda;
  a.alloc.budget = budget;
  a.alloc.strategy = strategy;
  a.alloc.multiple = multiple;
  return command_for("allocate", allocate_command_option_table(), a, format_args(OutputFormat::Markdown));
}

std::string metrics_command(const std::string& capture_dir, const AnalysisOptions& analysis) {
  MetricsCommand m;
  m.capture = capture_dir;
  m.analysis = analysis;
  return command_for("metrics", metrics_command_option_table(), m, format_args(OutputFormat::Csv));
}

std::string maps_command(const std::string& capture_dir, int layer, int head, int seq, const AnalysisOptions& analysis) {
  MapsCommand m;
  m.capture = capture_dir;
  m.layer = layer;
  m.head = head;
  m.seq = seq;
  m.analysis = analysis;
  const std::string prefix = "layer" + std::to_string(layer) + "_head" + std::to_string(head) + "_seq" + std::to_string(seq);
  return command_for("maps", maps_command_option_table(), m, out_args(prefix));
}

std::string report_command(const Session& s, const std::vector<std::string>& texts, const std::string& out_dir) {
  return report_command(report_options_of(s, texts), out_dir);
}

std::string report_command(const ReportOptions& o, const std::string& out_dir) {
  return command_for("report", report_option_table(), o, out_args(out_dir));
}

std::string info_command(const Session& s) { return command_for("info", model_source_option_table(), model_of(s)); }

std::string convert_job_command(const std::string& run_dir, const std::string& out_dir) {
  ConvertCommand c;
  c.job = run_dir;
  return command_for("convert", convert_command_option_table(), c, out_args(out_dir));
}

std::string eval_converted_command(const std::string& model_dir, const std::vector<std::string>& texts,
                                   const ConvertedEvalOptions& o) {
  EvalOptions e;
  e.model.model = model_dir;
  e.texts = texts;
  if (o.seq_len > 0) e.seq_lens = {o.seq_len};
  e.converted = o;
  return command_for("eval", eval_option_table(), e, format_args(OutputFormat::Json));
}

}  // namespace attnscope::gui
