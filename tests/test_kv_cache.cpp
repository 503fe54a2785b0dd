// Softmax generation with a key-value cache (Model::generate_greedy's default): the same tokens as
// re-running the whole window for every token, across the cache's growth and past the context end,
// for learned positions, RoPE and grouped-query attention. (ForwardReference.GreedyGenerationMatches
// Reference checks the cached path against the float64 reference for every family.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

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

}  // namespace test_kv_cache
}  // namespace attnscope::test
