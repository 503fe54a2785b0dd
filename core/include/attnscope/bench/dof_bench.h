// `attnscope bench dof`: what one layer's DoF spectra cost, per head, side by side on the same
// sampled Grams: LAPACK dsyevd eigenvalues only (the exact path's solver), LibTorch's eigvalsh, the
// certified fast path (dof.h) with its bounds, and every head of the layer batched on a device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/analysis/dof.h"
#include "attnscope/base/options.h"
#include "attnscope/base/progress.h"

namespace attnscope {

struct DofBenchOptions {
  std::string capture_dir;  // required
  int layer = 0;
  DofSettings settings;     // samples (J), normalize, seed, lambda, tolerance, top_k, block, device
  bool eigvalsh = true;     // also time LibTorch's CPU eigvalsh per head
};

// Every option of `attnscope bench dof` (bench_options.cpp); J in 2..65536.
const OptionTable<DofBenchOptions>& dof_bench_option_table();

struct DofBenchHead {
  int head = 0;
  int64_t samples = 0;       // J used
  double gram_ms = 0;        // the shifted Gram (sampling excluded)
  double dsyevd_ms = 0;      // LAPACKE_dsyevd('N') on a copy of the Gram
  double eigvalsh_ms = 0;    // at::linalg_eigvalsh on the CPU (0 when not timed)
  double fast_ms = 0;        // spectrum_of_gram on the certified fast path (fallback included)
  double dof = 0;            // exact DoF at settings.lambda (from dsyevd)
  DofValue fast;             // the fast path's value and bounds there
  int64_t ritz_values = 0;   // its subspace size (0 when it fell back)
  bool fallback = false;     // bounds not within the tolerance at top_k: solved exactly
};

struct DofBenchResult {
  std::vector<DofBenchHead> heads;
  std::string device;
  double batched_ms = 0;  // every head of the layer, J and J/2 spectra, batched on `device` (sampling included)
  double cpu_threads = 1; // at::get_num_threads() during the run
};

// Throws Error for a bad capture, layer or device.
DofBenchResult bench_dof(const DofBenchOptions& options, const ProgressFn& progress = nullptr);

}  // namespace attnscope
