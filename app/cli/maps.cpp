// `attnscope maps`: one head's softmax map and a linearized map on one window, with their
// difference, as CSV (token labels on both axes) and, in builds with the GUI, PNG heatmaps.
#include <filesystem>
#include <iostream>

#include "attnscope/capture/capture.h"
#include "attnscope/base/error.h"
#include "attnscope/analysis/analysis_options.h"
#include "attnscope/analysis/map_export.h"
#include "common.h"

namespace attnscope::cli {

void register_maps(CLI::App& app) {
  auto* cmd = app.add_subcommand("maps", "Softmax and linearized attention maps of one head, as CSV and PNG");
  auto m = std::make_shared<MapsCommand>();
  auto output = std::make_shared<OutputOptions>();
  add_option_table(cmd, maps_command_option_table(), m);
  for (const char* flag : {"--capture", "--layer", "--head"}) require(cmd, flag);
  add_out_option(cmd, output, "output prefix: PREFIX_softmax.csv/.png, PREFIX_linear.*, PREFIX_diff.*", true);
  cmd->callback([=] {
    check_as_usage([&] { check_analysis_options(m->analysis); });
    const std::string* out = &output->out;
    const std::filesystem::path parent = std::filesystem::absolute(*out).parent_path();
    if (!std::filesystem::is_directory(parent)) fail(*out, "the output directory does not exist");
    CaptureStore store(m->capture);
    for (const auto& f : write_head_maps(store, int(m->layer), int(m->head), int(m->seq), m->analysis, *out, figure_writer("maps")))
      std::cerr << "wrote " << f << "\n";
  });
}

}  // namespace attnscope::cli
