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

// --prompts: three prompts of different lengths decoded as one batch; the "Zoo" one is run.c's
// reference story, the others what --prompt makes of each alone; an unreadable file is refused.
TEST(Stories260K, CliGeneratesABatchOfPromptsAsEachAlone) {
  REQUIRE_STORIES(bin);
  const std::string dir = test::temp_dir("prompts");
  const std::vector<std::string> prompts = {"Once upon a time there was a", "Zoo", "Lily saw a ball"};
  {
    std::ofstream f(dir + "/prompts.txt");
    for (const auto& p : prompts) f << p << "\n\n";
  }
  std::string out;
  ASSERT_EQ(test::run_command(test::cli_path() + " generate --model " + bin + " --prompts " + dir + "/prompts.txt --steps 60 2>&1", &out), 0) << out;
  std::vector<std::string> blocks;  // the continuations, separated by blank lines
  for (size_t at = 0; at < out.size();) {
    const size_t end = out.find("\n\n", at);
    blocks.push_back(rstrip(out.substr(at, end == std::string::npos ? std::string::npos : end - at)));
    if (end == std::string::npos) break;
    at = end + 2;
  }
  ASSERT_EQ(blocks.size(), prompts.size()) << out;
  EXPECT_EQ(blocks[1], rstrip(read_file(test::shared_models() + "/stories260K/reference_greedy_t0_n60_prompt_Zoo.txt")));
  for (size_t i : {size_t(0), size_t(2)}) {
    std::string alone;
    ASSERT_EQ(test::run_command(test::cli_path() + " generate --model " + bin + " --prompt '" + prompts[i] + "' --steps 60", &alone), 0);
    EXPECT_EQ(blocks[i], rstrip(alone)) << prompts[i];
  }
  EXPECT_NE(test::run_command(test::cli_path() + " generate --model " + bin + " --prompts " + dir + "/none.txt 2>&1", &out), 0);
  EXPECT_NE(out.find(dir + "/none.txt"), std::string::npos) << out;
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
