// `attnscope bench` (speed_bench.h): the generation benchmark on the bundled model (softmax against
// its untrained linear conversion) with peak memory against closed forms, the GPT-2-small shape,
// and clear errors for bad options. Speed figures themselves go to docs/PERFORMANCE.md, never here.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>

#include "attnscope/convert/converted_model.h"
#include "attnscope/model/model.h"
#include "attnscope/model/model_config.h"
#include "attnscope/base/device.h"
#include "attnscope/distill/distill.h"
#include "attnscope/bench/scale_bench.h"
#include "attnscope/bench/speed_bench.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_speed_bench {

using namespace attnscope;

namespace {

struct Pair {
  LoadedModel loaded;
  std::unique_ptr<Model> converted;
};

const Pair& bundled_pair() {
  static const Pair p = [] {
    Pair r;
    r.loaded = load_model(test::source_dir() + "/resources/models/brown-gpt2-mini");
    const ModelConfig& c = r.loaded.model->config();
    FeatureMapSpec spec;
    spec.name = "prf";
    spec.seed = 3;
    r.converted = std::make_unique<Model>(c, r.loaded.model->weights());
    r.converted->set_feature_maps(std::make_shared<HeadFeatureMaps>(make_head_feature_maps(
        spec, std::vector<std::vector<int64_t>>(c.n_layer, std::vector<int64_t>(c.n_head, 32)), c.n_layer, c.n_head,
        c.head_dim)));
    return r;
  }();
  return p;
}

TEST(SpeedBench, GenerationAtEachContextWithPeakMemory) {
  const Pair& p = bundled_pair();
  const ModelConfig& c = p.loaded.model->config();
  const int64_t V = c.vocab_size;
  const int64_t state_bytes = int64_t(c.n_layer) * c.n_head * (32 * c.head_dim + 32 + 1) * 4;  // M = 32, float32
  auto cache_bytes = [&](int64_t n) { return 2 * int64_t(c.n_layer) * c.n_kv_head * n * c.head_dim * 4; };
  GenerateBenchOptions o;
  o.contexts = {32, 128};
  o.tokens = 3;
  const auto rows = bench_generate(*p.loaded.model, *p.converted, o);
  ASSERT_EQ(rows.size(), 2u);
  for (size_t i = 0; i < rows.size(); ++i) {
    const ContextSpeed& r = rows[i];
    EXPECT_EQ(r.context, o.contexts[i]);
    for (double v : {r.softmax_generate_tokens_per_s, r.softmax_nocache_generate_tokens_per_s, r.linear_generate_tokens_per_s,
                     r.softmax_batch_tokens_per_s, r.linear_batch_tokens_per_s})
      EXPECT_TRUE(v > 0 && std::isfinite(v)) << v;
    // Closed forms of the memory: softmax generation holds its key-value cache (each layer's keys and
    // values of every token read, float32, made for the prompt plus 256 tokens) and steps one token
    // at a time; linear generation holds every head's state S [M, d] and z [M]. Both stay below the
    // [window, V] logits that neither generation may form (the head reads the last position only).
    // A batch forward holds [context, V] logits.
    const int64_t w = r.context - o.tokens;
    const int64_t window_logits = w * V * 4;
    const int64_t step_slack = 4 * V * 4 + (1 << 16);  // one token's logits and activations, generously
    EXPECT_GE(r.softmax_generate_peak_bytes, cache_bytes(w));
    EXPECT_LE(r.softmax_generate_peak_bytes, cache_bytes(w + 256) + step_slack);
    EXPECT_GE(r.linear_generate_peak_bytes, state_bytes);
    EXPECT_LT(r.linear_generate_peak_bytes, window_logits);
    EXPECT_GE(r.softmax_batch_peak_bytes, int64_t(r.context) * V * 4);
    EXPECT_GE(r.linear_batch_peak_bytes, int64_t(r.context) * V * 4);
  }
  // Softmax generation memory grows with the context by the cache of the extra tokens; the recurrent
  // form's does not (its state is constant): at 4x the context it stays within a small margin.
  EXPECT_GE(rows[1].softmax_generate_peak_bytes - rows[0].softmax_generate_peak_bytes, cache_bytes(128 - 32) - (1 << 16));
  EXPECT_LT(rows[1].linear_generate_peak_bytes, 2 * rows[0].linear_generate_peak_bytes);
}

// --batch: B sequences at once hold B caches (softmax) or B states (converted), and the estimate
// of each row bounds what it measured; under a memory budget between the two estimates softmax is
// skipped and the converted model still runs; below the converted model's, the row is refused
// before anything runs, with the estimate in the message.
TEST(SpeedBench, BatchesOfSequencesAndTheMemoryEstimate) {
  const Pair& p = bundled_pair();
  const ModelConfig& c = p.loaded.model->config();
  const int64_t state_bytes = int64_t(c.n_layer) * c.n_head * (32 * c.head_dim + 32 + 1) * 4;  // M = 32, float32
  auto cache_bytes = [&](int64_t n) { return 2 * int64_t(c.n_layer) * c.n_kv_head * n * c.head_dim * 4; };
  GenerateBenchOptions o;
  o.contexts = {64};
  o.batches = {1, 3};
  o.tokens = 3;
  const auto rows = bench_generate(*p.loaded.model, *p.converted, o);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].batch, 1);
  EXPECT_EQ(rows[1].batch, 3);
  for (const ContextSpeed& r : rows) {
    EXPECT_GT(r.softmax_generate_tokens_per_s, 0);
    EXPECT_GT(r.linear_generate_tokens_per_s, 0);
    EXPECT_GE(r.softmax_generate_peak_bytes, r.batch * cache_bytes(64 - 3));
    EXPECT_GE(r.linear_generate_peak_bytes, r.batch * state_bytes);
    const GenerateBenchMemory need = generate_bench_memory(c, 32, r.context, r.batch, true);
    EXPECT_LE(r.softmax_generate_peak_bytes, need.softmax);
    EXPECT_LE(r.linear_generate_peak_bytes, need.linear);
    EXPECT_LE(r.softmax_batch_peak_bytes, need.softmax);
    EXPECT_EQ(r.softmax_skipped_bytes, 0);
  }
  EXPECT_EQ(rows[1].softmax_batch_tokens_per_s, 0) << "the batch forward runs at batch 1 only";
  EXPECT_EQ(rows[1].softmax_nocache_generate_tokens_per_s, 0);
  // A budget between the two estimates: softmax skipped (with its estimate), the converted model run.
  o.batches = {3};
  o.contexts = {200};
  const GenerateBenchMemory need = generate_bench_memory(c, 32, 200, 3, true);
  ASSERT_GT(need.softmax, need.linear);
  const auto fit = bench_generate(*p.loaded.model, *p.converted, o, nullptr, need.linear + 1);
  ASSERT_EQ(fit.size(), 1u);
  EXPECT_EQ(fit[0].softmax_skipped_bytes, need.softmax);
  EXPECT_EQ(fit[0].softmax_generate_tokens_per_s, 0);
  EXPECT_GT(fit[0].linear_generate_tokens_per_s, 0);
  const std::string msg = test::error_of([&] { bench_generate(*p.loaded.model, *p.converted, o, nullptr, need.linear - 1); });
  EXPECT_NE(msg.find("200 x batch 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("GB"), std::string::npos) << msg;
}

TEST(SpeedBench, BadGenerateOptionsAreClearErrors) {
  const Pair& p = bundled_pair();
  GenerateBenchOptions o;
  o.contexts = {512};  // beyond the bundled model's 256 positions
  EXPECT_NE(test::error_of([&] { bench_generate(*p.loaded.model, *p.converted, o); }).find("256"), std::string::npos);
  o.contexts = {64};
  o.tokens = 1;
  EXPECT_NE(test::error_of([&] { bench_generate(*p.loaded.model, *p.converted, o); }).find("tokens"), std::string::npos);
  o.tokens = 3;
  EXPECT_NE(test::error_of([&] { bench_generate(*p.loaded.model, *p.loaded.model, o); }).find("softmax"),
            std::string::npos);
  o.batches = {2, 0};
  EXPECT_NE(test::error_of([&] { bench_generate(*p.loaded.model, *p.converted, o); }).find("batch"), std::string::npos);
  GenerateBenchOptions big;
  big.contexts = {65536};
  EXPECT_NE(test::error_of([&] { bench_generate(big); }).find("32768"), std::string::npos);
  big.shape = "llama-3.2-1b";  // refused before its checkpoint is written
  EXPECT_NE(test::error_of([&] { bench_generate(big); }).find("32768"), std::string::npos);
  GenerateBenchOptions shape;
  shape.shape = "llama-2";
  const std::string msg = test::error_of([&] { bench_generate(shape); });
  EXPECT_NE(msg.find("llama-3.2-1b"), std::string::npos) << msg;  // names the shapes it knows
}

// bench generate's rotary shape is Llama 3.2 1B's published one: 1,235,814,400 parameters (tied
// embeddings), 32 query heads on 8 key/value heads of 64 dims, RoPE over the whole head.
TEST(SpeedBench, Llama32Shape) {
  const ModelConfig c = model_shape_config(ModelShape::Llama32_1B);
  EXPECT_EQ(c.n_params(), 1235814400);
  EXPECT_EQ(c.n_head, 32);
  EXPECT_EQ(c.n_kv_head, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_GE(c.n_ctx, kBenchLongestContext);
}

TEST(SpeedBench, Gpt2SmallShape) {
  const ModelConfig c = gpt2_small_config();
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_head, 12);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.d_model, 768);
  EXPECT_EQ(c.d_ff, 3072);
  EXPECT_EQ(c.n_ctx, 4096);  // the default; bench_generate builds it with its largest context
  EXPECT_EQ(c.vocab_size, 50257);
  // GPT-2 small's 124,439,808 parameters at its 1024 positions (tied embeddings).
  EXPECT_EQ(gpt2_small_config(1024).n_params(), 124439808);
}

