// Head analysis costs on the CPU: the metrics of one head (entropy, monotonicity, errors against
// softmax) and the structured-mixer fits, as the GUI and `attnscope metrics` run them per head.
// Recorded in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <cmath>

#include "attnscope/attention/feature_map.h"
#include "attnscope/analysis/head_metrics.h"
#include "attnscope/attention/attention.h"
#include "attnscope/analysis/structured_mixers.h"

namespace {

constexpr int64_t kHeadDim = 64;

// Queries and keys with a recency bias through shared slowly varying directions, so the softmax
// maps look like real heads (neither uniform nor one-hot).
std::pair<at::Tensor, at::Tensor> head_vectors(int64_t L) {
  at::manual_seed(1);
  const at::Tensor drift = at::cumsum(at::randn({L, kHeadDim}, at::kDouble) * 0.3, 0);
  return {drift + at::randn({L, kHeadDim}, at::kDouble), drift + at::randn({L, kHeadDim}, at::kDouble)};
}

void BM_SoftmaxHeadMetrics(benchmark::State& state) {
  at::InferenceMode guard;
  const auto [q, k] = head_vectors(state.range(0));
  attnscope::HeadMetricsInput in;
  in.map = attnscope::softmax_map(q, k);
  in.q = q, in.k = k;
  for (auto _ : state) benchmark::DoNotOptimize(attnscope::compute_head_metrics(in));
}

void BM_LinearHeadMetrics(benchmark::State& state) {
  at::InferenceMode guard;
  const auto [q, k] = head_vectors(state.range(0));
  const at::Tensor v = at::randn({state.range(0), kHeadDim}, at::kDouble);
  attnscope::FeatureMapSpec spec;
  spec.name = "prf";
  spec.d = kHeadDim;
  spec.features = 64;
  auto phi = attnscope::make_feature_map(spec);
  const at::Tensor pq = phi->query_features(q.to(at::kFloat)).to(at::kDouble);
  const at::Tensor pk = phi->key_features(k.to(at::kFloat)).to(at::kDouble);
  attnscope::HeadMetricsInput in;
  in.map = attnscope::linear_map(pq, pk).map;
  in.reference = attnscope::softmax_map(q, k);
  in.q = q, in.k = k, in.v = v, in.phi_q = pq, in.phi_k = pk;
  for (auto _ : state) benchmark::DoNotOptimize(attnscope::compute_head_metrics(in));
}

void BM_MixerDistances(benchmark::State& state) {
  at::InferenceMode guard;
  const auto [q, k] = head_vectors(state.range(0));
  const at::Tensor A = attnscope::softmax_map(q, k);
  attnscope::MixerFitOptions o;
  o.state_size = state.range(1);
  for (auto _ : state) benchmark::DoNotOptimize(attnscope::mixer_distances(A, o));
}

}  // namespace

BENCHMARK(BM_SoftmaxHeadMetrics)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LinearHeadMetrics)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MixerDistances)->Args({256, 16})->Args({512, 16})->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK_MAIN();
