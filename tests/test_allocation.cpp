// Algorithm 1 (paper 000) and its variants on hand-made DoF tables.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attnscope/allocation/allocation.h"
#include "attnscope/base/error.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_allocation {

using namespace attnscope;

namespace {

// Layer maxima {1, 2, 3, 2}, with the max in a different head each time.
const std::vector<std::vector<double>> kFourLayers = {{1.0, 0.5}, {1.2, 2.0}, {3.0, 0.1}, {0.7, 2.0}};

AllocOptions opts(AllocStrategy s, int64_t budget = 64, int64_t head_dim = 64, int64_t multiple = 1) {
  AllocOptions o;
  o.strategy = s;
  o.budget = budget;
  o.head_dim = head_dim;
  o.multiple = multiple;
  return o;
}

std::vector<std::vector<double>> random_dofs(int S, int H, uint32_t seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> ln(1.5, 1.0);  // skewed like the paper's Table 2
  std::vector<std::vector<double>> t(S, std::vector<double>(H));
  for (auto& row : t)
    for (double& v : row) v = ln(rng);
  return t;
}

double mean_of(const std::vector<std::vector<int64_t>>& dims) {
  double s = 0, n = 0;
  for (const auto& row : dims)
    for (int64_t v : row) s += double(v), ++n;
  return s / n;
}

}  // namespace

TEST(Allocation, FixGivesTheBudgetToEveryLayer) {
  const Allocation a = allocate(kFourLayers, opts(AllocStrategy::Fix, 48));
  EXPECT_EQ(a.strategy, AllocStrategy::Fix);
  EXPECT_EQ(a.layer_dims(), (std::vector<int64_t>{48, 48, 48, 48}));
  EXPECT_EQ(a.layer_dof, (std::vector<double>{1.0, 2.0, 3.0, 2.0}));
  EXPECT_EQ(a.mean_cost, 48.0);
}

TEST(Allocation, DofIsProportionalToTheLayerMax) {
  const Allocation a = allocate(kFourLayers, opts(AllocStrategy::Dof));
  EXPECT_EQ(a.layer_dims(), (std::vector<int64_t>{32, 64, 96, 64}));
  for (const auto& row : a.dims) EXPECT_EQ(row[0], row[1]) << "heads of a layer share the dimension";
  EXPECT_EQ(a.mean_cost, 64.0);
  EXPECT_EQ(a.budget, 64);
}

TEST(Allocation, DofMeanCostMatchesBudgetUpToRounding) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const auto t = random_dofs(12, 12, seed);
    const Allocation a = allocate(t, opts(AllocStrategy::Dof, 64));
    EXPECT_NEAR(a.mean_cost, 64.0, 0.5) << seed;
    EXPECT_DOUBLE_EQ(a.mean_cost, mean_of(a.dims));
    double mean_n = 0;
    for (double n : a.layer_dof) mean_n += n / 12;
    for (int s = 0; s < 12; ++s) {
      EXPECT_EQ(a.layer_dof[s], *std::max_element(t[s].begin(), t[s].end()));
      EXPECT_LE(std::abs(double(a.dims[s][0]) - 64 * a.layer_dof[s] / mean_n), 0.5 + 1e-12);
    }
  }
}

TEST(Allocation, DofClipClampsAtHeadDimWithoutRedistributing) {
  const Allocation a = allocate(kFourLayers, opts(AllocStrategy::DofClip, 64, 64));
  EXPECT_EQ(a.layer_dims(), (std::vector<int64_t>{32, 64, 64, 64}));
  EXPECT_EQ(a.mean_cost, 56.0);
  EXPECT_LT(a.mean_cost, 64.0);
  // A head_dim above every dof dimension changes nothing.
  EXPECT_EQ(allocate(kFourLayers, opts(AllocStrategy::DofClip, 64, 128)).layer_dims(),
            (std::vector<int64_t>{32, 64, 96, 64}));
}

TEST(Allocation, PerHeadSpreadsTheSameTotalOverHeads) {
  const Allocation a = allocate(kFourLayers, opts(AllocStrategy::PerHead, 64));
  // mean DoF over all 8 heads = 10.5 / 8; M = round(64 v / 1.3125) = round(48.76 v).
  const std::vector<std::vector<int64_t>> want = {{49, 24}, {59, 98}, {146, 5}, {34, 98}};
  EXPECT_EQ(a.dims, want);
  EXPECT_EQ(a.layer_dims(), (std::vector<int64_t>{49, 98, 146, 98}));
  EXPECT_NEAR(a.mean_cost, 64.0, 0.5);

  const auto t = random_dofs(6, 8, 9);
  const Allocation b = allocate(t, opts(AllocStrategy::PerHead, 32));
  EXPECT_NEAR(b.mean_cost * 48, 32.0 * 48, 0.5 * 48);
  EXPECT_NE(b.dims[0][0], b.dims[0][1]);
}

