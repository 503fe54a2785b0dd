// The attnscope command lines behind the workbench's figures, tables and jobs: "Copy as command" on
// a view and the command column of the jobs list print these, and running one headless reproduces
// what the window shows. Each is written from the command's core option table, which app/cli/*.cpp
// registers; arguments are quoted for a POSIX shell (single quotes, only when needed).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/capture/capture.h"
#include "attnscope/convert/converted_eval.h"
#include "attnscope/base/command_line.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/pipeline/report.h"
#include "attnscope/workbench/session.h"

namespace attnscope::gui {

// shell_quote, attnscope_command, number_arg and lambda_arg are core's (attnscope/base/command_line.h);
// distill's command lines too (distill_command, distill_resume_command: distill_options.h). Every
// line below is command_for(COMMAND, its core option table, the options the workbench runs).

// The model options (--model, and --tokenizer when one is set).
std::vector<std::string> model_args(const Session& s);

// attnscope capture --model M --text F... --seq-len L --num-seqs T --seed S [--store-dtype f16] [--pre-rope] --out DIR
std::string capture_command(const Session& s, const std::vector<std::string>& texts, const std::string& out_dir);
// attnscope dof --capture DIR --lambda L --samples J --normalize N --seed S [fast-path knobs] --out SPECTRA
std::string spectra_command(const std::string& capture_dir, const DofSettings& dof, const std::string& spectra_out);
// attnscope dof --spectra F --lambda L --json (the DoF heatmap's numbers)
std::string dof_command(const std::string& spectra, double lambda);
// attnscope dof --spectra F --lambda 2^-8 --json (what loading a spectra file reads)
std::string load_spectra_command(const std::string& spectra);
// attnscope allocate --spectra F --lambda L --budget C --strategy S [--multiple-of m] --markdown
std::string allocate_command(const std::string& spectra, double lambda, int64_t budget, AllocStrategy strategy,
                             int64_t multiple, const StateBudget& state = {});
// attnscope metrics --capture DIR [--feature-map NAME [--features M] [--window W]] --seed S [--max-seqs n]
//   [--sample-rows R] [--mixer-state N [--mixer-tokens P]] --csv
std::string metrics_command(const std::string& capture_dir, const AnalysisOptions& analysis);
// attnscope maps --capture DIR --layer s --head h --seq t [--feature-map NAME ...] --seed S ... --out layer{s}_head{h}_seq{t}
std::string maps_command(const std::string& capture_dir, int layer, int head, int seq, const AnalysisOptions& analysis);
// attnscope report with report_options_of(s, texts) (session.h: what Export report runs) --out DIR
std::string report_command(const Session& s, const std::vector<std::string>& texts, const std::string& out_dir);
std::string report_command(const ReportOptions& o, const std::string& out_dir);
// attnscope info --model M (what opening a model checks)
std::string info_command(const Session& s);
// attnscope convert --job RUN --out OUT
std::string convert_job_command(const std::string& run_dir, const std::string& out_dir);
// attnscope eval --model CONVERTED --text F... [--seq-len L] --closeness-windows N [--speed-lengths a,b]
//   --min-seconds s --json
std::string eval_converted_command(const std::string& model_dir, const std::vector<std::string>& texts,
                                   const ConvertedEvalOptions& o);

}  // namespace attnscope::gui
