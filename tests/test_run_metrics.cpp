// Reading metrics.jsonl (run_metrics.h) as a job writes it: only complete lines, a line cut by a
// kill skipped, new lines only on each poll, the whole file again after a resume rewrote it; and a
// finished run as ConvertOptions (convert_job.h), with clear errors for runs that cannot convert.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "attnscope/convert/convert_job.h"
#include "attnscope/model/model_config.h"
#include "attnscope/run/run_dir.h"
#include "attnscope/run/run_metrics.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_run_metrics {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

void append(const std::string& file, const std::string& text) {
  std::ofstream out(file, std::ios::app | std::ios::binary);
  out << text;
}

}  // namespace

TEST(RunMetrics, TailReadsCompleteLinesOnlyAndSkipsBrokenOnes) {
  const std::string dir = test::temp_dir("run_metrics");
  const std::string file = dir + "/metrics.jsonl";
  MetricsTail tail(dir);
  EXPECT_FALSE(tail.poll());  // no file yet
  EXPECT_EQ(tail.metrics().num_layers(), 0);

  append(file, "{\"step\":1,\"layer\":0,\"loss\":2.5,\"lr\":0.02,\"elapsed_s\":0.1}\n"
               "{\"step\":1,\"layer\":1,\"loss\":3.5,\"lr\":0.02,\"elapsed_s\":0.1}\n"
               "{\"step\":2,\"layer\":0,\"lo");  // the writer is in the middle of this line
  EXPECT_TRUE(tail.poll());
  ASSERT_EQ(tail.metrics().training.size(), 2u);
  EXPECT_EQ(tail.metrics().training[1].layer, 1);
  EXPECT_DOUBLE_EQ(tail.metrics().training[1].loss, 3.5);
  EXPECT_DOUBLE_EQ(tail.metrics().training[0].lr, 0.02);
  EXPECT_EQ(tail.metrics().num_layers(), 2);
  EXPECT_EQ(tail.metrics().last_step(), 1);
  EXPECT_FALSE(tail.poll());  // nothing complete was added

  append(file, "ss\":1.25,\"lr\":0.02,\"elapsed_s\":0.2}\n"
               "not json\n"
               "{\"step\":2,\"layer\":0,\"val_loss\":0.7,\"val_kl\":0.05}\n"
               "{\"step\":3,\"loss\":1}\n"  // no layer: the whole model's (direct training)
               "{\"layer\":0,\"loss\":1}\n");  // no step: skipped
  EXPECT_TRUE(tail.poll());
  ASSERT_EQ(tail.metrics().training.size(), 4u);
  EXPECT_EQ(tail.metrics().training[3].layer, kModelLayer);
  EXPECT_EQ(tail.metrics().num_layers(), 2);
  EXPECT_EQ(tail.metrics().training[2].step, 2);
  EXPECT_DOUBLE_EQ(tail.metrics().training[2].loss, 1.25);
  ASSERT_EQ(tail.metrics().validation.size(), 1u);
  EXPECT_DOUBLE_EQ(tail.metrics().validation[0].val_kl, 0.05);
  EXPECT_DOUBLE_EQ(tail.metrics().validation[0].val_loss, 0.7);
  EXPECT_EQ(tail.metrics().last_step(), 3);

  // The same file read at once gives the same.
  const RunMetrics all = read_run_metrics(dir);
  EXPECT_EQ(all.training.size(), 4u);
  EXPECT_EQ(all.validation.size(), 1u);
}

TEST(RunMetrics, TailStartsOverWhenAResumeRewritesTheFile) {
  const std::string dir = test::temp_dir("run_metrics_resume") + "/run";
  {
    RunDir run(dir, true);
    run.write_job("{}\n");
    run.append_metrics({"{\"step\":1,\"layer\":0,\"loss\":4}", "{\"step\":2,\"layer\":0,\"loss\":3}",
                        "{\"step\":3,\"layer\":0,\"loss\":2}"});
  }
  MetricsTail tail(dir);
  ASSERT_TRUE(tail.poll());
  ASSERT_EQ(tail.metrics().training.size(), 3u);
  // A resume from step 1 drops steps 2 and 3 (a new file), then the run writes them again, longer
  // than before, before the next poll.
  RunDir again(dir, false);
  again.truncate_metrics_after(1);
  again.append_metrics({"{\"step\":2,\"layer\":0,\"loss\":30.5}", "{\"step\":3,\"layer\":0,\"loss\":20.25}"});
  ASSERT_TRUE(tail.poll());
  ASSERT_EQ(tail.metrics().training.size(), 3u);
  EXPECT_DOUBLE_EQ(tail.metrics().training[0].loss, 4);
  EXPECT_DOUBLE_EQ(tail.metrics().training[1].loss, 30.5);
  EXPECT_DOUBLE_EQ(tail.metrics().training[2].loss, 20.25);
  // A file that disappears empties the metrics.
  fs::remove(dir + "/metrics.jsonl");
  EXPECT_TRUE(tail.poll());
  EXPECT_TRUE(tail.metrics().training.empty());
}

