// Where a run stands, in words (run_status.h): one text for the Train tab and `attnscope jobs`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "attnscope/workbench/run_status.h"
#include "test_support.h"

namespace attnscope {
namespace test_run_status {

TEST(RunStatus, EveryStateInWords) {
  RunStatus s;
  EXPECT_EQ(run_status_text(s), "No run yet: choose the options and press Linearize");
  s.state = RunState::Running;
  s.step = 3, s.steps = 10;
  EXPECT_EQ(run_status_text(s), "Training: step 3 of 10");
  s.linearize = true;
  EXPECT_EQ(run_status_text(s), "Linearizing: stage 1 (distill) step 3 of 10");
  s.finetune_step = 5, s.finetune_steps = 200;
  EXPECT_EQ(run_status_text(s), "Linearizing: stage 2 (finetune) step 5 of 200");
  s.state = RunState::Killed;
  EXPECT_EQ(run_status_text(s), "Stopped at stage 2 (finetune) step 5 of 200: Resume continues that stage");
  s.linearize = false;
  EXPECT_EQ(run_status_text(s), "Stopped at step 3 of 10: no checkpoint yet, train it again");
  s.checkpoint_step = 2;
  EXPECT_EQ(run_status_text(s), "Stopped at step 3 of 10: Resume continues from the checkpoint at step 2");
  s.checkpoint_error = "bad.safetensors: cut short";
  EXPECT_EQ(run_status_text(s), "Stopped at step 3 of 10: its checkpoint cannot be read (bad.safetensors: cut short)");
  s.state = RunState::Finished;
  EXPECT_EQ(run_status_text(s), "Finished: 10 steps");
  s.validation_kl = 0.012345678;
  EXPECT_EQ(run_status_text(s), "Finished: 10 steps, validation KL 0.01235 (mean of layers)");
  s.linearize = true;
  LengthResult r;
  r.seq_len = 512, r.final_loss = std::log(26.756), r.original_loss = std::log(25.1);
  s.result = r;
  EXPECT_EQ(run_status_text(s), "Finished: held-out perplexity 26.76 at 512 tokens (original 25.10)");
  s.result->adapted_loss = std::log(27.0);
  EXPECT_EQ(run_status_text(s), "Finished: held-out perplexity 26.76 at 512 tokens (original 25.10), original finetuned 27.00");
  s.state = RunState::Failed;
  EXPECT_EQ(run_status_text(s), "Failed before training began (see the Jobs tab)");
}

// From the files: a folder without job.json stopped before it began; a checkpoint whose step is not
// a number is named.
TEST(RunStatus, ReadFromARunsFiles) {
  const std::string dir = test::temp_dir("run_status") + "/run";
  std::filesystem::create_directories(dir);
  EXPECT_EQ(read_run_status(dir).state, RunState::Failed);
  EXPECT_EQ(checkpoint_step(dir), 0);
}

}  // namespace test_run_status
}  // namespace attnscope
