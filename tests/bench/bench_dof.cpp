// DoF spectra: what the eigendecomposition of one head's Gram costs (exact path vs plain LAPACK vs
// LibTorch's eigvalsh vs Eigen vs the certified block Krylov fast path, with its bounds), every head
// of a layer batched on a device, and what the lambda slider costs (DoF of 1000 heads at a new lambda).
//
// The Gram comes from random queries/keys shaped like a real model's (d = 64, a shared mean
// direction plus a decaying spread, |x|^2 / sqrt d around 8), or from a capture:
//   ATTNSCOPE_BENCH_CAPTURE=DIR  (layer 0, head 0; ATTNSCOPE_BENCH_LAYER / _HEAD pick another)
// and ATTNSCOPE_BENCH_DEVICE=cuda runs the batched layer on the GPU (default cpu).
// Results for this machine are in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>
#include <lapacke.h>

#include <Eigen/Eigenvalues>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include "attnscope/capture/capture.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/random.h"

using namespace attnscope;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// J vectors [J, 64]: half "queries", half "keys", each around its own mean, with per-direction
// spread 2 * 0.93^i so a few directions dominate, as in trained attention heads.
at::Tensor synthetic_vectors(int64_t J) {
  const int64_t d = 64;
  at::Generator gen = at::detail::createCPUGenerator(7);
  at::Tensor spread = at::pow(at::full({d}, 0.93, at::kDouble), at::arange(d, at::kDouble)) * 2.0;
  at::Tensor x = at::normal(0.0, 1.0, {J, d}, gen).to(at::kDouble) * spread;
  at::Tensor mq = at::normal(0.0, 1.0, {d}, gen).to(at::kDouble), mk = at::normal(0.0, 1.0, {d}, gen).to(at::kDouble);
  x.narrow(0, 0, J / 2) += mq * (6.0 / mq.norm().item<double>());
  x.narrow(0, J / 2, J - J / 2) += mk * (6.0 / mk.norm().item<double>());
  return x;
}

at::Tensor capture_vectors(const std::string& dir, int64_t J) {
  const CaptureStore st(dir);
  const int s = env_int("ATTNSCOPE_BENCH_LAYER", 0), h = env_int("ATTNSCOPE_BENCH_HEAD", 0);
  const int64_t d = st.head_dim();
  const at::Tensor x = at::cat({st.layer_tensor(s, "q").select(1, h).reshape({-1, d}),
                                st.layer_tensor(s, "k").select(1, h).reshape({-1, d})});
  const std::vector<int64_t> idx = sample_without_replacement(x.size(0), J, 1);
  return x.index_select(0, at::tensor(idx, at::kLong)).to(at::kDouble);
}

// The shifted Gram for J, made once per J.
const at::Tensor& gram(int64_t J) {
  static std::map<int64_t, at::Tensor> cache;
  auto it = cache.find(J);
  if (it == cache.end()) {
    const char* cap = std::getenv("ATTNSCOPE_BENCH_CAPTURE");
    it = cache.emplace(J, shifted_gram(cap ? capture_vectors(cap, J) : synthetic_vectors(J))).first;
  }
  return it->second;
}

std::vector<double> copy_of(const at::Tensor& g) {
  return std::vector<double>(g.data_ptr<double>(), g.data_ptr<double>() + g.numel());
}

void BM_ShiftedGram(benchmark::State& state) {
  const int64_t J = state.range(0);
  const at::Tensor x = synthetic_vectors(J);
  for (auto _ : state) benchmark::DoNotOptimize(shifted_gram(x));
}

// attnscope's exact path: checks, copy, dsyevd without eigenvectors, normalization.
void BM_ExactPath(benchmark::State& state) {
  const at::Tensor& g = gram(state.range(0));
  DofSettings s;
  s.exact_limit = g.size(0);
  HeadSpectrum sp;
  for (auto _ : state) sp = spectrum_of_gram(g, s);
  state.counters["dof_2^-8"] = dof_at(sp, std::pow(2.0, -8)).value;
}

// Plain LAPACKE_dsyevd, as one would call it for the eigenpairs ('V').
void BM_DsyevdVectors(benchmark::State& state) {
  const at::Tensor& g = gram(state.range(0));
  const int J = int(g.size(0));
  std::vector<double> w(J);
  for (auto _ : state) {
    std::vector<double> a = copy_of(g);
    benchmark::DoNotOptimize(LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'L', J, a.data(), J, w.data()));
  }
}

// Plain LAPACKE_dsyevd for eigenvalues only ('N'): the core of the exact path.
void BM_DsyevdValues(benchmark::State& state) {
  const at::Tensor& g = gram(state.range(0));
  const int J = int(g.size(0));
  std::vector<double> w(J);
  for (auto _ : state) {
    std::vector<double> a = copy_of(g);
    benchmark::DoNotOptimize(LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'N', 'L', J, a.data(), J, w.data()));
  }
}

