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
#include "attnscope/allocation/allocate_options.h"
#include "attnscope/analysis/analysis_options.h"
#include "attnscope/analysis/dof_options.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/base/options.h"
#include "attnscope/base/output_options.h"
#include "attnscope/bench/attention_bench.h"
#include "attnscope/bench/dof_bench.h"
#include "attnscope/bench/scale_bench.h"
#include "attnscope/bench/speed_bench.h"
#include "attnscope/capture/capture_options.h"
#include "attnscope/convert/convert_options.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/finetune/finetune.h"
#include "attnscope/model/model_options.h"
#include "attnscope/model/pretrain.h"
#include "attnscope/pipeline/compare.h"
#include "attnscope/pipeline/linearize.h"
#include "attnscope/pipeline/report.h"
#include "attnscope/workbench/gui_options.h"
#include "attnscope/workbench/session.h"
#include "attnscope/workbench/workspace.h"
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
    case OptionKind::Wholes:
      return std::isfinite(r.range.lo) ? std::to_string(int64_t(r.range.lo) - 1) : std::to_string(int64_t(r.range.hi) + 1);
    case OptionKind::Unsigned: return std::string("-1");
    case OptionKind::Name:
    case OptionKind::Names: return std::string("no-such-name");
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
    case OptionKind::Wholes: {
      const int64_t lo = int64_t(r.range.lo);
      return std::to_string(lo + 1) + "," + std::to_string(lo + 2);
    }
    case OptionKind::Names: {
      const std::string first = r.choices.empty() ? "a" : r.choices.front();
      return r.choices.size() > 1 ? first + "," + r.choices[1] : first;
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
// `min_checked`: rows with a value to refuse the table has at least (its numbers and names).
template <class O>
void check_rows_refuse_their_bad_values(const OptionTable<O>& table, const char* command, int min_checked = 4) {
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
  EXPECT_GE(checked, min_checked) << command;
}

// The same through the program: `attnscope COMMAND FLAG BAD` is a usage error (exit 2) naming the
// flag, before any work. Each definition is run once, in the first command that has it (with the
// same values): a command's rows are its definitions, checked one by one above.
std::set<std::string>& definitions_run() {
  static std::set<std::string> seen;
  return seen;
}
template <class O>
void check_cli_names_the_flag(const OptionTable<O>& table, const char* command) {
  for (const Option<O>& row : table) {
    const auto bad = bad_value(row);
    if (!bad) continue;
    if (!definitions_run().insert(std::string(row.flags) + "|" + row.quantity + "|" + *bad).second) continue;
    std::string out;
    const int rc = test::run_command(test::cli_path() + " " + command + " " + row.flag() + " " + *bad + " 2>&1", &out);
    EXPECT_EQ(rc, 2) << command << " " << row.flag() << " " << *bad << "\n" << out;
    EXPECT_NE(out.find(row.flag()), std::string::npos) << command << " " << row.flag() << " " << *bad << "\n" << out;
  }
}

// Options with every row given a value that is not its default (two texts for a texts row).
template <class O>
O every_row_changed(const OptionTable<O>& table) {
  O o;
  for (const Option<O>& row : table) {
    if (row.kind == OptionKind::Texts) {
      row.set(o, "a text.txt");
      row.set(o, "another.txt");
      continue;
    }
    row.set(o, other_value(row, o));
  }
  return o;
}

// Every row given a value that is not its default; written as JSON through the rows and read back
// into fresh options, every row reads the same.
template <class O>
void check_json_round_trip(const OptionTable<O>& table, const char* command) {
  const O o = every_row_changed(table);
  const nlohmann::ordered_json j = options_json(table, o);
  O back;
  read_options_json(table, nlohmann::json::parse(j.dump()), back, "job.json");
  for (const Option<O>& row : table)
    if (*row.key) {
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

// The other commands' tables (issue 25): every flag of every command is a row of one.
TEST(Options, EveryRowOfEveryCommandTableRefusesItsBadValueByItsOwnQuantity) {
  check_rows_refuse_their_bad_values(model_source_option_table(), "info", 0);
  check_rows_refuse_their_bad_values(logits_option_table(), "logits", 1);
  check_rows_refuse_their_bad_values(generate_option_table(), "generate", 3);
  check_rows_refuse_their_bad_values(eval_option_table(), "eval");
  check_rows_refuse_their_bad_values(capture_command_option_table(), "capture");
  check_rows_refuse_their_bad_values(pretrain_option_table(), "pretrain");
  check_rows_refuse_their_bad_values(dof_command_option_table(), "dof");
  check_rows_refuse_their_bad_values(allocate_command_option_table(), "allocate");
  check_rows_refuse_their_bad_values(metrics_command_option_table(), "metrics");
  check_rows_refuse_their_bad_values(maps_command_option_table(), "maps");
  check_rows_refuse_their_bad_values(report_option_table(), "report");
  check_rows_refuse_their_bad_values(convert_command_option_table(), "convert");
  check_rows_refuse_their_bad_values(compare_option_table(), "compare");
  check_rows_refuse_their_bad_values(generate_bench_option_table(), "bench generate");
  check_rows_refuse_their_bad_values(train_bench_option_table(), "bench train");
  check_rows_refuse_their_bad_values(attention_bench_option_table(), "bench attention");
  check_rows_refuse_their_bad_values(dof_bench_option_table(), "bench dof");
  check_rows_refuse_their_bad_values(scale_bench_option_table(), "bench scale");
  check_rows_refuse_their_bad_values(workspace_option_table(), "workspace", 1);
  check_rows_refuse_their_bad_values(gui_option_table(), "gui", 3);
  check_rows_refuse_their_bad_values(out_option_table("out"), "--out", 0);
  check_rows_refuse_their_bad_values(resumable_out_option_table("out", "resume"), "--out --resume", 0);
  check_rows_refuse_their_bad_values(
      format_option_table({OutputFormat::Json, OutputFormat::Csv, OutputFormat::Markdown, OutputFormat::Latex}), "formats", 0);
}

TEST(Options, TheCliNamesTheFlagOfEveryRowsBadValue) {
  check_cli_names_the_flag(distill_option_table(), "distill");
  check_cli_names_the_flag(finetune_option_table(), "finetune");
  check_cli_names_the_flag(linearize_option_table(), "linearize");
  check_cli_names_the_flag(model_source_option_table(), "info");
  check_cli_names_the_flag(logits_option_table(), "logits");
  check_cli_names_the_flag(generate_option_table(), "generate");
  check_cli_names_the_flag(eval_option_table(), "eval");
  check_cli_names_the_flag(capture_command_option_table(), "capture");
  check_cli_names_the_flag(pretrain_option_table(), "pretrain");
  check_cli_names_the_flag(dof_command_option_table(), "dof");
  check_cli_names_the_flag(allocate_command_option_table(), "allocate");
  check_cli_names_the_flag(metrics_command_option_table(), "metrics");
  check_cli_names_the_flag(maps_command_option_table(), "maps");
  check_cli_names_the_flag(report_option_table(), "report");
  check_cli_names_the_flag(convert_command_option_table(), "convert");
  check_cli_names_the_flag(compare_option_table(), "compare");
  check_cli_names_the_flag(generate_bench_option_table(), "bench generate");
  check_cli_names_the_flag(train_bench_option_table(), "bench train");
  check_cli_names_the_flag(attention_bench_option_table(), "bench attention");
  check_cli_names_the_flag(dof_bench_option_table(), "bench dof");
  check_cli_names_the_flag(scale_bench_option_table(), "bench scale");
  check_cli_names_the_flag(workspace_option_table(), "workspace");
  if (test::run_command(test::cli_path() + " gui --help", nullptr) == 0)  // a build with the window
    check_cli_names_the_flag(gui_option_table(), "gui");
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
  collect(train_option_table(), "the Train form");
  collect(model_option_table(), "the model options");
  collect(logits_option_table(), "logits");
  collect(generate_option_table(), "generate");
  collect(eval_option_table(), "eval");
  collect(capture_command_option_table(), "capture");
  collect(pretrain_option_table(), "pretrain");
  collect(dof_command_option_table(), "dof");
  collect(allocate_command_option_table(), "allocate");
  collect(metrics_command_option_table(), "metrics");
  collect(maps_command_option_table(), "maps");
  collect(report_option_table(), "report");
  collect(convert_command_option_table(), "convert");
  collect(compare_option_table(), "compare");
  collect(generate_bench_option_table(), "bench generate");
  collect(train_bench_option_table(), "bench train");
  collect(attention_bench_option_table(), "bench attention");
  collect(dof_bench_option_table(), "bench dof");
  collect(scale_bench_option_table(), "bench scale");
  collect(workspace_option_table(), "workspace");
  collect(gui_option_table(), "gui");
  collect(resumable_out_option_table("out", "resume"), "--out --resume");
  collect(format_option_table({OutputFormat::Json, OutputFormat::Csv, OutputFormat::Markdown, OutputFormat::Latex}),
          "formats");
}

TEST(Options, JobJsonAndTheSessionReadBackWhatTheyWrote) {
  check_json_round_trip(distill_option_table(), "distill");
  check_json_round_trip(finetune_option_table(), "finetune");
  check_json_round_trip(linearize_option_table(), "linearize");
  check_json_round_trip(train_option_table(), "the Train form");
  check_json_round_trip(model_option_table(), "the model options");
  check_json_round_trip(logits_option_table(), "logits");
  check_json_round_trip(generate_option_table(), "generate");
  check_json_round_trip(eval_option_table(), "eval");
  check_json_round_trip(capture_command_option_table(), "capture");
  check_json_round_trip(pretrain_option_table(), "pretrain");
  check_json_round_trip(dof_command_option_table(), "dof");
  check_json_round_trip(allocate_command_option_table(), "allocate");
  check_json_round_trip(metrics_command_option_table(), "metrics");
  check_json_round_trip(maps_command_option_table(), "maps");
  check_json_round_trip(report_option_table(), "report");
  check_json_round_trip(convert_command_option_table(), "convert");
  check_json_round_trip(compare_option_table(), "compare");
  check_json_round_trip(generate_bench_option_table(), "bench generate");
  check_json_round_trip(train_bench_option_table(), "bench train");
  check_json_round_trip(attention_bench_option_table(), "bench attention");
  check_json_round_trip(dof_bench_option_table(), "bench dof");
  check_json_round_trip(scale_bench_option_table(), "bench scale");
  check_json_round_trip(workspace_option_table(), "workspace");
  check_json_round_trip(gui_option_table(), "gui");
}

// A command line written from a table reads back, through the same rows, to the options it was
// written from (what the workbench's command lines promise), for every table.
template <class O>
void check_command_line_round_trip(const OptionTable<O>& table, const char* command) {
  const O o = every_row_changed(table);
  const O back = through_command_line(table, o);
  for (const Option<O>& row : table)
    EXPECT_EQ(row.get(back), row.get(o)) << command << " " << row.flag() << ": " << command_for(command, table, o);
}

TEST(Options, CommandLinesReadBackWhatTheyWrote) {
  check_command_line_round_trip(generate_option_table(), "generate");
  check_command_line_round_trip(eval_option_table(), "eval");
  check_command_line_round_trip(capture_command_option_table(), "capture");
  check_command_line_round_trip(dof_command_option_table(), "dof");
  check_command_line_round_trip(allocate_command_option_table(), "allocate");
  check_command_line_round_trip(metrics_command_option_table(), "metrics");
  check_command_line_round_trip(maps_command_option_table(), "maps");
  check_command_line_round_trip(report_option_table(), "report");
  check_command_line_round_trip(convert_command_option_table(), "convert");
  check_command_line_round_trip(compare_option_table(), "compare");
  check_command_line_round_trip(distill_option_table(), "distill");
  check_command_line_round_trip(linearize_option_table(), "linearize");
}

// A flag is one definition: --seed, --seq-len, --features, --feature-map, ... are the same row
// source wherever a command takes them (the catalogue's flags, quantity and help, unless the
// command describes it for itself).
TEST(Options, SharedFlagsAreTheCataloguesDefinitions) {
  const auto expect_definition = [](const auto& table, const char* command, const OptionDef& d) {
    const auto* row = find_option(table, long_flag(d.flags));
    ASSERT_NE(row, nullptr) << command << " has no " << d.flags;
    EXPECT_STREQ(row->flags, d.flags) << command;
    EXPECT_STREQ(row->quantity, d.quantity) << command;
  };
  for (const OptionDef* d : {&opt::seq_len, &opt::num_seqs, &opt::seed, &opt::texts, &opt::model}) {
    expect_definition(capture_command_option_table(), "capture", *d);
    expect_definition(report_option_table(), "report", *d);
  }
  for (const OptionDef* d : {&opt::features, &opt::feature_map, &opt::window, &opt::seed})
    expect_definition(metrics_command_option_table(), "metrics", *d);
  for (const OptionDef* d : {&opt::lambda, &opt::dof_samples, &opt::normalize, &opt::seed, &opt::device})
    expect_definition(dof_command_option_table(), "dof", *d);
  for (const OptionDef* d : {&opt::budget, &opt::strategy, &opt::multiple_of, &opt::lambda})
    expect_definition(allocate_command_option_table(), "allocate", *d);
  expect_definition(compare_option_table(), "compare", opt::num_seqs);  // -n,--num-seqs as before
  expect_definition(generate_bench_option_table(), "bench generate", opt::features);
  expect_definition(train_bench_option_table(), "bench train", opt::seq_len);
}

// Issue 25's defect: the report the workbench exports ran without the session's hybrid window while
// its command line passed --window. Its options are read back through the command line it shows
// (report_options_of), so the two agree on every option the table has, the window included.
TEST(Options, TheWorkbenchReportRunsItsCommandLine) {
  Session s;
  s.model = "/m";
  s.capture.seq_len = 48;
  s.analysis.feature_map = "hedgehog";
  s.analysis.features = 16;
  s.analysis.window = 8;
  s.analysis.max_seqs = 2;
  s.analysis.mixer_state = 0;
  s.analysis.sample_rows = 32;
  s.lambda = 1.0 / 64;
  s.budget = 24;
  const ReportOptions o = report_options_of(s, {"/t.txt"});
  EXPECT_EQ(o.analysis.window, 8);
  EXPECT_EQ(o.analysis.feature_map, "hedgehog");
  EXPECT_EQ(o.analysis.features, 16);
  EXPECT_EQ(o.analysis.mixer_state, 0) << "0 is a value in report (its default is 16)";
  EXPECT_EQ(o.analysis.sample_rows, 32);
  EXPECT_EQ(o.capture.seq_len, 48);
  EXPECT_DOUBLE_EQ(o.lambda, 1.0 / 64);
  EXPECT_EQ(o.budget, 24);
  const std::string line = command_for("report", report_option_table(), o, out_args("OUT"));
  EXPECT_NE(line.find("--feature-map hedgehog --features 16 --window 8"), std::string::npos) << line;
  EXPECT_NE(line.find("--mixer-state 0"), std::string::npos) << line;
  // softmax only: the empty map is written, since report's default is PRF.
  Session softmax = s;
  softmax.analysis.feature_map.clear();
  const ReportOptions so = report_options_of(softmax, {"/t.txt"});
  EXPECT_EQ(so.analysis.feature_map, "");
  EXPECT_NE(command_for("report", report_option_table(), so).find("--feature-map ''"), std::string::npos);
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
  // Window 0 (plain linear heads) differs from linearize's default: written, and read back as 0.
  LinearizeOptions w0 = d;
  w0.stage1.window = 0;
  EXPECT_NE(linearize_command(w0, "OUT").find("--window 0"), std::string::npos);
  LinearizeOptions back;  // window 64
  read_options_json(linearize_option_table(), nlohmann::json::parse(options_json(linearize_option_table(), w0).dump()), back, "job.json");
  EXPECT_EQ(back.stage1.window, 0);
  // A lambda written as its argument ("2^-8") is stored in job.json as the number it stands for.
  DistillOptions s = d.stage1;
  s.lambda = 1.0 / 256;
  EXPECT_DOUBLE_EQ(options_json(distill_option_table(), s)["lambda"].get<double>(), 1.0 / 256);
  s.lambda = std::pow(2.0, -8.25);
  EXPECT_DOUBLE_EQ(options_json(distill_option_table(), s)["lambda"].get<double>(), std::pow(2.0, -8.25));
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
