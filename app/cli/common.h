// What every CLI command shares: the registration of core's option tables (every flag of every
// command is a row of one: option_defs.h's definitions bound to a core options struct), the default
// model, a terminal progress bar, and registration hooks (one per command file).
#pragma once
#include <chrono>
#include <CLI/CLI.hpp>
#include <atomic>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/analysis/dof.h"
#include "attnscope/base/command_line.h"
#include "attnscope/base/options.h"
#include "attnscope/base/output_options.h"
#include "attnscope/base/error.h"
#include "attnscope/base/figure.h"
#include "attnscope/base/job.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/model/compute_dtype.h"
#include "attnscope/model/model.h"
#include "attnscope/model/model_options.h"
#include "attnscope/formats/job_file.h"
#include "attnscope/base/progress.h"

namespace attnscope::cli {

// The command line this process was started with, as `attnscope ...` with every argument quoted
// (main.cpp records it): the command a foreground job records, which reruns it exactly.
void set_invocation(int argc, char** argv);
const std::string& invocation();

// The bundled model under resources/ (ATTNSCOPE_RESOURCES overrides where resources live).
std::string resources_dir();
std::string default_model();
// The sample texts under resources/texts (*.txt, sorted); Error naming the folder when there are none.
std::vector<std::string> default_texts();

// Remembers that `flag` sets `quantity`, for option_for_quantity (main.cpp adds the flag to an
// Error about that quantity).
void note_quantity_flag(const std::string& quantity, const std::string& flag);
// The flag that sets `quantity`, "" when none is known.
std::string option_for_quantity(const std::string& quantity);

// The word the help shows for a value of this kind: INT, UINT, NUMBER, NAME, TEXT, INT,... .
const char* option_type_name(OptionKind kind);

// Registers every row of a core option table (options.h) on `cmd`, parsing into *o: a bad value is
// a usage error naming the flag (exit 2); the help shows *o's values as the defaults (what is in it
// when it is registered). Every flag a command takes comes from here: the rows are the catalogue's
// definitions (option_defs.h), and each notes the flag of its quantity for core's errors.
template <class O>
void add_option_table(CLI::App* cmd, const OptionTable<O>& table, const std::shared_ptr<O>& o) {
  const O defaults = *o;
  for (const Option<O>& row : table) {
    note_quantity_flag(row.quantity, row.flag());
    const auto set = [o, row](const std::string& text) {
      try {
        row.set(*o, text);
      } catch (const Error& e) {
        throw CLI::ValidationError(row.flag(), e.what());
      }
    };
    if (row.kind == OptionKind::Flag) {
      cmd->add_flag_callback(row.flags, [set] { set("1"); }, row.help);
      continue;
    }
    if (row.kind == OptionKind::Texts) {
      cmd->add_option_function<std::vector<std::string>>(
             row.flags,
             [set](const std::vector<std::string>& texts) {
               for (const std::string& text : texts) set(text);
             },
             row.help)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
      continue;
    }
    CLI::Option* opt = nullptr;
    if (row.kind == OptionKind::Wholes || row.kind == OptionKind::Names) {
      // "128,512" or repeated: one list.
      opt = cmd->add_option_function<std::vector<std::string>>(
                   row.flags,
                   [set](const std::vector<std::string>& items) {
                     std::string joined;
                     for (const std::string& item : items) joined += (joined.empty() ? "" : ",") + item;
                     set(joined);
                   },
                   row.help)
                ->delimiter(',')
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    } else {
      opt = cmd->add_option_function<std::string>(row.flags, set, row.help);
    }
    opt->type_name(option_type_name(row.kind));
    const std::string d = (row.value ? row.value : row.get)(defaults);
    if (!d.empty()) opt->default_str(d);
  }
}

// The tables every command shares (output_options.h): -o,--out described for the command (required:
// a usage error without it), and the output formats a command offers, of which at most one is given.
void add_out_option(CLI::App* cmd, const std::shared_ptr<OutputOptions>& out, const char* help, bool required);
void add_format_options(CLI::App* cmd, const std::shared_ptr<FormatOptions>& format, const std::vector<OutputFormat>& formats);

// The options of `flags` (long forms) exclude one another: giving two is a usage error.
void exclusive(CLI::App* cmd, const std::vector<std::string>& flags);
// The option `flag` must be given (a usage error naming it otherwise).
void require(CLI::App* cmd, const std::string& flag);

// Runs `check` (core's checks between options, which throw Error naming a quantity): an Error
// whose quantity a registered flag sets becomes a usage error naming that flag (exit 2); others
// pass through (exit 1).
template <class F>
void check_as_usage(F&& check) {
  try {
    check();
  } catch (const Error& e) {
    const std::string flag = option_for_quantity(e.quantity());
    if (flag.empty()) throw;
    throw CLI::ValidationError(flag, e.what());
  }
}

// The model of a command: o.model, or the bundled model when none was given; loaded in o.compute.
ModelOptions with_default_model(ModelOptions o);
LoadedModel load_model_of(const ModelOptions& o);

// The spectra of a capture, computed with `settings` and a progress bar.
DofSpectra compute_spectra_of(const std::string& capture_dir, const DofSettings& settings);

// The figure writer of this build: Qt's in the GUI build when Qt can start (offscreen without a
// display), else null with a note on stderr saying that only CSV/tables are written.
const FigureWriter* figure_writer(const std::string& command);

// SIGINT and SIGTERM (Ctrl-C; torchrun or Slurm stopping a job) from now on set the returned flag,
// which a job's progress (sub_progress) turns into a cancel at its next step, so the last checkpoint
// stays whole for --resume; a second signal acts as usual (the default handler is back).
const std::atomic<bool>* stop_on_interrupt();

// A one-line bar on stderr once the work has run a second; without a terminal, a plain line with
// the last progress every 30 s (heartbeat_progress).
ProgressFn terminal_progress(const std::string& label);
// "LABEL: 42% WHAT (312 s)" on stderr every `period` once the job has reported, until the returned
// function is destroyed.
ProgressFn heartbeat_progress(const std::string& label, std::chrono::milliseconds period);

// A command that runs one resumable job in a run directory (finetune, linearize): the options of
// its table, --out RUN for a new run or --resume RUN (which keeps job.json's options: an option
// given with it is refused), every check before any work (core's error names the quantity; the
// flag that sets it is added), then the job with a progress bar; Ctrl-C stops it at its next step
// and says how to continue.
template <typename Options, typename Result>
struct ResumableJob {
  const char* name;
  JobKind kind;
  const char* out_help;
  const OptionTable<Options>& (*table)();
  void (*check)(const Options&);
  std::string (*command)(const Options&, const std::string&);
  Result (*start)(const Options&, const std::string&, const ProgressFn&);
  Result (*resume)(const std::string&, const ProgressFn&);
  void (*print)(const Result&);
};

template <typename Options, typename Result>
void add_resumable_job(CLI::App* cmd, const ResumableJob<Options, Result>& j) {
  auto o = std::make_shared<Options>();
  auto dirs = std::make_shared<OutputOptions>();
  add_option_table(cmd, j.table(), o);
  add_option_table(cmd, resumable_out_option_table(j.out_help, "continue the killed job in this run directory"), dirs);
  exclusive(cmd, {"--out", "--resume"});
  cmd->callback([=] {
    const std::string* out = &dirs->out;
    const std::string* resume = &dirs->resume;
    const bool resuming = !resume->empty();
    if (resuming)
      for (const auto& row : j.table())
        if (cmd->count(row.flag()))
          throw CLI::ValidationError(row.flag(), "a resumed run keeps its job.json's options");
    if (!resuming) {
      if (out->empty()) throw CLI::RequiredError("--out");
      check_as_usage([&] { j.check(*o); });
      o->python_module = resources_dir() + "/python/attnscope_linear.py";
    }
    const std::string run = resuming ? *resume : *out;
    const std::string resume_line = resume_command(j.name, run);
    const std::atomic<bool>* stop_requested = stop_on_interrupt();
    Result r;
    try {
      run_job(j.kind, j.name, resuming ? resume_line : j.command(*o, run),
              [&](Job& job) {
                const ProgressFn progress = sub_progress(job.progress(), 0, 1, stop_requested);
                r = resuming ? j.resume(run, progress) : j.start(*o, run, progress);
              },
              terminal_progress(j.name));
    } catch (const Cancelled&) {
      std::cerr << "\n" << j.name << ": stopped; continue with: " << resume_line << "\n";
      throw;
    }
    j.print(r);
  });
}

void register_info(CLI::App& app);
void register_logits(CLI::App& app);
void register_generate(CLI::App& app);
void register_eval(CLI::App& app);
void register_capture(CLI::App& app);
void register_pretrain(CLI::App& app);
void register_gui(CLI::App& app);
void register_dof(CLI::App& app);
void register_allocate(CLI::App& app);
void register_metrics(CLI::App& app);
void register_maps(CLI::App& app);
void register_report(CLI::App& app);
void register_distill(CLI::App& app);
void register_jobs(CLI::App& app);
void register_convert(CLI::App& app);
void register_bench(CLI::App& app);
void register_attention_bench(CLI::App* bench);  // bench_attention.cpp
void register_dof_bench(CLI::App* bench);        // bench_dof.cpp
void register_scale_bench(CLI::App* bench);      // bench_scale.cpp
void register_compare(CLI::App& app);
void register_finetune(CLI::App& app);
void register_linearize(CLI::App& app);
void register_workspace(CLI::App& app);

}  // namespace attnscope::cli