// Eigen's SelfAdjointEigenSolver, eigenvalues only: the alternative to dsyevd.
void BM_EigenSolver(benchmark::State& state) {
  const at::Tensor& g = gram(state.range(0));
  const int J = int(g.size(0));
  const Eigen::Map<const Eigen::MatrixXd> A(g.data_ptr<double>(), J, J);
  for (auto _ : state) {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(A, Eigen::EigenvaluesOnly);
    benchmark::DoNotOptimize(es.eigenvalues().data());
  }
}

// LibTorch's eigvalsh (LAPACK syevd through ATen on the CPU): the anchor of the GPU row.
void BM_TorchEigvalsh(benchmark::State& state) {
  const at::Tensor& g = gram(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(at::linalg_eigvalsh(g, "L"));
}

// The certified fast path at lambda = 2^-8, tolerance 1%: block Krylov Ritz values + trace, the
// subspace grown until the bounds are that tight (else the exact path: fallback = 1).
// ATTNSCOPE_BENCH_BLOCK=N sets the block size (default DofSettings::block).
void BM_FastPath(benchmark::State& state) {
  const at::Tensor& g = gram(state.range(0));
  DofSettings s;
  s.exact_limit = 0;
  s.block = env_int("ATTNSCOPE_BENCH_BLOCK", int(s.block));
  HeadSpectrum sp;
  for (auto _ : state) sp = spectrum_of_gram(g, s);
  const DofValue v = dof_at(sp, s.lambda);
  DofSettings e = s;
  e.exact_limit = g.size(0);
  state.counters["dof_exact"] = dof_at(spectrum_of_gram(g, e), s.lambda).value;
  state.counters["exact"] = sp.exact;  // top_k >= J (J = 1024 by default) takes the exact path outright
  state.counters["fallback"] = fast_path_fell_back(s, sp);
  state.counters["ritz"] = sp.exact ? 0 : double(sp.eigenvalues.size());
  state.counters["dof_lo"] = v.lower;
  state.counters["dof_hi"] = v.upper;
  state.counters["width_%"] = 100 * (v.upper - v.lower) / v.value;
}

// Every head of a layer (ATTNSCOPE_BENCH_CAPTURE, layer ATTNSCOPE_BENCH_LAYER), J and J/2 spectra
// (sampling included): batched exact on ATTNSCOPE_BENCH_DEVICE, per head exact, per head fast.
void layer(benchmark::State& state, const std::string& dir, const std::string& how) {
  const CaptureStore st(dir);
  DofSettings s;
  s.samples = state.range(0);
  s.exact_limit = how == "fast" ? 0 : s.samples;
  s.batched = how == "batched";
  if (const char* dev = std::getenv("ATTNSCOPE_BENCH_DEVICE"); dev && s.batched) s.device = dev;
  const int l = env_int("ATTNSCOPE_BENCH_LAYER", 0);
  if (s.device != "cpu") layer_spectra(st, l, s);  // warm-up: the CUDA context and solver handles
  std::vector<HeadSpectrum> heads;
  for (auto _ : state) heads = layer_spectra(st, l, s);
  int fallbacks = 0;
  for (const auto& h : heads) fallbacks += fast_path_fell_back(s, h);
  state.counters["heads"] = double(heads.size());
  state.counters["fallbacks"] = fallbacks;
}
void BM_LayerBatched(benchmark::State& state, const std::string& dir) { layer(state, dir, "batched"); }
void BM_LayerExact(benchmark::State& state, const std::string& dir) { layer(state, dir, "exact"); }
void BM_LayerFast(benchmark::State& state, const std::string& dir) { layer(state, dir, "fast"); }

// The lambda slider: DoF of 1000 heads at a new lambda, from kept spectra. Each head has its own
// eigenvalues (32 MB for exact J = 4096 spectra, more than any cache), a Gram-like decay.
void dof_at_many(benchmark::State& state, bool exact) {
  const int64_t heads = 1000, J = 4096, kept = exact ? J : 256;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  std::vector<HeadSpectrum> spectra(heads);
  for (auto& sp : spectra) {
    const double rate = u(rng) * 0.01;
    double total = 0;
    for (int64_t i = 0; i < J; ++i) {
      const double e = std::exp(-rate * double(i)) * u(rng);
      total += e;
      if (i < kept) sp.eigenvalues.push_back(e);
    }
    std::sort(sp.eigenvalues.rbegin(), sp.eigenvalues.rend());
    for (double& e : sp.eigenvalues) e /= total;
    sp.trace = 1.0;
    sp.samples = J;
    sp.exact = exact;
  }
  double lambda = 1e-4, sum = 0;
  for (auto _ : state) {
    lambda *= 1.01;  // a new lambda every time, as the slider moves
    for (const auto& sp : spectra) sum += dof_at(sp, lambda).value;
  }
  benchmark::DoNotOptimize(sum);
}
void BM_DofAt1000HeadsExact(benchmark::State& state) { dof_at_many(state, true); }
void BM_DofAt1000HeadsTop256(benchmark::State& state) { dof_at_many(state, false); }

// Every head of a capture (ATTNSCOPE_BENCH_CAPTURE): attnscope's compute_spectra (sampling, Gram,
// exact eigenvalues, normalization) against the plain baseline on the same sampled vectors: the
// shifted Gram and a full LAPACK eigendecomposition (dsyevd with eigenvectors) per head.
void BM_CaptureAllHeads(benchmark::State& state, const std::string& dir) {
  const CaptureStore st(dir);
  DofSettings s;
  s.samples = state.range(0);
  s.exact_limit = s.samples;
  for (auto _ : state) benchmark::DoNotOptimize(compute_spectra(st, s));
  state.counters["heads"] = st.num_layers() * st.num_heads();
}

// The same with the default settings: the certified fast path above exact_limit.
void BM_CaptureAllHeadsFast(benchmark::State& state, const std::string& dir) {
  const CaptureStore st(dir);
  DofSettings s;
  s.samples = state.range(0);
  DofSpectra sp;
  for (auto _ : state) sp = compute_spectra(st, s);
  int fallbacks = 0;
  for (const auto& h : sp.heads) fallbacks += fast_path_fell_back(s, h);
  state.counters["heads"] = double(sp.heads.size());
  state.counters["fallbacks"] = fallbacks;
  state.counters["wide_bounds"] = double(wide_bounds(head_dofs(sp, s.lambda), s.tolerance).size());
}

void BM_CaptureAllHeadsDsyevdBaseline(benchmark::State& state, const std::string& dir) {
  const CaptureStore st(dir);
  const int64_t J = state.range(0), d = st.head_dim();
  for (auto _ : state) {
    for (int l = 0; l < st.num_layers(); ++l) {
      const at::Tensor Q = st.layer_tensor(l, "q"), K = st.layer_tensor(l, "k");
      for (int h = 0; h < st.num_heads(); ++h) {
        const at::Tensor x = at::cat({Q.select(1, h).reshape({-1, d}), K.select(1, h).reshape({-1, d})});
        const auto idx = sample_without_replacement(x.size(0), J, derive_seed(0, l, h));
        std::vector<double> a = copy_of(shifted_gram(x.index_select(0, at::tensor(idx, at::kLong)).to(at::kDouble)));
        const int n = int(idx.size());
        std::vector<double> w(n);
        benchmark::DoNotOptimize(LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'L', n, a.data(), n, w.data()));
      }
    }
  }
}

}  // namespace

