// The option table of `attnscope report` (report.h): the catalogue's definitions bound to
// ReportOptions, most through the capture's, DoF's and analysis' own tables.
#include "attnscope/allocation/allocate_options.h"
#include "attnscope/analysis/analysis_options.h"
#include "attnscope/analysis/dof_options.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/capture/capture_options.h"
#include "attnscope/model/compute_dtype.h"
#include "attnscope/pipeline/report.h"

namespace attnscope {

namespace {

using ReportRow = Option<ReportOptions>;

bool report_has_map(const ReportOptions& o) { return !o.analysis.feature_map.empty(); }
bool report_has_mixers(const ReportOptions& o) { return o.analysis.mixer_state > 0; }

// An analysis row of the report, written back even at 0: the report's defaults are a map with
// M = 64 and mixers of state 16, so 0 is a value here, not "not given".
ReportRow report_analysis_row(const Option<AnalysisOptions>& row) { return nest(&ReportOptions::analysis, row); }

}  // namespace

const OptionTable<ReportOptions>& report_option_table() {
  using R = ReportOptions;
  using A = AnalysisOptions;
  static const OptionTable<R> rows = [] {
    const auto& capture = capture_option_table();
    const auto& dof = dof_option_table();
    const auto& analysis = analysis_option_table();
    OptionTable<R> t = {
        bind(opt::model, &R::model),
        bind(opt::tokenizer, &R::tokenizer),
        compute_dtype_option<R>(),
        described(bind(opt::texts, &R::texts), "sample text files (default: resources/texts/*.txt)"),
        described(nest(&R::capture, option_by_flag(capture, "--seq-len")), "tokens per window (capped at the context length)"),
        described(nest(&R::capture, option_by_flag(capture, "--num-seqs")), "windows to capture"),
        renamed(nest(&R::capture, option_by_flag(capture, "--seed")), opt::capture_seed),
        then(described(bind(opt::lambda, &R::lambda, parse_lambda, lambda_arg), "tolerance lambda: 2^-8, 0.0625 or 1e-3"),
             +[](R& o) { o.dof.lambda = o.lambda; }),
    };
    for (const Option<DofSettings>& row : dof)
      if (row.flag() != "--lambda" && row.flag() != "--block") t.push_back(nest(&R::dof, row));
    t.push_back(described(bind(opt::budget, &R::budget), "feature budget C (mean feature dimension)"));
    t.push_back(bind(opt::multiple_of, &R::multiple));
    t.push_back(with_empty_value(described(report_analysis_row(option_by_flag(analysis, "--feature-map")),
                                           "feature map of the linear maps (\"\" = softmax only)")));
    t.push_back(only_when(report_analysis_row(described(bind(with_range(opt::features, whole_range(0, opt::kMaxFeatures)),
                                                             &A::features),
                                                        "its feature dimension M (0: its natural size)")),
                          report_has_map));
    t.push_back(only_when(report_analysis_row(option_by_flag(analysis, "--window")), report_has_map));
    t.push_back(report_analysis_row(described(bind(opt::max_seqs, &A::max_seqs), "metrics on the first N windows (0 = all)")));
    t.push_back(report_analysis_row(bind(opt::mixer_state, &A::mixer_state)));
    t.push_back(report_analysis_row(option_by_flag(analysis, "--sample-rows")));
    t.push_back(only_when(report_analysis_row(omitted_at_default(bind(opt::mixer_tokens, &A::mixer_tokens))), report_has_mixers));
    return t;
  }();
  return rows;
}

}  // namespace attnscope
