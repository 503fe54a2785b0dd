// `attnscope metrics`: every metric of every head of a capture (SPEC section 5).
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/capture/capture.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/head_analysis_table.h"
#include "common.h"

namespace attnscope::cli {

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
    args->check();
    CaptureStore store(*capture);
    const auto heads = analyze_capture(store, args->opt, terminal_progress("metrics"));
    if (*format == "json") {
      nlohmann::ordered_json j;
      j["capture"] = *capture;
      if (!args->opt.feature_map.empty()) {
        j["feature_map"] = {{"name", args->opt.feature_map}, {"features", args->opt.features}};
        if (args->opt.window > 0) j["feature_map"]["window"] = args->opt.window;
      }
      j["heads"] = head_analysis_json(heads);
      std::cout << j.dump(2) << "\n";
      return;
    } else if (*format == "csv") {
      std::cout << to_csv(head_analysis_table(heads));
    } else {
      std::cout << to_markdown(head_analysis_table(heads));
    }
    if (const std::string note = sampling_note(heads); !note.empty()) std::cerr << "metrics: " << note << "\n";
  });
}

}  // namespace attnscope::cli
