// `attnscope bench attention` (attention_bench.h): the forms it times compute the same attention,
// and its memory figures obey the forms' closed forms.
#include <gtest/gtest.h>

#include "attnscope/bench/attention_bench.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_attention_bench {

using namespace attnscope;

TEST(AttentionBench, FormsAgreeAndMemoryFollowsTheirClosedForms) {
  AttentionBenchOptions o;
  o.lengths = {100, 512};
  o.head_dim = 64;
  o.features = 64;
  o.heads = 1;
  o.repeats = 1;
  o.dtype = "float64";
  const auto rows = bench_attention(o);
  ASSERT_EQ(rows.size(), 2u);
  for (const AttentionSpeed& r : rows) {
    ASSERT_EQ(r.forms.size(), 4u);
    for (const AttentionTiming& t : r.forms) {
      EXPECT_TRUE(t.ran) << attention_form_name(t.form);
      EXPECT_GT(t.ms, 0);
    }
    // The previous chunked form and the cumsum form compute the kernel's output (float64).
    EXPECT_LT(r.forms[1].max_rel_diff, 1e-12);
    EXPECT_LT(r.forms[2].max_rel_diff, 1e-12);
    // cumsum holds every prefix state [L, M, d]; softmax the [L, L] map; the kernel neither (its
    // chunk states are 1/64 of the cumsum's, plus a few 64 x 64 blocks per chunk).
    const int64_t L = r.length, states = L * 64 * 64 * 8, map = L * L * 8;
    EXPECT_GE(r.forms[2].peak_bytes, states);
    EXPECT_GE(r.forms[3].peak_bytes, map);
    EXPECT_LT(r.forms[0].peak_bytes, states / 4);
  }
}

TEST(AttentionBench, BadOptionsAreClearErrors) {
  AttentionBenchOptions o;
  o.lengths = {0};
  EXPECT_NE(test::error_of([&] { bench_attention(o); }).find("length"), std::string::npos);
  o.lengths = {64};
  o.dtype = "float16";
  EXPECT_NE(test::error_of([&] { bench_attention(o); }).find("float16"), std::string::npos);
  o.dtype = "bfloat16";
  EXPECT_NE(test::error_of([&] { bench_attention(o); }).find("CUDA"), std::string::npos);
  o.dtype = "float32";
  o.memory_limit_bytes = 1;  // every form skipped, none run
  const auto rows = bench_attention(o);
  for (const AttentionTiming& t : rows[0].forms) EXPECT_FALSE(t.ran);
}

}  // namespace test_attention_bench