BENCHMARK(BM_ShiftedGram)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExactPath)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExactPath)->Arg(4096)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DsyevdValues)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DsyevdValues)->Arg(2048)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DsyevdValues)->Arg(4096)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DsyevdVectors)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DsyevdVectors)->Arg(4096)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenSolver)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TorchEigvalsh)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TorchEigvalsh)->Arg(2048)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TorchEigvalsh)->Arg(4096)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FastPath)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FastPath)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FastPath)->Arg(4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DofAt1000HeadsExact)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DofAt1000HeadsTop256)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  // With a capture, also time every head of it, and every head of one layer three ways, at J = 1024
// and 4096 (one iteration each).
  if (const char* cap = std::getenv("ATTNSCOPE_BENCH_CAPTURE")) {
    for (int64_t J : {1024, 4096}) {
      benchmark::RegisterBenchmark("BM_CaptureAllHeads", BM_CaptureAllHeads, std::string(cap))
          ->Arg(J)->Iterations(1)->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark("BM_CaptureAllHeadsFast", BM_CaptureAllHeadsFast, std::string(cap))
          ->Arg(J)->Iterations(1)->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark("BM_CaptureAllHeadsDsyevdBaseline", BM_CaptureAllHeadsDsyevdBaseline, std::string(cap))
          ->Arg(J)->Iterations(1)->Unit(benchmark::kMillisecond);
    }
    for (int64_t J : {1024, 4096}) {
      for (auto [name, fn] : {std::pair{"BM_LayerBatched", BM_LayerBatched}, std::pair{"BM_LayerExact", BM_LayerExact},
                              std::pair{"BM_LayerFast", BM_LayerFast}})
        benchmark::RegisterBenchmark(name, fn, std::string(cap))->Arg(J)->Iterations(1)->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
