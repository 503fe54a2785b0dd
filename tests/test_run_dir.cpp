// The run directory (run_dir.h): metrics appended line by line and truncated at a resumed step,
// checkpoints replaced whole with no temporary left behind.
#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "attnscope/run/run_dir.h"
#include "attnscope/io/safetensors.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_run_dir {

using namespace attnscope;
namespace fs = std::filesystem;

TEST(RunDir, MetricsTruncateAtResumedStepAndCheckpointsReplaceWhole) {
  const std::string dir = test::temp_dir("run_dir") + "/run";
  {
    RunDir run(dir, true);
    run.write_job("{\"steps\": 3}\n");
    run.append_metrics({"{\"step\":1,\"layer\":0,\"loss\":2}", "{\"step\":2,\"layer\":0,\"loss\":1}"});
    run.append_metric("{\"step\":3,\"layer\":0,\"loss\":0.5}");
    run.append_metric("{\"step\":4,\"lay");  // cut short by a kill
    run.write_checkpoint({{"a", at::ones({2})}}, {{"step", "1"}});
    run.write_checkpoint({{"a", at::full({2}, 3.0)}}, {{"step", "2"}});
    run.log("hello");
    run.mark_running();
    EXPECT_EQ(run_state(dir), RunState::Running);  // this process
  }
  EXPECT_EQ(run_state(dir), RunState::Killed);  // stopped without a report
  std::ofstream(dir + "/running") << "999999999\n";  // a pid no process has: a kill -9
  EXPECT_EQ(run_state(dir), RunState::Killed);
  RunDir again(dir, false);
  again.truncate_metrics_after(2);
  EXPECT_EQ(test::read_file(dir + "/metrics.jsonl"),
            "{\"step\":1,\"layer\":0,\"loss\":2}\n{\"step\":2,\"layer\":0,\"loss\":1}\n");
  again.append_metric("{\"step\":3,\"layer\":0,\"loss\":0.25}");
  EXPECT_NE(test::read_file(dir + "/metrics.jsonl").find("0.25}\n"), std::string::npos);
  SafetensorsFile ck(again.checkpoint_path());
  EXPECT_EQ(ck.metadata().at("step"), "2");
  EXPECT_EQ(ck.tensor("a")[0].item<float>(), 3.0f);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) ++files, (void)e;
  EXPECT_EQ(files, 1);
  EXPECT_NE(test::read_file(dir + "/log.txt").find("] hello\n"), std::string::npos);
  EXPECT_ANY_THROW(RunDir(test::temp_dir("run_dir_none"), false));
}

// The other ranks of a distributed job open the run directory without writing: nothing is created,
// and every write is skipped; opening one that is not a run directory is still an error.
TEST(RunDir, ReadOnlyRunDirWritesNothing) {
  const std::string dir = test::temp_dir("run_dir_ro") + "/run";
  {
    RunDir run(dir, /*create=*/true, /*writes=*/false);
    run.mark_running();
    run.write_job("{}\n");
    run.append_metric("{\"step\": 1}");
    run.log("hello");
    run.write_checkpoint({{"a", at::ones({2})}}, {{"step", "1"}});
    run.write_report("{}\n");
    EXPECT_FALSE(run.has_checkpoint());
  }
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_ANY_THROW(RunDir(test::temp_dir("run_dir_ro_none"), false, false));
}

// Issue 18, defect 3: run states are one name table (the words `attnscope jobs` prints); a folder
// without job.json stopped before it began.
TEST(RunDir, RunStatesAreANameTableAndAFolderWithoutAJobFailed) {
  EXPECT_EQ(run_state_names(), (std::vector<std::string>{"running", "finished", "killed", "failed"}));
  for (const std::string& n : run_state_names()) EXPECT_EQ(run_state_name(parse_run_state(n)), n);
  const std::string dir = test::temp_dir("run_state") + "/run";
  fs::create_directories(dir);
  EXPECT_EQ(run_state(dir), RunState::Failed);
}

}  // namespace test_run_dir
