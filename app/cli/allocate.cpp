// `attnscope allocate`: feature dimensions per layer (or head) under a budget, Algorithm 1.
#include <iostream>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "attnscope/allocation/allocate_options.h"
#include "attnscope/allocation/allocation.h"
#include "attnscope/allocation/allocation_file.h"
#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "common.h"

namespace attnscope::cli {

void register_allocate(CLI::App& app) {
  auto* cmd = app.add_subcommand("allocate", "Feature dimensions under a budget (Algorithm 1: fix, dof, dof-clip, per-head)");
  auto a = std::make_shared<AllocateCommand>();
  auto fmt = std::make_shared<FormatOptions>();
  add_option_table(cmd, allocate_command_option_table(), a);
  exclusive(cmd, {"--spectra", "--capture"});
  require(cmd, "--budget");
  add_format_options(cmd, fmt, {OutputFormat::Json, OutputFormat::Markdown, OutputFormat::Latex, OutputFormat::Csv});
  cmd->callback([=] {
    if (a->spectra.empty() && a->capture.empty()) throw CLI::RequiredError("--spectra FILE or --capture DIR");
    const DofSpectra s = a->spectra.empty() ? compute_spectra_of(a->capture, a->dof) : load_spectra(a->spectra);
    AllocOptions o = a->alloc;
    o.state = a->state;
    // The capture's window length and key/value heads (the one given, or the one the spectra were computed from).
    const std::string capture_dir = !a->capture.empty() ? a->capture : s.capture_dir;
    if (o.state.given() && !capture_dir.empty() && std::filesystem::is_directory(capture_dir)) {
      const CaptureStore cap(capture_dir);
      if (o.state.context == 0) o.state.context = cap.seq_len();
      o.state.kv_heads = cap.num_kv_heads();
    }
    const std::string format = fmt->format == OutputFormat::Json       ? "json"
                               : fmt->format == OutputFormat::Csv      ? "csv"
                               : fmt->format == OutputFormat::Latex    ? "latex"
                               : fmt->format == OutputFormat::Markdown ? "markdown"
                                                                       : "text";
    const DofAllocation da = allocation_at(s, a->dof.lambda, o);
    const Allocation& a = da.allocation;
    // Fast-path heads are known only to [lower, upper]; the allocation uses the midpoint, and says so
    // when that matters (> 1%). Likewise for heads whose DoF is not converged in J.
    if (!da.wide_bounds.empty())
      std::cerr << "allocate: " << da.wide_bounds.size() << " head(s) have DoF bounds wider than 1% (fast path); using "
                << "their midpoints (raise --top-k or --exact-limit for exact values)\n";
    const auto unconverged = da.unconverged_heads();
    if (!unconverged.empty())
      std::cerr << "allocate: " << unconverged.size() << " head(s) change DoF by more than "
                << 100 * kDofConvergenceTolerance << "% between J/2 and J (not converged; sample more)\n";
    const std::string model = std::filesystem::path(s.model.empty() ? s.capture_dir : s.model).filename().string();

    if (format == "json") {
      std::cout << allocation_file_json(da).dump(2) << "\n";
      return;
    }
    if (format == "csv") {
      const auto values = dof_values(da.head_dof);
      Table t;
      t.header = {"layer", "head", "dof", "dim"};
      for (size_t l = 0; l < values.size(); ++l)
        for (size_t h = 0; h < values[l].size(); ++h)
          t.add_row({std::to_string(l), std::to_string(h), fmt_number(values[l][h], 6), std::to_string(a.dims[l][h])});
      std::cout << to_csv(t);
      return;
    }
    std::vector<Table> tables = {allocation_table(model, {a}, da.convergence), dof_grid_table(da.head_dof, da.lambda, da.convergence)};
    if (o.strategy == AllocStrategy::PerHead) tables.push_back(head_dims_table(a));
    for (const Table& t : tables) std::cout << (format == "latex" ? to_latex(t) : to_markdown(t)) << "\n";
  });
}

}  // namespace attnscope::cli
