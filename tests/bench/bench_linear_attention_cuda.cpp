// Causal linear attention on the GPU (kernels/cuda through kernels/linear_attention.h), forward and
// forward + backward, beside PyTorch SDPA (causal; FlashAttention for bfloat16) on the same GPU,
// on flash-linear-attention's benchmark shapes: H = 16 heads, head dimension D = 128, M = D = 128
// features (fla's chunk kernels, 0.79 ms forward and 2.12 ms forward + backward at B2 T16K on a
// GB200), and B x T = 2 x 1K .. 2 x 16K, 4 x 4K, 8 x 2K, 16 x 1K. Times from CUDA events around
// each iteration (manual time), in bfloat16 and float32. Recorded in docs/PERFORMANCE.md.
//
// Two builds of this file: the Google Benchmark program (tests/bench, -DATTNSCOPE_BENCH=ON), and
// with ATTNSCOPE_BENCH_PLAIN a program with its own main that prints one plain-text table (target
// bench_linear_attention_cuda_plain of kernels/CMakeLists.txt: the GPU machine has no Google
// Benchmark). Both time the same functions below.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnscope/kernels/linear_attention.h"

#ifndef ATTNSCOPE_BENCH_PLAIN
#include <benchmark/benchmark.h>
#endif

namespace {

namespace K = attnscope::kernels;
constexpr int64_t kHeads = 16, kHeadDim = 128, kFeatures = 128;

// Milliseconds of one call of f on the current stream, from CUDA events.
double time_ms(const std::function<void()>& f) {
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
  start.record();
  f();
  end.record();
  end.synchronize();
  return start.elapsed_time(end);
}

at::TensorOptions on_gpu(at::ScalarType dt) { return at::TensorOptions().device(at::kCUDA).dtype(dt); }

// One timed step of a method: forward, or forward + backward of sum(y * gy).
struct Case {
  std::function<void()> step;
  std::function<void()> reset;  // between steps, untimed (drops the accumulated gradients)
};

// Linear attention: q, k [B, H, T, M] positive features, key log scales [B, H, T, 1], v [B, H, T, D].
Case linear_case(int64_t B, int64_t T, at::ScalarType dt, bool backward) {
  auto q = at::rand({B, kHeads, T, kFeatures}, on_gpu(dt)).add_(0.1);
  auto k = at::rand({B, kHeads, T, kFeatures}, on_gpu(dt)).add_(0.1);
  auto ls = at::randn({B, kHeads, T, 1}, on_gpu(dt));
  auto v = at::randn({B, kHeads, T, kHeadDim}, on_gpu(dt));
  if (!backward) return {[=] { (void)K::causal_linear_attention(q, k, ls, v); }, [] {}};
  for (auto* t : {&q, &k, &ls, &v}) t->requires_grad_(true);
  auto gy = at::randn({B, kHeads, T, kHeadDim}, on_gpu(dt));
  return {[=] { K::causal_linear_attention(q, k, ls, v).backward(gy); },
          [=]() mutable {
            for (auto* t : {&q, &k, &ls, &v}) t->mutable_grad() = at::Tensor();
          }};
}

// PyTorch SDPA, causal, q, k, v [B, H, T, D].
Case sdpa_case(int64_t B, int64_t T, at::ScalarType dt, bool backward) {
#if TORCH_VERSION_MAJOR >= 2
  auto q = at::randn({B, kHeads, T, kHeadDim}, on_gpu(dt)), k = at::randn({B, kHeads, T, kHeadDim}, on_gpu(dt)),
       v = at::randn({B, kHeads, T, kHeadDim}, on_gpu(dt));
  auto sdpa = [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
    return at::scaled_dot_product_attention(a, b, c, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
  };
  if (!backward) return {[=] { (void)sdpa(q, k, v); }, [] {}};
  for (auto* t : {&q, &k, &v}) t->requires_grad_(true);
  auto gy = at::randn({B, kHeads, T, kHeadDim}, on_gpu(dt));
  return {[=] { sdpa(q, k, v).backward(gy); },
          [=]() mutable {
            for (auto* t : {&q, &k, &v}) t->mutable_grad() = at::Tensor();
          }};
#else
  (void)B, (void)T, (void)dt, (void)backward;
  throw std::runtime_error("at::scaled_dot_product_attention needs LibTorch 2");
#endif
}

Case make_case(bool sdpa, int64_t B, int64_t T, at::ScalarType dt, bool backward) {
  return sdpa ? sdpa_case(B, T, dt, backward) : linear_case(B, T, dt, backward);
}

// (B, T): B2 at T = 1K .. 16K, and fla's other shapes.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{2, 1024}, {2, 2048}, {2, 4096}, {2, 8192}, {2, 16384},
                                                          {4, 4096}, {8, 2048}, {16, 1024}};

}  // namespace

