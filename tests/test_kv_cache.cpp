// Softmax generation with a key-value cache (Model::generate_greedy's default): the same tokens as
// re-running the whole window for every token, across the cache's growth and past the context end,
// for learned positions, RoPE and grouped-query attention; with a sliding window (Mistral) the
// cache keeps only the window and decodes as the uncached path and the float64 reference do. (ForwardReference.GreedyGenerationMatches
// Reference checks the cached path against the float64 reference for every family.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/model/model.h"
#include "attnscope/model/model_config.h"
#include "hf_checkpoint_writer.h"
#include "reference_transformer.h"
#include "test_support.h"

namespace attnscope::test {
namespace test_kv_cache {

Model tiny(RefArch arch, int n_ctx, uint32_t seed) {
  RefConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.d_model = 32;
  c.n_head = 4;
  c.n_kv_head = arch == RefArch::Llama ? 2 : 4;
  c.d_ff = 64;
  c.vocab = 60;
  c.n_ctx = n_ctx;
  const std::string dir = temp_dir("kv_cache");
  write_hf_checkpoint(dir, c, random_weights(c, seed));
  const ModelConfig mc = load_hf_config(dir + "/config.json");
  return Model(mc, load_hf_weights(mc, WeightStore(dir)));
}

TEST(KvCache, GeneratesTheTokensOfTheWholeWindowAcrossGrowthAndTheContextEnd) {
  for (RefArch arch : {RefArch::GPT2, RefArch::Llama}) {
    SCOPED_TRACE(arch == RefArch::GPT2 ? "gpt2" : "llama gqa");
    // n_ctx 300: the cache made for a 5-token prompt holds 261 and grows at the 262nd token; at 300
    // positions generation restarts on the last 300 tokens.
    const Model m = tiny(arch, 300, 11);
    const std::vector<int64_t> prompt = {3, 14, 15, 9, 26};
    const int steps = 330;
    const std::vector<int64_t> cached = m.generate_greedy(prompt, steps);
    const std::vector<int64_t> whole = m.generate_greedy(prompt, steps, -1, nullptr, /*kv_cache=*/false);
    ASSERT_EQ(cached.size(), prompt.size() + steps);
    EXPECT_EQ(cached, whole);
    // The generated text is not degenerate (one token repeated would hide a cache read at a wrong
    // position).
    std::vector<int64_t> tail(cached.end() - 100, cached.end());
    std::sort(tail.begin(), tail.end());
    EXPECT_GT(std::unique(tail.begin(), tail.end()) - tail.begin(), 3);
  }
}

TEST(KvCache, AStopTokenEndsGenerationAsWithoutACache) {
  const Model m = tiny(RefArch::Llama, 64, 12);
  const std::vector<int64_t> prompt = {1, 2, 3};
  const std::vector<int64_t> free_run = m.generate_greedy(prompt, 20, -1, nullptr, false);
  const int64_t stop = free_run[prompt.size() + 7];
  const std::vector<int64_t> a = m.generate_greedy(prompt, 20, stop), b = m.generate_greedy(prompt, 20, stop, nullptr, false);
  EXPECT_EQ(a, b);
  EXPECT_LT(a.size(), free_run.size());
}

// A small Mistral (grouped-query attention) with a sliding window; the reference reads `weights`.
struct Windowed {
  RefConfig cfg;
  RefWeights weights;
  std::unique_ptr<Model> model;
};
Windowed windowed(int window, int n_ctx, uint32_t seed) {
  Windowed w;
  RefConfig& c = w.cfg;
  c.arch = RefArch::Mistral;
  c.n_layer = 2, c.d_model = 32, c.n_head = 4, c.n_kv_head = 2, c.d_ff = 64, c.vocab = 60;
  c.n_ctx = n_ctx;
  c.sliding_window = window;
  w.weights = random_weights(c, seed);
  const std::string dir = temp_dir("kv_cache_window");
  write_hf_checkpoint(dir, c, w.weights);
  const ModelConfig mc = load_hf_config(dir + "/config.json");
  w.model = std::make_unique<Model>(mc, load_hf_weights(mc, WeightStore(dir)));
  return w;
}

TEST(KvCache, ASlidingWindowBoundsTheCacheAndDecodesAsWithoutIt) {
  constexpr int W = 6, kSteps = 40;
  const Windowed w = windowed(W, 64, 21);
  ASSERT_EQ(w.model->config().sliding_window, W);
  // A prompt shorter than the window (the ring fills from empty) and one longer (the prefill keeps
  // only its last W keys); 40 steps run far past the window and stay within the 64 positions.
  for (const std::vector<int64_t>& prompt : {std::vector<int64_t>{7, 3, 41}, std::vector<int64_t>{5, 9, 2, 33, 17, 8, 50, 12, 4}}) {
    SCOPED_TRACE("prompt of " + std::to_string(prompt.size()) + " tokens");
    GenerationTrace cached_trace, whole_trace;
    cached_trace.keep_logits = whole_trace.keep_logits = true;
    const std::vector<int64_t> cached = w.model->generate_greedy(prompt, kSteps, -1, nullptr, true, &cached_trace);
    const std::vector<int64_t> whole = w.model->generate_greedy(prompt, kSteps, -1, nullptr, false, &whole_trace);
    ASSERT_EQ(cached.size(), prompt.size() + kSteps);
    EXPECT_EQ(cached, whole);
    // Every layer's cache held the window and no more, in exactly W slots.
    EXPECT_EQ(cached_trace.kv_cache_tokens, W);
    EXPECT_EQ(cached_trace.kv_cache_slots, W);
    EXPECT_EQ(whole_trace.kv_cache_tokens, 0);  // no cache on that path

    // The logits of every step: the cached path's equal the uncached path's and the float64
    // reference's, teacher-forced on the generated sequence (the logits at position p chose p + 1).
    ASSERT_EQ(cached_trace.logits.size(), size_t(kSteps));
    ASSERT_EQ(whole_trace.logits.size(), size_t(kSteps));
    const test::RefResult ref = test::reference_forward(w.cfg, w.weights, std::vector<int64_t>(cached.begin(), cached.end() - 1));
    RefOptions full;
    full.no_sliding_window = true;
    const test::RefResult unwindowed = test::reference_forward(w.cfg, w.weights, std::vector<int64_t>(cached.begin(), cached.end() - 1), full);
    double worst_whole = 0, worst_ref = 0, nearest_unwindowed = 1e9;
    for (int t = 0; t < kSteps; ++t) {
      const int p = int(prompt.size()) - 1 + t;
      const auto row = [&](const test::RefResult& r) {
        return std::vector<double>(r.logits.begin() + size_t(p) * r.V, r.logits.begin() + size_t(p + 1) * r.V);
      };
      const std::vector<double> got = to_doubles(cached_trace.logits[size_t(t)]);
      worst_whole = std::max(worst_whole, rel_diff(got, to_doubles(whole_trace.logits[size_t(t)])));
      worst_ref = std::max(worst_ref, rel_diff(got, row(ref)));
      if (p >= W + 2) nearest_unwindowed = std::min(nearest_unwindowed, rel_diff(got, row(unwindowed)));
    }
    std::cout << "[ window " << W << " ] max rel. logit difference, cached vs uncached " << worst_whole
              << ", vs reference " << worst_ref << "; smallest vs the unwindowed reference " << nearest_unwindowed << "\n";
    EXPECT_LT(worst_whole, 1e-5);
    EXPECT_LT(worst_ref, 1e-4);
    // The window matters here: attending over every key would give other logits at every step past it.
    EXPECT_GT(nearest_unwindowed, 1e-3);
    // Not degenerate text (a repeated token would hide a read of the wrong ring slot).
    std::vector<int64_t> tail(cached.end() - 30, cached.end());
    std::sort(tail.begin(), tail.end());
    EXPECT_GT(std::unique(tail.begin(), tail.end()) - tail.begin(), 3);
  }
}

TEST(KvCache, ASlidingWindowCacheAcrossTheContextEnd) {
  // n_ctx 20: generation restarts on the last 20 tokens twice; the restarted cache again holds the
  // window only, and the tokens are those of the uncached path.
  constexpr int W = 5;
  const Windowed w = windowed(W, 20, 22);
  const std::vector<int64_t> prompt = {1, 2, 3, 4, 5, 6, 7};
  GenerationTrace trace;
  const std::vector<int64_t> cached = w.model->generate_greedy(prompt, 45, -1, nullptr, true, &trace);
  EXPECT_EQ(cached, w.model->generate_greedy(prompt, 45, -1, nullptr, false));
  EXPECT_EQ(trace.kv_cache_tokens, W);
  EXPECT_EQ(trace.kv_cache_slots, W);
}

TEST(KvCache, WithoutAWindowTheCacheHoldsEveryToken) {
  // The same measure on a model without a window: the cache grows with the sequence (what the
  // bound above is a bound against).
  const Model m = tiny(RefArch::Llama, 64, 23);
  GenerationTrace trace;
  m.generate_greedy({3, 1, 4}, 30, -1, nullptr, true, &trace);
  EXPECT_EQ(trace.kv_cache_tokens, 3 + 30 - 1);  // the last token is chosen, never read
  EXPECT_GE(trace.kv_cache_slots, trace.kv_cache_tokens);
}

// A prompt longer than the prefill's chunk (512 tokens) is read chunk by chunk against the cache:
// 1100 tokens (a batch forward of 512, then chunks of 512 and 76) give the logits of the whole
// window's forward and the tokens of the uncached path, learned positions and RoPE with GQA.
TEST(KvCache, ALongPromptIsReadInChunksAsInOneForward) {
  for (RefArch arch : {RefArch::GPT2, RefArch::Llama}) {
    SCOPED_TRACE(arch == RefArch::GPT2 ? "gpt2" : "llama gqa");
    const Model m = tiny(arch, 1200, 17);
    std::mt19937 rng(3);
    std::vector<int64_t> prompt(1100);
    for (auto& id : prompt) id = int64_t(rng() % 60);
    GenerationTrace trace;
    trace.keep_logits = true;
    const std::vector<int64_t> cached = m.generate_greedy(prompt, 12, -1, nullptr, true, &trace);
    const std::vector<int64_t> whole = m.generate_greedy(prompt, 12, -1, nullptr, /*kv_cache=*/false);
    EXPECT_EQ(cached, whole);
    at::NoGradGuard no_grad;
    const at::Tensor full = m.forward(at::tensor(prompt).view({1, -1}));
    ASSERT_FALSE(trace.logits.empty());
    EXPECT_LT((trace.logits[0] - full[0][-1].to(at::kFloat)).abs().max().item<double>(), 1e-4);
    EXPECT_GE(trace.kv_cache_tokens, 1100);
  }
}

// Batched generation (generate_greedy_batch): prompts of lengths 3, 9 and 5 decoded together give
// each sequence exactly the tokens generate_greedy gives its prompt alone, across the context end
// (n_ctx 60, 70 new tokens), for softmax with its cache (learned positions; RoPE with grouped-query
// attention), a converted model of hybrid heads and one of mixed head types (softmax, hybrid,
// linear in one layer); a stop token ends only the sequence that makes it.
TEST(BatchedGeneration, EachSequenceIsWhatItsPromptMakesAlone) {
  const std::vector<std::vector<int64_t>> prompts = {{3, 14, 15}, {9, 26, 5, 35, 8, 9, 7, 9, 3}, {2, 7, 1, 8, 2}};
  const int steps = 70;
  for (RefArch arch : {RefArch::GPT2, RefArch::Llama}) {
    Model m = tiny(arch, 60, 5);
    const int S = m.config().n_layer, H = m.config().n_head, d = m.config().head_dim;
    FeatureMapSpec spec;
    spec.name = "hedgehog";
    spec.seed = 3;
    const std::vector<std::vector<int64_t>> dims(size_t(S), std::vector<int64_t>(size_t(H), 8));
    const auto hybrid = std::make_shared<HeadFeatureMaps>(make_head_feature_maps(spec, dims, S, H, d, 3));
    const std::vector<std::vector<HeadType>> types = {{HeadType::Softmax, HeadType::Hybrid, HeadType::Linear, HeadType::Linear},
                                                      {HeadType::Linear, HeadType::Hybrid, HeadType::Hybrid, HeadType::Softmax}};
    const auto mixed = std::make_shared<HeadFeatureMaps>(make_head_feature_maps(spec, dims, S, H, d, 3, types));
    for (const auto& [name, maps] : std::vector<std::pair<std::string, std::shared_ptr<HeadFeatureMaps>>>{
             {"softmax", nullptr}, {"hybrid", hybrid}, {"mixed", mixed}}) {
      SCOPED_TRACE(std::string(arch == RefArch::GPT2 ? "gpt2 " : "llama gqa ") + name);
      if (maps) m.set_feature_maps(maps);
      std::vector<std::vector<int64_t>> alone;
      for (const auto& p : prompts) alone.push_back(m.generate_greedy(p, steps));
      int calls = 0;
      const auto batch = m.generate_greedy_batch(prompts, steps, -1, [&](size_t, const std::vector<int64_t>&) { ++calls; });
      ASSERT_EQ(batch.size(), prompts.size());
      for (size_t b = 0; b < prompts.size(); ++b) EXPECT_EQ(batch[b], alone[b]) << "sequence " << b;
      EXPECT_EQ(calls, steps * int(prompts.size()));
      // The fifth token sequence 1 makes, as a stop token: sequence 1 ends before it; each sequence
      // is what generate_greedy with that stop makes of its prompt.
      const int64_t stop = alone[1][prompts[1].size() + 4];
      const auto stopped = m.generate_greedy_batch(prompts, steps, stop);
      EXPECT_LE(stopped[1].size(), prompts[1].size() + 4);
      for (size_t b = 0; b < prompts.size(); ++b) EXPECT_EQ(stopped[b], m.generate_greedy(prompts[b], steps, stop)) << "sequence " << b;
      std::vector<int64_t> made;  // every generated token: a degenerate text would hide a wrong read
      for (size_t b = 0; b < prompts.size(); ++b) made.insert(made.end(), alone[b].begin() + int64_t(prompts[b].size()), alone[b].end());
      std::sort(made.begin(), made.end());
      EXPECT_GT(std::unique(made.begin(), made.end()) - made.begin(), 5);
    }
  }
}

}  // namespace test_kv_cache
}  // namespace attnscope::test
