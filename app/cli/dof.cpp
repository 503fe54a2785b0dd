// `attnscope dof`: degrees of freedom of every head from a capture (SPEC section 5), with the
// eigenvalue spectra kept in a file so a new lambda never recomputes them.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/capture.h"
#include "attnscope/dof.h"
#include "attnscope/dof_json.h"
#include "attnscope/error.h"
#include "common.h"

namespace attnscope::cli {

void DofArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--lambda", lambda, "tolerance lambda: 2^-8, 0.0625 or 1e-3")->capture_default_str();
  cmd->add_option("-J,--samples", settings.samples, "vectors sampled from the queries and keys of each head")
      ->capture_default_str()->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  cmd->add_option("--normalize", normalize, "Gram normalizer n in Sigma = G / n")
      ->check(CLI::IsMember({"trace", "max", "samples", "none"}))->capture_default_str();
  cmd->add_option("--seed", settings.seed, "seed for sampling the vectors")->capture_default_str();
  cmd->add_option("--exact-limit", settings.exact_limit, "largest J with a full eigendecomposition; above, top-k Lanczos with bounds")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", settings.top_k, "eigenvalues kept on the fast path")->capture_default_str()->check(CLI::PositiveNumber);
}

DofSpectra DofArgs::compute(const std::string& capture_dir) {
  settings.normalize = parse_dof_normalize(normalize);
  CaptureStore store(capture_dir);
  return compute_spectra(store, settings, terminal_progress("dof"));
}

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
    const double lambda = parse_lambda(args->lambda);
    if (capture->empty() && spectra_in->empty()) fail("dof", "give --capture DIR or --spectra FILE");
    const DofSpectra sp = spectra_in->empty() ? args->compute(*capture) : load_spectra(*spectra_in);
    if (!out->empty()) save_spectra(*out, sp);
    const auto j = dof_to_json(sp, lambda);
    if (*json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::printf("DoF at lambda = %g (J = %lld, normalize %s)\n", lambda, (long long)sp.settings.samples,
                dof_normalize_name(sp.settings.normalize));
    std::printf("%-6s %9s  %s\n", "layer", "max", "heads");
    for (const auto& l : j["layers"]) {
      std::printf("%-6d %9.2f ", l["layer"].get<int>(), l["dof"].get<double>());
      for (const auto& h : l["heads"]) std::printf(" %7.2f", h["dof"].get<double>());
      std::printf("\n");
    }
    if (!out->empty()) std::printf("spectra saved to %s\n", out->c_str());
  });
}

}  // namespace attnscope::cli
