// `attnscope report`: the whole analysis of a model in one directory (core/report.h says what is in
// it). Parses options (report_option_table), calls write_report, says where the report is.
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "attnscope/analysis/analysis_options.h"
#include "attnscope/base/error.h"
#include "attnscope/base/job.h"
#include "attnscope/pipeline/report.h"
#include "common.h"

namespace fs = std::filesystem;

namespace attnscope::cli {

void register_report(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Capture, DoF, allocation for every strategy, metrics and maps, as tables and figures");
  auto r = std::make_shared<ReportOptions>();
  auto output = std::make_shared<OutputOptions>();
  r->model = default_model();
  add_option_table(cmd, report_option_table(), r);
  add_out_option(cmd, output, "report directory (replaced only by a complete report)", true);
  cmd->callback([=] {
    check_as_usage([&] { check_analysis_options(r->analysis); });
    ReportOptions o = *r;
    o.capture.fewer_windows_ok = cmd->get_option("--num-seqs")->count() == 0;  // given: exactly that many
    if (o.texts.empty()) o.texts = default_texts();
    const FigureWriter* figures = figure_writer("report");
    // The same job runner as the workbench's, here in the foreground with a terminal bar.
    ReportResult result;
    run_job(JobKind::Report, "report of " + fs::path(o.model).filename().string(), invocation(),
            [&](Job& job) { result = write_report(o, output->out, figures, job.progress()); }, terminal_progress("report"));
    std::cout << "report written to " << result.dir << "/index.md\n";
  });
}

}  // namespace attnscope::cli
