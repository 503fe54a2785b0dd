// The allocator settings every attnscope program carries (core/src/base/malloc_conf.cpp): jemalloc
// reads them from the program without MALLOC_CONF, and MALLOC_CONF still overrides them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <sys/types.h>

#ifdef ATTNSCOPE_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_allocator {

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Runtime, JemallocReadsTheProgramsSettings) {
#ifndef ATTNSCOPE_HAVE_JEMALLOC
  GTEST_SKIP() << "built without jemalloc";
#else
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF is set and overrides the settings";
  ssize_t muzzy = 0;
  size_t size = sizeof muzzy;
  ASSERT_EQ(mallctl("opt.muzzy_decay_ms", &muzzy, &size, nullptr, 0), 0);
  EXPECT_EQ(muzzy, -1);
  size_t oversize = 1;
  size = sizeof oversize;
  ASSERT_EQ(mallctl("opt.oversize_threshold", &oversize, &size, nullptr, 0), 0);
  EXPECT_EQ(oversize, 0u);
  ssize_t dirty = 0;
  size = sizeof dirty;
  ASSERT_EQ(mallctl("opt.dirty_decay_ms", &dirty, &size, nullptr, 0), 0);
  EXPECT_GT(dirty, 0) << "dirty pages still decay (jemalloc's default)";
#endif
}

// The `attnscope` executable: its settings hold without an environment variable, and MALLOC_CONF
// overrides them option by option (jemalloc prints its options at exit with stats_print).
TEST(Runtime, CliCarriesTheSettingsAndMallocConfOverridesThem) {
#ifndef ATTNSCOPE_HAVE_JEMALLOC
  GTEST_SKIP() << "built without jemalloc";
#else
  const std::string cli = attnscope::test::cli_path();
  std::string out;
  ASSERT_EQ(attnscope::test::run_command("env MALLOC_CONF=stats_print:true " + cli + " --version", &out), 0) << out;
  EXPECT_TRUE(contains(out, "opt.muzzy_decay_ms: -1")) << out.substr(0, 4000);
  EXPECT_TRUE(contains(out, "opt.oversize_threshold: 0")) << out.substr(0, 4000);

  ASSERT_EQ(attnscope::test::run_command(
                "env MALLOC_CONF=muzzy_decay_ms:5000,stats_print:true " + cli + " --version", &out), 0) << out;
  EXPECT_TRUE(contains(out, "opt.muzzy_decay_ms: 5000")) << out.substr(0, 4000);
  EXPECT_TRUE(contains(out, "opt.oversize_threshold: 0")) << out.substr(0, 4000);
#endif
}

}  // namespace test_allocator
