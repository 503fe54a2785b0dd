// `attnscope maps`: one head's softmax map and a linearized map on one window, with their
// difference, as CSV (token labels on both axes) and, in builds with the GUI, PNG heatmaps.
#include <filesystem>
#include <iostream>

#include "attnscope/capture/capture.h"
#include "attnscope/base/error.h"
#include "attnscope/analysis/map_export.h"
#include "common.h"

namespace attnscope::cli {

void register_maps(CLI::App& app) {
  auto* cmd = app.add_subcommand("maps", "Softmax and linearized attention maps of one head, as CSV and PNG");
  auto capture = std::make_shared<std::string>();
  auto args = std::make_shared<AnalysisArgs>();
  auto layer = std::make_shared<int>(0), head = std::make_shared<int>(0), seq = std::make_shared<int>(0);
  auto out = std::make_shared<std::string>();
  cmd->add_option("-c,--capture", *capture, "capture directory")->required();
  cmd->add_option("--layer", *layer, "layer (from 0)")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--head", *head, "head (from 0)")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seq", *seq, "window of the capture (from 0)")->capture_default_str()->check(CLI::NonNegativeNumber);
  args->add_to(cmd, /*mixers=*/false);
  cmd->add_option("-o,--out", *out, "output prefix: PREFIX_softmax.csv/.png, PREFIX_linear.*, PREFIX_diff.*")->required();
  cmd->callback([=] {
    args->check();
    const std::filesystem::path parent = std::filesystem::absolute(*out).parent_path();
    if (!std::filesystem::is_directory(parent)) fail(*out, "the output directory does not exist");
    CaptureStore store(*capture);
    for (const auto& f : write_head_maps(store, *layer, *head, *seq, args->opt, *out, figure_writer("maps")))
      std::cerr << "wrote " << f << "\n";
  });
}

}  // namespace attnscope::cli