TEST(SpeedBench, TrainTimesEachRequestedLossInOrder) {
  TrainBenchOptions o;
  o.losses = {"softmax", "l2", "kl", "direct"};
  o.seq_len = 32;
  o.features = 8;
  o.steps = 1;
  const auto rows = bench_train(o);
  ASSERT_EQ(rows.size(), 4u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].loss, o.losses[i]);
    EXPECT_EQ(rows[i].steps, 1);
    EXPECT_GT(rows[i].ms_per_sample, 0);
  }
}

TEST(SpeedBench, BadTrainOptionsAndDevicesAreClearErrors) {
  TrainBenchOptions o;
  o.losses = {"l2", "nope"};
  const std::string e = test::error_of([&] { bench_train(o); });
  EXPECT_NE(e.find("'nope'"), std::string::npos) << e;
  EXPECT_NE(e.find("softmax"), std::string::npos) << e;  // names the known losses
  o.losses = {"l2"};
  o.seq_len = 1;
  EXPECT_NE(test::error_of([&] { bench_train(o); }).find("sequence length"), std::string::npos);
  EXPECT_NE(test::error_of([] { parse_device("tpu"); }).find("'tpu'"), std::string::npos);
  EXPECT_EQ(parse_device("cpu"), at::Device(at::kCPU));
  if (!at::hasCUDA()) {
    EXPECT_NE(test::error_of([] { parse_device("cuda"); }).find("without CUDA"), std::string::npos);
  }
}

TEST(SpeedBench, CliErrorsExitOne) {
  std::string out;
  EXPECT_EQ(test::run_command(test::cli_path() + " bench train --loss nope 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("nope"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(test::cli_path() + " bench generate --contexts 65536 2>&1", &out), 1) << out;
  EXPECT_NE(out.find("--contexts"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(test::cli_path() + " bench 2>&1", &out), 2) << out;
}

}  // namespace

}  // namespace test_speed_bench
