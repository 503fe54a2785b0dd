// OutputDir: a directory appears whole or not at all, and a failed writer never touches the
// previous version.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "attnscope/base/error.h"
#include "attnscope/base/output_dir.h"
#include "attnscope/base/text_file.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_output_dir {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {


size_t entries(const fs::path& dir) { return size_t(std::distance(fs::directory_iterator(dir), fs::directory_iterator())); }

}  // namespace

TEST(OutputDir, CommitReplacesTheEarlierVersionWhole) {
  const fs::path root = test::temp_dir("outdir");
  const fs::path final_dir = root / "result";
  {
    OutputDir d(final_dir.string());
    EXPECT_FALSE(fs::exists(final_dir)) << "nothing at the final path before commit";
    write_text_file(d.file("a.txt"), "one");
    write_text_file(d.file("b.txt"), "one");
    d.commit();
  }
  EXPECT_EQ(test::read_file(final_dir / "a.txt"), "one");
  {
    OutputDir d(final_dir.string());
    write_text_file(d.file("a.txt"), "two");
    EXPECT_EQ(test::read_file(final_dir / "a.txt"), "one") << "the old version stays readable while the new one is written";
    d.commit();
  }
  EXPECT_EQ(test::read_file(final_dir / "a.txt"), "two");
  EXPECT_FALSE(fs::exists(final_dir / "b.txt")) << "the new version replaces the old, it is not merged into it";
  EXPECT_EQ(entries(root), 1u) << "no temporary or old directory is left beside it";
}

TEST(OutputDir, AFailedWriterLeavesTheEarlierVersionAndNoDebris) {
  const fs::path root = test::temp_dir("outdir");
  const fs::path final_dir = root / "result";
  {
    OutputDir d(final_dir.string());
    write_text_file(d.file("a.txt"), "good");
    d.commit();
  }
  try {
    OutputDir d(final_dir.string());
    write_text_file(d.file("a.txt"), "half");
    throw std::runtime_error("the writer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(test::read_file(final_dir / "a.txt"), "good");
  EXPECT_EQ(entries(root), 1u);
}

TEST(OutputDir, RefusesAMissingParentOrAFileInTheWay) {
  const fs::path root = test::temp_dir("outdir");
  EXPECT_THROW(OutputDir((root / "no" / "such" / "dir").string()), Error);
  write_text_file((root / "file").string(), "x");
  try {
    OutputDir d((root / "file").string());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a directory"), std::string::npos) << e.what();
  }
}

// A writer killed with SIGKILL leaves DIR.partial-PID behind; the next writer of DIR removes the
// debris of processes that are gone and keeps that of a live one (pid 1 always runs).
TEST(OutputDir, TheNextWriterRemovesDebrisOfKilledWriters) {
  const fs::path root = test::temp_dir("outdir_debris");
  const fs::path final_dir = root / "result";
  // A pid above the kernel's limit (pid_max is at most 2^22) names no process.
  const fs::path dead = root / "result.partial-99999999", dead_old = root / "result.old-99999998";
  const fs::path live = root / "result.partial-1", other = root / "results.partial-99999999";
  for (const auto& p : {dead, dead_old, live, other}) fs::create_directories(p / "half");
  {
    OutputDir d(final_dir.string());
    write_text_file(d.file("a.txt"), "whole");
    d.commit();
  }
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(dead_old));
  EXPECT_TRUE(fs::exists(live)) << "a running writer's directory is not debris";
  // Issue 19: any writer in the folder sweeps every killed writer's partial output there.
  EXPECT_FALSE(fs::exists(other)) << "a killed writer's partial output of another result is debris too";
  EXPECT_EQ(test::read_file((final_dir / "a.txt").string()), "whole");
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_TRUE(e.path() == final_dir || e.path() == live) << "left: " << e.path();
}

// Issue 19, defect 5: a commit killed between its two renames leaves only OUT.old-PID. The next
// writer in the folder (of any output) puts it back as OUT instead of deleting it.
TEST(OutputDir, ALoneOldVersionIsRestoredNotDeleted) {
  const fs::path root = test::temp_dir("outdir_lone_old");
  const fs::path lone = root / "model.old-99999997";
  fs::create_directories(lone);
  write_text_file((lone / "weights.txt").string(), "the user's model");
  {
    OutputDir d((root / "report").string());
    write_text_file(d.file("index.md"), "x");
    d.commit();
  }
  EXPECT_FALSE(fs::exists(lone));
  EXPECT_EQ(test::read_file((root / "model" / "weights.txt").string()), "the user's model");
  // And a lone old version of the output being written comes back before it is replaced whole.
  fs::rename(root / "model", root / "model.old-99999996");
  {
    OutputDir d((root / "model").string());
    EXPECT_EQ(test::read_file((root / "model" / "weights.txt").string()), "the user's model");
    write_text_file(d.file("weights.txt"), "new");
    d.commit();
  }
  EXPECT_EQ(test::read_file((root / "model" / "weights.txt").string()), "new");
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_TRUE(e.path() == root / "model" || e.path() == root / "report") << "left: " << e.path();
}

}  // namespace test_output_dir