#ifndef ATTNSCOPE_BENCH_PLAIN

// state.range: B, T. Arguments: SDPA or linear, dtype, forward only or forward + backward.
void BM_Attention(benchmark::State& state, bool sdpa, at::ScalarType dt, bool backward) {
  const int64_t B = state.range(0), T = state.range(1);
  try {
    Case c = make_case(sdpa, B, T, dt, backward);
    for (int i = 0; i < 2; ++i) c.step(), c.reset();  // warm-up: allocator, kernels' first launch
    for (auto _ : state) {
      state.SetIterationTime(time_ms(c.step) / 1e3);
      c.reset();
    }
    state.counters["tokens/s"] = benchmark::Counter(double(B * T), benchmark::Counter::kIsIterationInvariantRate);
  } catch (const std::exception& e) {  // out of memory (SDPA's float32 fallback), no SDPA
    state.SkipWithError(e.what());
  }
}

void shapes(benchmark::internal::Benchmark* b) {
  for (auto [B, T] : kShapes) b->Args({B, T});
  b->ArgNames({"B", "T"})->UseManualTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_Attention, linear_fwd_bf16, false, at::kBFloat16, false)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, linear_fwdbwd_bf16, false, at::kBFloat16, true)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, sdpa_fwd_bf16, true, at::kBFloat16, false)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, sdpa_fwdbwd_bf16, true, at::kBFloat16, true)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, linear_fwd_f32, false, at::kFloat, false)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, linear_fwdbwd_f32, false, at::kFloat, true)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, sdpa_fwd_f32, true, at::kFloat, false)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, sdpa_fwdbwd_f32, true, at::kFloat, true)->Apply(shapes);

BENCHMARK_MAIN();

#else

// Median of `reps` timed steps after two warm-ups, or -1 where the case fails (out of memory).
double median_ms(bool sdpa, int64_t B, int64_t T, at::ScalarType dt, bool backward, int reps) {
  try {
    Case c = make_case(sdpa, B, T, dt, backward);
    for (int i = 0; i < 2; ++i) c.step(), c.reset();
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      ms.push_back(time_ms(c.step));
      c.reset();
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s B%lld T%lld %s%s: %s\n", sdpa ? "sdpa" : "linear", (long long)B, (long long)T,
                 c10::toString(dt), backward ? " fwd+bwd" : "", e.what());
    return -1;
  }
}

// Usage: bench_linear_attention_cuda_plain [REPS]  (default 10)
int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
  if (!at::hasCUDA()) {
    std::fprintf(stderr, "bench_linear_attention_cuda: no GPU visible to LibTorch\n");
    return 1;
  }
  std::printf("causal attention, H%lld D%lld, linear M%lld; median of %d, ms (fwd | fwd+bwd)\n", (long long)kHeads,
              (long long)kHeadDim, (long long)kFeatures, reps);
  std::printf("%-8s %-6s %-7s %10s %10s %10s %10s\n", "dtype", "B", "T", "lin fwd", "lin f+b", "sdpa fwd", "sdpa f+b");
  for (at::ScalarType dt : {at::kBFloat16, at::kFloat})
    for (auto [B, T] : kShapes) {
      const double lf = median_ms(false, B, T, dt, false, reps), lb = median_ms(false, B, T, dt, true, reps);
      const double sf = median_ms(true, B, T, dt, false, reps), sb = median_ms(true, B, T, dt, true, reps);
      std::printf("%-8s %-6lld %-7lld %10.3f %10.3f %10.3f %10.3f\n", c10::toString(dt), (long long)B, (long long)T, lf,
                  lb, sf, sb);
      std::fflush(stdout);
    }
  return 0;
}

#endif
