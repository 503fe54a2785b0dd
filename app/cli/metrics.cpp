// `attnscope metrics`: every metric of every head of a capture (SPEC section 5).
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/capture/capture.h"
#include "attnscope/analysis/analysis_options.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/head_analysis_table.h"
#include "common.h"

namespace attnscope::cli {

void register_metrics(CLI::App& app) {
  auto* cmd = app.add_subcommand("metrics", "Entropy, monotonicity, linear-map errors and mixer distances of every head");
  auto m = std::make_shared<MetricsCommand>();
  auto fmt = std::make_shared<FormatOptions>();
  add_option_table(cmd, metrics_command_option_table(), m);
  require(cmd, "--capture");
  add_format_options(cmd, fmt, {OutputFormat::Json, OutputFormat::Csv});
  cmd->callback([=] {
    check_as_usage([&] { check_analysis_options(m->analysis); });
    const AnalysisOptions& opt = m->analysis;
    CaptureStore store(m->capture);
    const auto heads = analyze_capture(store, opt, terminal_progress("metrics"));
    if (fmt->format == OutputFormat::Json) {
      nlohmann::ordered_json j;
      j["capture"] = m->capture;
      if (!opt.feature_map.empty()) {
        j["feature_map"] = {{"name", opt.feature_map}, {"features", opt.features}};
        if (opt.window > 0) j["feature_map"]["window"] = opt.window;
      }
      j["heads"] = head_analysis_json(heads);
      std::cout << j.dump(2) << "\n";
      return;
    } else if (fmt->format == OutputFormat::Csv) {
      std::cout << to_csv(head_analysis_table(heads));
    } else {
      std::cout << to_markdown(head_analysis_table(heads));
    }
    if (const std::string note = sampling_note(heads); !note.empty()) std::cerr << "metrics: " << note << "\n";
  });
}

}  // namespace attnscope::cli
