// Causal attention output on the CPU: softmax (materializes the L x L map, O(L^2 d)) against
// linear attention (O(L M d)), one head, d = 64, M = 64 features, float32: the kernel of kernels/
// (through linear_attention_output), and the forms it replaced, side by side (attention_bench.h:
// the previous chunked LibTorch expression, the cumsum form with [L, M, d] prefix states).
// Recorded in docs/PERFORMANCE.md; `attnscope bench attention` measures the same with memory.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include "attnscope/bench/attention_bench.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/attention.h"

namespace {

constexpr int64_t kHeadDim = 64, kFeatures = 64;

struct Inputs {
  at::Tensor q, k, v, phi_q, phi_k;
};

// PRF with M = 64 features of d = 64 (seed 0).
std::unique_ptr<attnscope::FeatureMap> prf_map() {
  attnscope::FeatureMapSpec spec;
  spec.name = "prf";
  spec.d = kHeadDim;
  spec.features = kFeatures;
  return attnscope::make_feature_map(spec);
}

Inputs make_inputs(int64_t L) {
  at::manual_seed(0);
  Inputs in;
  in.q = at::randn({L, kHeadDim});
  in.k = at::randn({L, kHeadDim});
  in.v = at::randn({L, kHeadDim});
  auto phi = prf_map();
  in.phi_q = phi->query_features(in.q);
  in.phi_k = phi->key_features(in.k);
  return in;
}

void BM_SoftmaxAttention(benchmark::State& state) {
  at::InferenceMode guard;
  const Inputs in = make_inputs(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(attnscope::softmax_attention_output(in.q, in.k, in.v));
  state.SetComplexityN(state.range(0));
}

void BM_LinearAttention(benchmark::State& state) {
  at::InferenceMode guard;
  const Inputs in = make_inputs(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(attnscope::linear_attention_output(in.phi_q, in.phi_k, in.v));
  state.SetComplexityN(state.range(0));
}

// The feature map itself (PRF, M = 64): part of what linear attention costs per token.
void BM_LinearAttentionWithFeatures(benchmark::State& state) {
  at::InferenceMode guard;
  const Inputs in = make_inputs(state.range(0));
  auto phi = prf_map();
  for (auto _ : state)
    benchmark::DoNotOptimize(attnscope::linear_attention_output(phi->query_features(in.q), phi->key_features(in.k), in.v));
}

// The baselines the kernel replaced, on the same PRF features (scaled: values and key log scales).
void linear_form(benchmark::State& state, attnscope::AttentionForm form) {
  at::InferenceMode guard;
  const Inputs in = make_inputs(state.range(0));
  auto phi = prf_map();
  const attnscope::Features fq = phi->scaled_query_features(in.q), fk = phi->scaled_key_features(in.k);
  for (auto _ : state)
    benchmark::DoNotOptimize(attnscope::attention_form_output(form, in.q, in.k, fq.values, fk.values, fk.log_scale, in.v));
}
void BM_KernelScaled(benchmark::State& s) { linear_form(s, attnscope::AttentionForm::Kernel); }
void BM_ChunkedAtenScaled(benchmark::State& s) { linear_form(s, attnscope::AttentionForm::ChunkedAten); }
void BM_CumsumScaled(benchmark::State& s) { linear_form(s, attnscope::AttentionForm::Cumsum); }

}  // namespace

BENCHMARK(BM_KernelScaled)->RangeMultiplier(4)->Range(1024, 16384)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_ChunkedAtenScaled)->RangeMultiplier(4)->Range(1024, 16384)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_CumsumScaled)->RangeMultiplier(4)->Range(1024, 16384)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_SoftmaxAttention)->RangeMultiplier(2)->Range(32, 16384)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_LinearAttention)->RangeMultiplier(2)->Range(32, 16384)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_LinearAttentionWithFeatures)->RangeMultiplier(2)->Range(32, 16384)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK_MAIN();
