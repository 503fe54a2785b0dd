// The attnscope command lines behind the workbench's figures, tables and jobs: "Copy as command" on
// a view and the command column of the jobs list print these, and running one headless reproduces
// what the window shows. Every option here is one that app/cli/*.cpp accepts; arguments are quoted
// for a POSIX shell (single quotes, only when needed).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/capture/capture.h"
#include "attnscope/convert/converted_eval.h"
#include "attnscope/distill/distill.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/workbench/session.h"

namespace attnscope::gui {

// `arg` as one POSIX shell word: as is when it holds only safe characters, else in single quotes
// (a quote inside becomes '\'').
std::string shell_quote(const std::string& arg);
// "attnscope" followed by the quoted arguments.
std::string attnscope_command(const std::vector<std::string>& args);

// lambda as --lambda takes it and reads back to the same double: "2^-8" for powers of two (core's
// fmt_lambda), "2^-8.25" for the slider's quarter steps, else the shortest exact decimal.
std::string lambda_arg(double lambda);

// The model options (--model, and --tokenizer when one is set).
std::vector<std::string> model_args(const Session& s);

// attnscope capture --model M --text F... --seq-len L --num-seqs T --seed S [--pre-rope] --out DIR
std::string capture_command(const Session& s, const std::vector<std::string>& texts, const std::string& out_dir);
// attnscope dof --capture DIR --samples J --normalize N --seed S --out SPECTRA (computes and keeps them)
std::string spectra_command(const std::string& capture_dir, const DofSettings& dof, const std::string& spectra_out);
// attnscope dof --spectra F --lambda L --json (the DoF heatmap's numbers)
std::string dof_command(const std::string& spectra, double lambda);
// attnscope allocate --spectra F --lambda L --budget C --strategy S [--multiple-of m] --markdown
std::string allocate_command(const std::string& spectra, double lambda, int64_t budget, AllocStrategy strategy,
                             int64_t multiple);
// attnscope metrics --capture DIR [--feature-map NAME --features M] --seed S [--mixer-state N] --csv
std::string metrics_command(const std::string& capture_dir, const AnalysisOptions& analysis);
// attnscope maps --capture DIR --layer s --head h --seq t [--feature-map NAME --features M] --seed S
//   --out layer{s}_head{h}_seq{t}
std::string maps_command(const std::string& capture_dir, int layer, int head, int seq, const AnalysisOptions& analysis);
// attnscope report --model M --text F... --seq-len L --num-seqs T --capture-seed S --lambda ...
//   --samples J --normalize N --seed S --budget C --multiple-of m [--feature-map NAME --features M]
//   --max-seqs n --mixer-state N --out DIR
std::string report_command(const Session& s, const std::vector<std::string>& texts, const std::string& out_dir);
// attnscope info --model M (what opening a model checks)
std::string info_command(const Session& s);
// attnscope distill --capture DIR --feature-map F [--untied] --loss L [--text F] --steps N --lr X
//   --lr-alpha Y --batch B --schedule S --seed S --checkpoint-every K (--features M | --allocation F |
//   --strategy S --budget C --lambda X --samples J) [--device cuda] --out RUN
std::string distill_command(const DistillOptions& o, const std::string& run_dir);
// attnscope distill --resume RUN
std::string distill_resume_command(const std::string& run_dir);
// attnscope convert --job RUN --out OUT
std::string convert_job_command(const std::string& run_dir, const std::string& out_dir);
// attnscope eval --model CONVERTED --text F... --seq-len L --closeness-windows N [--speed-lengths a,b]
//   --min-seconds s --json
std::string eval_converted_command(const std::string& model_dir, const std::vector<std::string>& texts,
                                   const ConvertedEvalOptions& o);

}  // namespace attnscope::gui
