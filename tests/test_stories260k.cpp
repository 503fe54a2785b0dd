// stories260K (llama2.c, MIT): a real pretrained Llama-architecture model. Greedy generation with
// attnscope's loader, tokenizer and forward pass must reproduce llama2.c's own run.c output.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "attnscope/model/model.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_stories260k {

using namespace attnscope;

namespace {

using attnscope::test::read_file;

std::string rstrip(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

#define REQUIRE_STORIES(path)                                                                  \
  const std::string path = test::shared_model_file("stories260K/stories260K.bin");             \
  if (path.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin"

// run.c semantics: `steps` tokens are printed in all, prompt tokens included, BOS not counted;
// generation stops at BOS (the story separator).
std::string generate_like_run_c(const LoadedModel& m, const std::string& prompt, int steps) {
  std::vector<int64_t> ids = m.tokenizer->encode_for_model(prompt);
  const int todo = steps - (int(ids.size()) - 1);
  return m.tokenizer->decode(m.model->generate_greedy(ids, todo, m.tokenizer->bos_id()));
}

}  // namespace

TEST(Stories260K, ConfigFromHeader) {
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  const ModelConfig& c = m.model->config();
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.d_ff, 172);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_kv_head, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.n_ctx, 512);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(m.tokenizer->kind(), "llama2c");
}

TEST(Stories260K, GreedyNoPromptMatchesRunC) {
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  const std::string want = read_file(test::shared_models() + "/stories260K/reference_greedy_t0_n256_noprompt.txt");
  EXPECT_EQ(rstrip(generate_like_run_c(m, "", 256)), rstrip(want));
}

TEST(Stories260K, GreedyPromptZooMatchesRunC) {
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  const std::string want = read_file(test::shared_models() + "/stories260K/reference_greedy_t0_n60_prompt_Zoo.txt");
  EXPECT_EQ(rstrip(generate_like_run_c(m, "Zoo", 60)), rstrip(want));
}

TEST(Stories260K, CliGenerateMatchesRunC) {
  REQUIRE_STORIES(bin);
  std::string out;
  ASSERT_EQ(test::run_command(test::cli_path() + " generate --model " + bin + " --prompt Zoo --steps 60", &out), 0)
      << out;
  const std::string want = read_file(test::shared_models() + "/stories260K/reference_greedy_t0_n60_prompt_Zoo.txt");
  EXPECT_EQ(rstrip(out), rstrip(want));
}

TEST(Stories260K, PerplexityOnItsOwnStoryIsLow) {
  // The model's own greedy story is far more likely under it than uniform (log 512 = 6.24 nats).
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  const std::string story = read_file(test::shared_models() + "/stories260K/reference_greedy_t0_n256_noprompt.txt");
  const double loss = m.model->mean_loss(m.tokenizer->encode_for_model(story), 256);
  EXPECT_LT(loss, 1.0);
  EXPECT_GT(loss, 0.0);
}

}  // namespace test_stories260k
