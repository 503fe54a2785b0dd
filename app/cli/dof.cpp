// `attnscope dof`: degrees of freedom of every head from a capture (SPEC section 5), with the
// eigenvalue spectra kept in a file so a new lambda never recomputes them.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/capture/capture.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/analysis/dof_json.h"
#include "attnscope/analysis/dof_options.h"
#include "attnscope/base/error.h"
#include "common.h"

namespace attnscope::cli {

namespace {

std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// The bounds, when they differ at the printed precision.
bool shows_bounds(const nlohmann::ordered_json& h) {
  return fixed2(h["lower"].get<double>()) != fixed2(h["upper"].get<double>());
}

// One head's cell of the text table: the DoF, its [lower, upper] bounds when they differ (fast
// path), the J used when heads differ, and '*' when it moves by more than the tolerance from J/2.
std::string head_cell(const nlohmann::ordered_json& h, bool show_j) {
  std::string cell = fixed2(h["dof"].get<double>());
  if (shows_bounds(h)) cell += " [" + fixed2(h["lower"].get<double>()) + ", " + fixed2(h["upper"].get<double>()) + "]";
  if (show_j) cell += " (J " + std::to_string(h["samples"].get<int64_t>()) + ")";
  // Always one flag column, so flagged and unflagged cells line up.
  cell += h["converged"].is_boolean() && !h["converged"].get<bool>() ? "*" : " ";
  return cell;
}

void print_text(const nlohmann::ordered_json& j) {
  const bool same_j = !j["samples_used"].is_null();
  std::printf("DoF at lambda = %g (normalize %s; ", j["lambda"].get<double>(), j["normalize"].get<std::string>().c_str());
  if (same_j)
    std::printf("J = %lld per head", (long long)j["samples_used"].get<int64_t>());
  else
    std::printf("J per head in parentheses");
  std::printf(", %lld requested)\n", (long long)j["samples"].get<int64_t>());
  // Every cell padded to the widest, so the columns line up whatever the cells carry.
  std::vector<std::vector<std::string>> rows;
  size_t width = 0;
  bool bounds = false;
  for (const auto& l : j["layers"]) {
    rows.emplace_back();
    for (const auto& h : l["heads"]) {
      rows.back().push_back(head_cell(h, !same_j));
      width = std::max(width, rows.back().back().size());
      bounds = bounds || shows_bounds(h);
    }
  }
  std::printf("%-6s %9s  %s\n", "layer", "max", "heads");
  for (size_t s = 0; s < rows.size(); ++s) {
    const auto& l = j["layers"][s];
    std::printf("%-6d %9.2f ", l["layer"].get<int>(), l["dof"].get<double>());
    for (const std::string& cell : rows[s]) std::printf("  %*s", int(width), cell.c_str());
    std::printf("\n");
  }
  if (bounds)
    std::printf("[lower, upper]: certified bounds of the fast path (Ritz values and the trace); the DoF is their midpoint\n");
  if (j["fallback_heads"].get<int>() > 0)
    std::printf("note: %d head(s) solved exactly: their fast-path bounds were not within %g%% at the largest subspace (--top-k)\n",
                j["fallback_heads"].get<int>(), 100 * j["tolerance"].get<double>());
  int64_t unresolved = 0;
  for (const auto& l : j["layers"])
    for (const auto& h : l["heads"]) unresolved += h["unresolved"].get<int64_t>();
  if (unresolved > 0)
    std::printf("note: %lld eigenvalue(s) below the eigensolver's resolution counted 0, as lambda exp(-c) is smaller still;"
                " in exact arithmetic each could count up to 1 (use --normalize trace)\n",
                (long long)unresolved);
  if (j["unconverged_heads"].get<int>() > 0)
    std::printf("* moves by more than %g%% between J/2 and J even at the J it ended with (doubled per head up to --max-samples %lld): "
                "not converged, raise --max-samples\n",
                100 * j["convergence_tolerance"].get<double>(), (long long)j["max_samples"].get<int64_t>());
}

}  // namespace

void register_dof(CLI::App& app) {
  auto* cmd = app.add_subcommand("dof", "Degrees of freedom of every head at a tolerance lambda");
  auto d = std::make_shared<DofCommand>();
  auto output = std::make_shared<OutputOptions>();
  auto format = std::make_shared<FormatOptions>();
  add_option_table(cmd, dof_command_option_table(), d);
  exclusive(cmd, {"--capture", "--spectra"});
  add_out_option(cmd, output, "save the spectra (.safetensors) for later lambdas, `allocate` and the GUI", false);
  add_format_options(cmd, format, {OutputFormat::Json});
  cmd->callback([=] {
    const double lambda = d->settings.lambda;
    const std::string* out = &output->out;
    if (d->capture.empty() && d->spectra.empty()) fail("dof", "give --capture DIR or --spectra FILE");
    const DofSpectra sp = d->spectra.empty() ? compute_spectra_of(d->capture, d->settings) : load_spectra(d->spectra);
    if (!out->empty()) save_spectra(*out, sp);
    const auto j = dof_to_json(sp, lambda);
    if (format->format == OutputFormat::Json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    print_text(j);
    if (!out->empty()) std::printf("spectra saved to %s\n", out->c_str());
  });
}

}  // namespace attnscope::cli
