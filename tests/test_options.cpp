// One definition per option (issue 25, options.h): every row of every option table checks its own
// values and is named by its own flag, a quantity has one flag across all commands, and job.json
// and sessions read back what they wrote through the same rows.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/base/options.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/finetune/finetune.h"
#include "attnscope/pipeline/linearize.h"
#include "attnscope/workbench/session.h"
#include "test_support.h"

namespace attnscope {
namespace test_options {
namespace {

// A value the row must refuse: just outside its range, a name no table has, a negative seed.
template <class O>
std::optional<std::string> bad_value(const Option<O>& r) {
  switch (r.kind) {
    case OptionKind::Whole:
      return std::isfinite(r.range.lo) ? std::to_string(int64_t(r.range.lo) - 1) : std::to_string(int64_t(r.range.hi) + 1);
    case OptionKind::Number:
      return r.range.lo_open ? number_arg(r.range.lo) : number_arg(r.range.lo - 1);
    case OptionKind::Unsigned: return std::string("-1");
    case OptionKind::Name: return std::string("no-such-name");
    default: return std::nullopt;
  }
}

// A valid value that is not the options' default (for the round trips).
template <class O>
std::string other_value(const Option<O>& r, const O& o) {
  const std::string now = r.get(o);
  switch (r.kind) {
    case OptionKind::Whole: {
      const int64_t lo = int64_t(r.range.lo), hi = int64_t(std::min(r.range.hi, 1e9));
      const int64_t v = now.empty() ? lo + 3 : std::stoll(now) + 1;
      return std::to_string(v <= hi ? v : lo);
    }
    case OptionKind::Number: {
      const double lo = r.range.lo, hi = std::min(r.range.hi, 1e6);
      const double v = now.empty() ? (lo + hi) / 3 : std::strtod(now.c_str(), nullptr) * 0.5 + (lo + hi) / 7;
      return number_arg(r.range.contains(v) ? v : (lo + hi) / 2);
    }
    case OptionKind::Unsigned: return "12345678901";
    case OptionKind::Name:
      for (const auto& c : r.choices)
        if (c != now) return c;
      return now;
    case OptionKind::Flag: return "1";
    case OptionKind::Texts: return "a text.txt";
    default: return "/some where/" + std::string(r.flag().substr(2));
  }
}

// Every row: its bad value is refused with its quantity, and that quantity is this row's alone in
// the table, so the CLI and the window name this row's flag or control.
template <class O>
void check_rows_refuse_their_bad_values(const OptionTable<O>& table, const char* command) {
  std::set<std::string> flags, quantities;
  int checked = 0;
  for (const Option<O>& row : table) {
    EXPECT_TRUE(flags.insert(row.flag()).second) << command << ": " << row.flag() << " twice";
    EXPECT_TRUE(quantities.insert(row.quantity).second) << command << ": quantity '" << row.quantity << "' set by two flags";
    EXPECT_EQ(option_for(table, row.quantity), &row) << command << " " << row.flag();
    const auto bad = bad_value(row);
    if (!bad) continue;
    O o;
    try {
      row.set(o, *bad);
      ADD_FAILURE() << command << " " << row.flag() << " " << *bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.quantity(), row.quantity) << command << " " << row.flag() << ": " << e.what();
      ++checked;
    }
  }
  EXPECT_GT(checked, 3) << command;
}

// The same through the program: `attnscope COMMAND FLAG BAD` is a usage error (exit 2) naming the
// flag, before any work.
template <class O>
void check_cli_names_the_flag(const OptionTable<O>& table, const char* command) {
  for (const Option<O>& row : table) {
    const auto bad = bad_value(row);
    if (!bad) continue;
    std::string out;
    const int rc = test::run_command(test::cli_path() + " " + command + " " + row.flag() + " " + *bad + " 2>&1", &out);
    EXPECT_EQ(rc, 2) << command << " " << row.flag() << " " << *bad << "\n" << out;
    EXPECT_NE(out.find(row.flag()), std::string::npos) << command << " " << row.flag() << " " << *bad << "\n" << out;
  }
}

// Every row given a value that is not its default; written as JSON through the rows and read back
// into fresh options, every row reads the same.
template <class O>
void check_json_round_trip(const OptionTable<O>& table, const char* command) {
  O o;
  for (const Option<O>& row : table) {
    if (row.kind == OptionKind::Texts) {
      row.set(o, "a text.txt");
      row.set(o, "another.txt");
      continue;
    }
    row.set(o, other_value(row, o));
  }
  const nlohmann::ordered_json j = options_json(table, o);
  O back;
  read_options_json(table, nlohmann::json::parse(j.dump()), back, "job.json");
  for (const Option<O>& row : table) {
    if (!*row.key) continue;
    EXPECT_EQ(row.get(back), row.get(o)) << command << " " << row.flag() << " in " << j.dump();
  }
}

}  // namespace

TEST(Options, EveryRowOfEveryJobTableRefusesItsBadValueByItsOwnQuantity) {
  check_rows_refuse_their_bad_values(distill_option_table(), "distill");
  check_rows_refuse_their_bad_values(finetune_option_table(), "finetune");
  check_rows_refuse_their_bad_values(linearize_option_table(), "linearize");
  check_rows_refuse_their_bad_values(train_option_table(), "the Train form");
}

TEST(Options, TheCliNamesTheFlagOfEveryRowsBadValue) {
  check_cli_names_the_flag(distill_option_table(), "distill");
  check_cli_names_the_flag(finetune_option_table(), "finetune");
  check_cli_names_the_flag(linearize_option_table(), "linearize");
}

// Issue 26 item 3: an explicit --budget 0 was "the default budget" and started the run; a bad stage-2
// learning rate named stage 1's --lr.
TEST(Options, LinearizeRefusesBudgetZeroAndNamesTheStageTwoRate) {
  std::string out;
  EXPECT_EQ(test::run_command(test::cli_path() + " linearize --budget 0 --out /nonexistent/x 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--budget"), std::string::npos) << out;
  EXPECT_NE(out.find("outside 1..16384"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(test::cli_path() + " linearize --finetune-lr -1 --out /nonexistent/x 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--finetune-lr"), std::string::npos) << out;
  EXPECT_NE(out.find("finetune learning rate -1"), std::string::npos) << out;
  EXPECT_EQ(out.find("(--lr)"), std::string::npos) << out;
}

// A quantity is one option everywhere: the same flag in every table that has it.
TEST(Options, AQuantityHasOneFlagAcrossCommands) {
  std::map<std::string, std::string> flag_of;
  const auto collect = [&](const auto& table, const char* command) {
    for (const auto& row : table) {
      const auto [it, fresh] = flag_of.emplace(row.quantity, row.flag());
      EXPECT_TRUE(fresh || it->second == row.flag())
          << command << ": '" << row.quantity << "' is " << row.flag() << " here and " << it->second << " elsewhere";
    }
  };
  collect(distill_option_table(), "distill");
  collect(finetune_option_table(), "finetune");
  collect(linearize_option_table(), "linearize");
}

TEST(Options, JobJsonAndTheSessionReadBackWhatTheyWrote) {
  check_json_round_trip(distill_option_table(), "distill");
  check_json_round_trip(finetune_option_table(), "finetune");
  check_json_round_trip(linearize_option_table(), "linearize");
  check_json_round_trip(train_option_table(), "the Train form");
}

// Linearize holds the jobs it runs: its rows are theirs (one definition), reached through it.
TEST(Options, LinearizeHoldsItsStagesOptions) {
  LinearizeOptions o;
  find_option(linearize_option_table(), "--steps")->set(o, "7");
  find_option(linearize_option_table(), "--finetune-steps")->set(o, "9");
  find_option(linearize_option_table(), "--finetune-lr")->set(o, "0.004");
  find_option(linearize_option_table(), "--lr")->set(o, "0.03");
  EXPECT_EQ(o.stage1.steps, 7);
  EXPECT_EQ(o.stage2.steps, 9);
  EXPECT_DOUBLE_EQ(o.stage2.lr, 0.004);
  EXPECT_DOUBLE_EQ(o.stage1.lr, 0.03);
  // Linearize's defaults are the ablation's best, distill's and finetune's own are kept.
  const LinearizeOptions d;
  EXPECT_EQ(d.stage1.window, 64);
  EXPECT_EQ(d.stage1.loss, DistillLoss::Output);
  EXPECT_DOUBLE_EQ(d.stage1.lr, 0.01);
  EXPECT_EQ(d.stage1.strategy, AllocStrategy::Dof);
  EXPECT_EQ(DistillOptions{}.window, 0);
  EXPECT_EQ(d.stage2.steps, FinetuneOptions{}.steps);
  // Written back: only what differs from nothing given is on the command line.
  EXPECT_EQ(linearize_command(d, "OUT").find("--features"), std::string::npos);
  EXPECT_NE(linearize_command(d, "OUT").find("--window 64"), std::string::npos);
}

// Issue 25: a fresh Train form runs exactly `attnscope linearize`'s recipe (its defaults were its
// own: loss kl, learning rate 0.02, window 0): with the DoF view at a model's defaults, the form's
// command line is the CLI's with no option given.
TEST(Options, AFreshTrainFormIsTheCliDefault) {
  LinearizeOptions cli;
  cli.model = "/m";
  cli.texts = {"/t.txt"};
  const Session fresh;
  const int64_t head_dim = 32;
  LinearizeOptions form =
      linearize_options_of(TrainSettings{}, fresh.strategy, default_budget("learned-prf", head_dim), fresh.lambda, head_dim);
  form.model = "/m";
  form.texts = {"/t.txt"};
  EXPECT_EQ(linearize_command(form, "OUT"), linearize_command(cli, "OUT"));
}

}  // namespace test_options
}  // namespace attnscope
