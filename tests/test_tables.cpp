// Tables as the paper prints them: the same cells in Markdown, LaTeX and CSV, with the escaping
// each format needs, and Table 1 / Table 2 built from hand-made allocations and DoF grids.
#include <gtest/gtest.h>

#include "attnscope/allocation/allocation.h"
#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/base/table.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_tables {

using namespace attnscope;

TEST(Tables, EveryFormatEscapesWhatItMust) {
  Table t;
  t.caption = "50% of a_b";
  t.header = {"name", "value"};
  t.add_row({"a|b", "1.5"}, {false, true});
  t.add_row({"x,\"y\"", "2"});
  const std::string md = to_markdown(t);
  EXPECT_NE(md.find("| a\\|b | **1.5** |"), std::string::npos) << md;
  EXPECT_NE(md.find("|---|---:|"), std::string::npos) << md;
  const std::string tex = to_latex(t);
  EXPECT_NE(tex.find("\\caption{50\\% of a\\_b}"), std::string::npos) << tex;
  EXPECT_NE(tex.find("\\textbf{1.5}"), std::string::npos) << tex;
  EXPECT_NE(tex.find("\\begin{tabular}{lr}"), std::string::npos) << tex;
  EXPECT_EQ(to_csv(t), "name,value\na|b,1.5\n\"x,\"\"y\"\"\",2\n");
}

TEST(Tables, NumbersAndLambdas) {
  EXPECT_EQ(fmt_number(150.0, 1), "150.0");
  EXPECT_EQ(fmt_number(0.123456, 3), "0.123");
  EXPECT_EQ(fmt_number(std::nan(""), 2), "nan");
  EXPECT_EQ(fmt_lambda(0.00390625), "2^-8");
  EXPECT_EQ(fmt_lambda(1.0), "2^0");
  EXPECT_EQ(fmt_lambda(0.001), "0.001");
}

TEST(Tables, TableOneBoldsTheThreeLargestLayersAndTableTwoEachLayerMaximum) {
  const std::vector<std::vector<double>> dof = {{1.0, 0.5}, {2.0, 1.0}, {3.0, 0.1}, {2.5, 2.0}};
  AllocOptions o;
  o.budget = 64;
  o.head_dim = 64;
  o.strategy = AllocStrategy::Fix;
  const Allocation fix = allocate(dof, o);
  o.strategy = AllocStrategy::Dof;
  const Allocation d = allocate(dof, o);
  const Table t1 = allocation_table("m", {fix, d});
  ASSERT_EQ(t1.header.size(), 3u + 4u + 1u);
  EXPECT_EQ(t1.header[3], "0");
  ASSERT_EQ(t1.rows.size(), 2u);
  for (size_t c = 3; c < 7; ++c) EXPECT_FALSE(t1.bold[0][c]) << "fix: all layers equal, nothing bold";
  // dof: N = {1, 2, 3, 2.5} -> M = round(64 N / 2.125) = {30, 60, 90, 75}; bold the 3 largest.
  EXPECT_EQ(t1.rows[1][3], "30");
  EXPECT_EQ(t1.rows[1][5], "90");
  EXPECT_FALSE(t1.bold[1][3]);
  EXPECT_TRUE(t1.bold[1][4] && t1.bold[1][5] && t1.bold[1][6]);

  std::vector<std::vector<DofValue>> grid(dof.size());
  for (size_t s = 0; s < dof.size(); ++s)
    for (double v : dof[s]) grid[s].push_back({v, v, v});
  const Table t2 = dof_grid_table(grid, 0.00390625);
  ASSERT_EQ(t2.rows.size(), 4u);
  EXPECT_EQ(t2.rows[3][0], "3");
  EXPECT_EQ(t2.rows[3][1], "2.5");
  EXPECT_TRUE(t2.bold[3][1]);
  EXPECT_FALSE(t2.bold[3][2]);
  EXPECT_NE(t2.caption.find("2^-8"), std::string::npos);
}

}  // namespace test_tables
