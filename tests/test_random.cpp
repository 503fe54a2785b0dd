// The random module: published SplitMix64 values, unbiased draws, uniform subsets, and the capture
// windows it draws are the ones the earlier hand-written shuffle drew (so existing seeds keep their
// windows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "attnscope/base/error.h"
#include "attnscope/base/random.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_random {

using namespace attnscope;

TEST(Random, SplitMix64MatchesThePublishedSequence) {
  // SplitMix64 (Steele, Lea, Flood 2014) seeded with 0: its outputs are mix(k * 0x9E3779B97F4A7C15).
  // Reference values from the authors' C code (also in Vigna's splitmix64.c test vectors).
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(splitmix64(2 * 0x9E3779B97F4A7C15ull), 0x06C45D188009454Full);
}

TEST(Random, DerivedSeedsSeparateStreamsAndHeads) {
  std::set<uint64_t> seen;
  for (int layer = 0; layer < 8; ++layer)
    for (int head = 0; head < 8; ++head) seen.insert(derive_seed(7, layer, head));
  EXPECT_EQ(seen.size(), 64u);
  EXPECT_NE(derive_seed(0, 0, 1), derive_seed(0, 1, 0));
  EXPECT_NE(derive_seed(1, 0), derive_seed(2, 0));
  EXPECT_EQ(derive_seed(9, 3, 4), derive_seed(9, (uint64_t(3) << 32) | 4));
}

TEST(Random, BelowIsUniformByChiSquare) {
  // n = 6 and 2^64 is not a multiple of 6: a plain modulo would be biased (by 2^-62, too little to
  // see); the chi-square test checks the distribution is flat and in range.
  Rng rng(123);
  const uint64_t n = 6;
  std::vector<int64_t> count(n, 0);
  const int draws = 60000;
  for (int i = 0; i < draws; ++i) {
    const uint64_t v = rng.below(n);
    ASSERT_LT(v, n);
    ++count[v];
  }
  double chi2 = 0;
  for (int64_t c : count) chi2 += std::pow(double(c) - draws / double(n), 2) / (draws / double(n));
  EXPECT_LT(chi2, 20.5);  // 5 degrees of freedom: P(chi2 > 20.5) < 0.001
  EXPECT_THROW(rng.below(0), Error);
}

TEST(Random, BelowRejectsTheBiasedTopOfTheRange) {
  // n = 2^63 + 1: 2^64 mod n = 2^63 - 1, so a plain modulo would make values below 2^63 - 1 twice
  // as likely as the rest. The unbiased draw must skip every raw value under 2^63 - 1: replay the
  // engine by hand and check that each result is the first raw value at or above it, mod n.
  const uint64_t n = (uint64_t(1) << 63) + 1;
  Rng a(5);
  std::mt19937_64 engine(5);
  for (int i = 0; i < 1000; ++i) {
    uint64_t r;
    do r = engine(); while (r < (uint64_t(1) << 63) - 1);
    EXPECT_EQ(a.below(n), r % n);
  }
}

TEST(Random, ShuffleDrawsTheWindowsTheEarlierCaptureDrew) {
  // The capture used to shuffle with `rng() % (i + 1)`; the rejection draw differs from it only when
  // a raw draw falls below 2^64 mod (i + 1), which for these sizes has probability < 1e-16.
  for (uint64_t seed : {0ull, 1ull, 42ull, 123456789ull}) {
    for (int64_t n : {1, 2, 7, 40, 1000}) {
      std::vector<int64_t> old(n);
      for (int64_t i = 0; i < n; ++i) old[i] = i;
      std::mt19937_64 rng(seed);
      for (int64_t i = n - 1; i > 0; --i) std::swap(old[i], old[rng() % uint64_t(i + 1)]);
      EXPECT_EQ(shuffle_indices(n, seed), old) << "seed " << seed << " n " << n;
    }
  }
}

TEST(Random, SampleWithoutReplacementIsAUniformSubset) {
  // Every element of [0, 10) should be in a 3-subset with probability 3/10.
  std::vector<int> hits(10, 0);
  std::map<std::vector<int64_t>, int> subsets;
  const int trials = 12000;
  for (int t = 0; t < trials; ++t) {
    const auto s = sample_without_replacement(10, 3, uint64_t(t));
    ASSERT_EQ(s.size(), 3u);
    ASSERT_TRUE(std::is_sorted(s.begin(), s.end()));
    ASSERT_EQ(std::set<int64_t>(s.begin(), s.end()).size(), 3u);
    for (int64_t i : s) ++hits[i];
    ++subsets[s];
  }
  for (int h : hits) EXPECT_NEAR(h / double(trials), 0.3, 0.02);
  EXPECT_EQ(subsets.size(), 120u);  // all C(10, 3) subsets occur
  EXPECT_EQ(sample_without_replacement(5, 9, 1), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(sample_without_replacement(-1, 2, 1), Error);
  EXPECT_THROW(sample_without_replacement(3, -2, 1), Error);
}

}  // namespace test_random
