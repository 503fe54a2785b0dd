// Causal attention output on the CPU: softmax (materializes the L x L map, O(L^2 d)) against
// linear attention by prefix sums (O(L M d)), one head, d = 64, M = 64 features, float32.
// Where do they cross? Recorded in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include "attnscope/feature_map.h"
#include "attnscope/linear_attention.h"

namespace {

constexpr int64_t kHeadDim = 64, kFeatures = 64;

struct Inputs {
  at::Tensor q, k, v, phi_q, phi_k;
};

Inputs make_inputs(int64_t L) {
  at::manual_seed(0);
  Inputs in;
  in.q = at::randn({L, kHeadDim});
  in.k = at::randn({L, kHeadDim});
  in.v = at::randn({L, kHeadDim});
  attnscope::FeatureMapSpec spec;
  spec.name = "prf";
  spec.d = kHeadDim;
  spec.features = kFeatures;
  auto phi = attnscope::make_feature_map(spec);
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
  attnscope::FeatureMapSpec spec;
  spec.name = "prf";
  spec.d = kHeadDim;
  spec.features = kFeatures;
  auto phi = attnscope::make_feature_map(spec);
  for (auto _ : state)
    benchmark::DoNotOptimize(attnscope::linear_attention_output(phi->query_features(in.q), phi->key_features(in.k), in.v));
}

}  // namespace

BENCHMARK(BM_SoftmaxAttention)->RangeMultiplier(2)->Range(32, 16384)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_LinearAttention)->RangeMultiplier(2)->Range(32, 16384)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_LinearAttentionWithFeatures)->RangeMultiplier(2)->Range(32, 16384)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK_MAIN();