// A finetune run's metrics.jsonl (stage 2 of linearize) by its own reader: steps with loss and ce,
// validations with val_loss and val_perplexity; cut and malformed lines skipped; tailed as it grows.
TEST(RunMetrics, FinetuneLinesReadByTheirOwnReader) {
  const std::string dir = test::temp_dir("finetune_metrics");
  const std::string file = dir + "/metrics.jsonl";
  FinetuneTail tail(dir);
  EXPECT_FALSE(tail.poll());
  append(file, "{\"step\":1,\"loss\":5.5,\"ce\":5.25,\"lr\":0.001,\"elapsed_s\":0.5}\n"
               "{\"step\":2,\"loss\":4.5,\"ce\":4.25,\"lr\":0.001,\"elapsed_s\":1}\n"
               "{\"step\":2,\"val_loss\":4.75,\"val_perplexity\":115.58}\n"
               "{\"step\":3,\"loss\":4");  // cut by the writer
  ASSERT_TRUE(tail.poll());
  ASSERT_EQ(tail.metrics().training.size(), 2u);
  EXPECT_DOUBLE_EQ(tail.metrics().training[1].ce, 4.25);
  EXPECT_DOUBLE_EQ(tail.metrics().training[1].loss, 4.5);
  EXPECT_DOUBLE_EQ(tail.metrics().training[0].elapsed_s, 0.5);
  ASSERT_EQ(tail.metrics().validation.size(), 1u);
  EXPECT_EQ(tail.metrics().validation[0].step, 2);
  EXPECT_DOUBLE_EQ(tail.metrics().validation[0].val_loss, 4.75);
  EXPECT_DOUBLE_EQ(tail.metrics().validation[0].val_perplexity, 115.58);
  EXPECT_EQ(tail.metrics().last_step(), 2);
  append(file, ",\"ce\":3.75}\n"
               "garbage\n"
               "{\"loss\":1,\"ce\":1}\n"           // no step: skipped
               "{\"step\":4,\"loss\":1}\n"         // no ce: not a finetune step
               "{\"step\":4,\"val_loss\":3.5}\n");  // no perplexity: its exp
  ASSERT_TRUE(tail.poll());
  ASSERT_EQ(tail.metrics().training.size(), 3u);
  EXPECT_DOUBLE_EQ(tail.metrics().training[2].ce, 3.75);
  ASSERT_EQ(tail.metrics().validation.size(), 2u);
  EXPECT_DOUBLE_EQ(tail.metrics().validation[1].val_perplexity, std::exp(3.5));
  const FinetuneMetrics all = read_finetune_metrics(dir);
  EXPECT_EQ(all.training.size(), 3u);
  EXPECT_EQ(all.validation.size(), 2u);
  // A distill run's lines are not finetune steps (no ce), nor the other way round (no layer, no val_kl).
  EXPECT_TRUE(read_finetune_metrics(test::temp_dir("finetune_metrics_none")).training.empty());
  RunMetrics distill_view;
  parse_metrics_lines("{\"step\":2,\"val_loss\":4.75,\"val_perplexity\":115.58}\n", distill_view);
  EXPECT_TRUE(distill_view.validation.empty());
}

TEST(ConvertJob, UnfinishedOrMalformedRunsAreClearErrors) {
  const std::string root = test::temp_dir("convert_job");
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  EXPECT_NE(test::error_of([&] { distill_run_model(root + "/nothing"); }).find("no job.json"), std::string::npos);
  const std::string run = root + "/run";
  fs::create_directories(run);
  std::ofstream(run + "/job.json") << "{\"model\": \"m\", \"feature_map\": {\"name\": \"learned-prf\"}, \"dims\": [8, 8]}";
  EXPECT_NE(test::error_of([&] { distill_run_model(run); }).find("has not finished"), std::string::npos);
  std::ofstream(run + "/report.json") << "{}";
  EXPECT_EQ(distill_run_model(run), "m");
  // Three layers of dims for a two-layer model; then the maps file is missing.
  std::ofstream(run + "/job.json") << "{\"model\": \"m\", \"feature_map\": {\"name\": \"learned-prf\"}, \"dims\": [8, 8, 8]}";
  EXPECT_NE(test::error_of([&] { distill_run_convert_options(run, c); }).find("dims must list the model's 2 layers"),
            std::string::npos);
  std::ofstream(run + "/job.json") << "{\"model\": \"m\", \"feature_map\": {\"name\": \"learned-prf\"}, \"dims\": [8, 8]}";
  EXPECT_NE(test::error_of([&] { distill_run_convert_options(run, c); }).find("feature_maps.safetensors"), std::string::npos);
  std::ofstream(run + "/job.json") << "{\"model\": 3";
  EXPECT_NE(test::error_of([&] { distill_run_model(run); }).find("is not valid JSON"), std::string::npos);
}

}  // namespace test_run_metrics
