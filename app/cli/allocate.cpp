// `attnscope allocate`: feature dimensions per layer (or head) under a budget, Algorithm 1.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "attnscope/allocation/allocation.h"
#include "attnscope/allocation/allocation_file.h"
#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/error.h"
#include "common.h"

namespace attnscope::cli {

void register_allocate(CLI::App& app) {
  auto* cmd = app.add_subcommand("allocate", "Feature dimensions under a budget (Algorithm 1: fix, dof, dof-clip, per-head)");
  auto args = std::make_shared<DofArgs>();
  auto spectra = std::make_shared<std::string>();
  auto capture = std::make_shared<std::string>();
  auto budget = std::make_shared<int64_t>(0);
  auto strategy = std::make_shared<std::string>("dof");
  auto multiple = std::make_shared<int>(1);
  auto format = std::make_shared<std::string>("text");
  auto* sp = cmd->add_option("--spectra", *spectra, "spectra saved by `attnscope dof --out`");
  auto* cp = cmd->add_option("-c,--capture", *capture, "capture directory (computes the spectra)");
  sp->excludes(cp);
  args->add_to(cmd);
  // An integer: 64.7, nan, 16x or an empty string are usage errors, not truncated (or read as 0).
  const CLI::Validator whole_integer(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        std::strtoll(text.c_str(), &end, 10);
        const bool ok = !text.empty() && !std::isspace(static_cast<unsigned char>(text[0])) && *end == '\0' && errno == 0;
        return ok ? std::string() : "must be a whole number, got '" + text + "'";
      },
      "INT");
  cmd->add_option("-C,--budget", *budget, "cost C, an integer: the mean feature dimension (e.g. the head dimension)")
      ->required()->check(whole_integer);
  cmd->add_option("--strategy", *strategy, "fix | dof | dof-clip | per-head")
      ->check(CLI::IsMember(alloc_strategy_names()))->capture_default_str();
  cmd->add_option("--multiple-of", *multiple, "round every dimension to a multiple of this")
      ->capture_default_str()->check(CLI::PositiveNumber);
  auto* g = cmd->add_option_group("format");
  g->add_flag_callback("--json", [format] { *format = "json"; }, "JSON");
  g->add_flag_callback("--markdown", [format] { *format = "markdown"; }, "Markdown tables (paper Tables 1 and 2)");
  g->add_flag_callback("--latex", [format] { *format = "latex"; }, "LaTeX tables");
  g->add_flag_callback("--csv", [format] { *format = "csv"; }, "CSV: layer, head, dof, dim");
  g->require_option(0, 1);
  cmd->callback([=] {
    if (spectra->empty() && capture->empty()) throw CLI::RequiredError("--spectra FILE or --capture DIR");
    const DofSpectra s = spectra->empty() ? args->compute(*capture) : load_spectra(*spectra);
    AllocOptions o;
    o.strategy = parse_alloc_strategy(*strategy);
    o.budget = *budget;
    o.multiple = *multiple;
    const DofAllocation da = allocation_at(s, args->lambda, o);
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

    if (*format == "json") {
      std::cout << allocation_file_json(da).dump(2) << "\n";
      return;
    }
    if (*format == "csv") {
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
    for (const Table& t : tables) std::cout << (*format == "latex" ? to_latex(t) : to_markdown(t)) << "\n";
  });
}

}  // namespace attnscope::cli
