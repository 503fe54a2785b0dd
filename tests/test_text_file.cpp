// write_text_file: whole files or nothing, and a clear error naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "attnscope/base/error.h"
#include "attnscope/base/text_file.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_text_file {

using namespace attnscope;
namespace fs = std::filesystem;

TEST(TextFile, ReplacesWholeFilesAndLeavesNoTemporary) {
  const std::string path = test::temp_dir("text_file") + "/a.md";
  write_text_file(path, "first version, longer than the second\n");
  write_text_file(path, "second\n");
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), "second\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(TextFile, UnwritablePathFailsNamingIt) {
  const std::string path = test::temp_dir("text_file") + "/no/such/dir/a.md";
  try {
    write_text_file(path, "x");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

}  // namespace test_text_file