TEST(Allocation, RoundsToMultiples) {
  // {1, 1.3}: mean 1.15, targets 55.65 and 72.35 -> 56 and 72 (multiples of 8).
  const Allocation a = allocate({{1.0}, {1.3}}, opts(AllocStrategy::Dof, 64, 64, 8));
  EXPECT_EQ(a.layer_dims(), (std::vector<int64_t>{56, 72}));
  EXPECT_EQ(a.multiple, 8);
  const Allocation plain = allocate({{1.0}, {1.3}}, opts(AllocStrategy::Dof, 64, 64, 1));
  EXPECT_EQ(plain.layer_dims(), (std::vector<int64_t>{56, 72}));
  const Allocation odd = allocate({{1.0}, {1.6}}, opts(AllocStrategy::Dof, 64, 64, 1));
  EXPECT_EQ(odd.layer_dims(), (std::vector<int64_t>{49, 79}));
  EXPECT_EQ(allocate({{1.0}, {1.6}}, opts(AllocStrategy::Dof, 64, 64, 8)).layer_dims(), (std::vector<int64_t>{48, 80}));

  for (AllocStrategy s : {AllocStrategy::Fix, AllocStrategy::Dof, AllocStrategy::DofClip, AllocStrategy::PerHead}) {
    const Allocation r = allocate(random_dofs(10, 4, 4), opts(s, 60, 64, 8));
    for (const auto& row : r.dims)
      for (int64_t M : row) {
        EXPECT_EQ(M % 8, 0) << alloc_strategy_name(s);
        EXPECT_GE(M, 8) << alloc_strategy_name(s);
      }
  }
  // Fix with a budget that is not a multiple: the nearest multiple.
  EXPECT_EQ(allocate(kFourLayers, opts(AllocStrategy::Fix, 60, 64, 8)).layer_dims()[0], 64);
  EXPECT_EQ(allocate(kFourLayers, opts(AllocStrategy::Fix, 3, 64, 8)).layer_dims()[0], 8);
  // dof-clip caps at the largest multiple <= head_dim.
  EXPECT_EQ(allocate(kFourLayers, opts(AllocStrategy::DofClip, 64, 60, 8)).layer_dims(), (std::vector<int64_t>{32, 56, 56, 56}));
}

TEST(Allocation, EveryDimensionAtLeastOne) {
  const std::vector<std::vector<double>> t = {{0.0, 0.0}, {5.0, 1.0}, {5.0, 0.0}};
  for (AllocStrategy s : {AllocStrategy::Dof, AllocStrategy::DofClip, AllocStrategy::PerHead}) {
    const Allocation a = allocate(t, opts(s, 16, 64));
    for (const auto& row : a.dims)
      for (int64_t M : row) EXPECT_GE(M, 1) << alloc_strategy_name(s);
  }
  EXPECT_EQ(allocate(t, opts(AllocStrategy::Dof, 16)).layer_dims(), (std::vector<int64_t>{1, 24, 24}));
  EXPECT_EQ(allocate(t, opts(AllocStrategy::PerHead, 16)).dims[2], (std::vector<int64_t>{44, 1}));
}

TEST(Allocation, BadInputsFail) {
  EXPECT_THROW(allocate(kFourLayers, opts(AllocStrategy::Dof, 0)), Error);
  EXPECT_THROW(allocate(kFourLayers, opts(AllocStrategy::Dof, 64, 64, 0)), Error);
  EXPECT_THROW(allocate(kFourLayers, opts(AllocStrategy::DofClip, 64, 0)), Error);
  EXPECT_THROW(allocate({}, opts(AllocStrategy::Dof)), Error);
  EXPECT_THROW(allocate({{}}, opts(AllocStrategy::Dof)), Error);
  EXPECT_THROW(allocate({{1.0, 2.0}, {1.0}}, opts(AllocStrategy::Dof)), Error);
  EXPECT_THROW(allocate({{1.0, NAN}}, opts(AllocStrategy::Dof)), Error);
  EXPECT_THROW(allocate({{1.0, INFINITY}}, opts(AllocStrategy::Fix)), Error);
  EXPECT_THROW(allocate({{1.0, -0.5}}, opts(AllocStrategy::Dof)), Error);
  // All zero: nothing to be proportional to, so DoF strategies refuse; fix does not need the DoF.
  for (AllocStrategy s : {AllocStrategy::Dof, AllocStrategy::DofClip, AllocStrategy::PerHead}) {
    try {
      allocate({{0.0, 0.0}, {0.0, 0.0}}, opts(s));
      ADD_FAILURE() << alloc_strategy_name(s);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DoF 0"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(allocate({{0.0, 0.0}, {0.0, 0.0}}, opts(AllocStrategy::Fix)).layer_dims(), (std::vector<int64_t>{64, 64}));
  for (AllocStrategy s : {AllocStrategy::Fix, AllocStrategy::Dof, AllocStrategy::DofClip, AllocStrategy::PerHead})
    EXPECT_EQ(parse_alloc_strategy(alloc_strategy_name(s)), s);
  try {
    parse_alloc_strategy("dof+clip");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fix, dof, dof-clip, per-head"), std::string::npos) << e.what();
  }
}

}  // namespace test_allocation
