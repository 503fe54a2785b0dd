// `attnscope bench dof` (dof_bench.h): the DoF solvers of one layer, head by head, on the same Grams.
#include "attnscope/bench/dof_bench.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>

#include "attnscope/analysis/dof_solvers.h"
#include "attnscope/capture/capture.h"
#include "attnscope/base/device.h"
#include "attnscope/base/error.h"
#include "attnscope/base/random.h"

namespace attnscope {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

DofBenchResult bench_dof(const DofBenchOptions& o, const ProgressFn& progress) {
  const at::Device device = parse_device(o.settings.device);
  const CaptureStore store(o.capture_dir);
  if (o.layer < 0 || o.layer >= store.num_layers())
    fail_value("layer", std::to_string(o.layer) + " is not a layer of " + o.capture_dir + " (" +
                            std::to_string(store.num_layers()) + " layers)");
  DofBenchResult out;
  out.device = o.settings.device;
  out.cpu_threads = at::get_num_threads();
  const int H = store.num_heads();
  const int64_t d = store.head_dim();
  const at::Tensor q = store.layer_tensor(o.layer, "q"), k = store.layer_tensor(o.layer, "k");
  DofSettings exact = o.settings, fast = o.settings;
  exact.exact_limit = int64_t(1) << 40;
  fast.exact_limit = 0;
  for (int h = 0; h < H; ++h) {
    if (progress) progress(double(h) / (H + 1), "head " + std::to_string(h + 1) + "/" + std::to_string(H));
    DofBenchHead row;
    row.head = h;
    const at::Tensor x = sampled_vectors(q.select(1, h).reshape({-1, d}), k.select(1, h).reshape({-1, d}),
                                         o.settings.samples, derive_seed(o.settings.seed, o.layer, h));
    const int64_t J = row.samples = x.size(0);
    double c = 0;
    auto t0 = std::chrono::steady_clock::now();
    const at::Tensor g = shifted_gram(x, &c);
    row.gram_ms = ms_since(t0);

    std::vector<double> a(g.data_ptr<double>(), g.data_ptr<double>() + J * J);
    t0 = std::chrono::steady_clock::now();
    std::vector<double> eig = all_eigenvalues(a, J);
    row.dsyevd_ms = ms_since(t0);
    double diag = 0;
    for (int64_t i = 0; i < J; ++i) diag += g.data_ptr<double>()[i * J + i];
    row.dof = dof_at(spectrum_from_eigenvalues(std::move(eig), true, J, diag, exact, c), o.settings.lambda).value;

    if (o.eigvalsh) {
      t0 = std::chrono::steady_clock::now();
      const at::Tensor w = at::linalg_eigvalsh(g, "L");
      row.eigvalsh_ms = ms_since(t0);
    }

    t0 = std::chrono::steady_clock::now();
    const HeadSpectrum sp = spectrum_of_gram(g, fast, c);
    row.fast_ms = ms_since(t0);
    row.fast = dof_at(sp, o.settings.lambda);
    row.fallback = sp.exact;
    row.ritz_values = sp.exact ? 0 : int64_t(sp.eigenvalues.size());
    out.heads.push_back(row);
  }

  if (progress) progress(double(H) / (H + 1), "all heads batched on " + o.settings.device);
  DofSettings batched = o.settings;
  batched.batched = true;
  if (device.is_cuda()) {  // the first call pays for the CUDA context and the solver's handles
    DofSettings warm = batched;
    warm.samples = 64;
    layer_spectra(store, o.layer, warm);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<HeadSpectrum> all = layer_spectra(store, o.layer, batched);  // copies back: synchronized
  out.batched_ms = ms_since(t0);
  if (progress) progress(1.0, "done");
  return out;
}

}  // namespace attnscope
