// `attnscope dof`: degrees of freedom of every head from a capture (SPEC section 5), with the
// eigenvalue spectra kept in a file so a new lambda never recomputes them.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/capture/capture.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/analysis/dof_json.h"
#include "attnscope/base/error.h"
#include "common.h"

namespace attnscope::cli {

void DofArgs::add_to(CLI::App* cmd) {
  add_lambda_option(cmd, lambda, "tolerance lambda: 2^-8, 0.0625 or 1e-3");
  cmd->add_option("-J,--samples", settings.samples, "vectors sampled from the queries and keys of each head")
      ->capture_default_str()->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  cmd->add_option("--max-samples", settings.max_samples,
                  "cap on J per head: a head whose DoF moves by more than 10% between J/2 and J is computed again at 2J, "
                  "4J, ... up to this (<= --samples: no doubling)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--normalize", normalize, "Gram normalizer n in Sigma = G / n")
      ->check(CLI::IsMember(dof_normalize_names()))->capture_default_str();
  cmd->add_option("--seed", settings.seed, "seed for sampling the vectors")->capture_default_str();
  cmd->add_option("--exact-limit", settings.exact_limit,
                  "largest J with a full eigendecomposition; above, the certified fast path (block Krylov bounds)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", settings.top_k,
                  "the fast path's largest Krylov subspace; a head not within --tolerance by then is solved exactly")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--tolerance", settings.tolerance,
                  "relative width (upper - lower) / DoF the fast path must reach at --lambda")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--device", settings.device, "cpu, cuda or cuda:N; cuda solves every head of a layer at once")
      ->capture_default_str();
}

DofSpectra DofArgs::compute(const std::string& capture_dir) {
  settings.normalize = parse_dof_normalize(normalize);
  settings.lambda = lambda;  // the fast path certifies its bounds there
  CaptureStore store(capture_dir);
  return compute_spectra(store, settings, terminal_progress("dof"));
}

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
  auto args = std::make_shared<DofArgs>();
  auto capture = std::make_shared<std::string>();
  auto spectra_in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* c = cmd->add_option("-c,--capture", *capture, "capture directory (attnscope capture)");
  auto* s = cmd->add_option("--spectra", *spectra_in, "reuse spectra saved by an earlier `dof --out` (no recomputation)");
  c->excludes(s);
  args->add_to(cmd);
  cmd->add_option("-o,--out", *out, "save the spectra (.safetensors) for later lambdas, `allocate` and the GUI");
  cmd->add_flag("--json", *json, "machine-readable output");
  cmd->callback([=] {
    const double lambda = args->lambda;
    if (capture->empty() && spectra_in->empty()) fail("dof", "give --capture DIR or --spectra FILE");
    const DofSpectra sp = spectra_in->empty() ? args->compute(*capture) : load_spectra(*spectra_in);
    if (!out->empty()) save_spectra(*out, sp);
    const auto j = dof_to_json(sp, lambda);
    if (*json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    print_text(j);
    if (!out->empty()) std::printf("spectra saved to %s\n", out->c_str());
  });
}

}  // namespace attnscope::cli
