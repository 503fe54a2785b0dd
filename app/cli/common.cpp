#include "common.h"

#include "attnscope/base/command_line.h"
#include "attnscope/base/error.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/capture/capture.h"

#include <unistd.h>

#include <iostream>
#include <thread>
#include <mutex>
#include <condition_variable>
#ifdef ATTNSCOPE_HAVE_GUI
#include "figure_export.h"
#endif

#include <algorithm>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

namespace attnscope::cli {

// The installed resources beside the program (PREFIX/bin/attnscope ->
// PREFIX/share/attnscope/resources, packaging/CMakeLists.txt), else the source tree's (a build).
std::string resources_dir() {
  if (const char* r = std::getenv("ATTNSCOPE_RESOURCES"); r && *r) return r;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "attnscope" / "resources";
    if (fs::is_directory(installed / "models", ec)) return installed.string();
  }
  return ATTNSCOPE_RESOURCES;
}

namespace {
std::string& invocation_text() {
  static std::string text = "attnscope";
  return text;
}
}  // namespace

void set_invocation(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  invocation_text() = attnscope_command(args);
}

const std::string& invocation() { return invocation_text(); }

std::string default_model() { return resources_dir() + "/models/brown-gpt2-mini"; }

std::vector<std::string> default_texts() {
  std::vector<std::string> files;
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(resources_dir()) / "texts";
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".txt") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) fail(dir.string(), "no sample texts (*.txt) here; pass --text FILE");
  return files;
}

ModelOptions with_default_model(ModelOptions o) {
  if (o.model.empty()) o.model = default_model();
  return o;
}

LoadedModel load_model_of(const ModelOptions& o) {
  LoadedModel m = load_model(with_default_model(o), Device::Cpu);
  if (!m.note.empty()) std::cerr << m.note << "\n";  // a run directory given as the model: which model it is
  return m;
}

DofSpectra compute_spectra_of(const std::string& capture_dir, const DofSettings& settings) {
  CaptureStore store(capture_dir);
  return compute_spectra(store, settings, terminal_progress("dof"));
}

void add_out_option(CLI::App* cmd, const std::shared_ptr<OutputOptions>& out, const char* help, bool required) {
  add_option_table(cmd, out_option_table(help), out);
  if (required) require(cmd, long_flag(opt::out.flags));
}

void add_format_options(CLI::App* cmd, const std::shared_ptr<FormatOptions>& format, const std::vector<OutputFormat>& formats) {
  const OptionTable<FormatOptions> table = format_option_table(formats);
  add_option_table(cmd, table, format);
  std::vector<std::string> flags;
  for (const auto& row : table) flags.push_back(row.flag());
  exclusive(cmd, flags);
}

const char* option_type_name(OptionKind kind) {
  switch (kind) {
    case OptionKind::Whole: return "INT";
    case OptionKind::Unsigned: return "UINT";
    case OptionKind::Number: return "NUMBER";
    case OptionKind::Name: return "NAME";
    case OptionKind::Wholes: return "INT,...";
    case OptionKind::Names: return "NAME,...";
    default: return "TEXT";
  }
}

void exclusive(CLI::App* cmd, const std::vector<std::string>& flags) {
  for (size_t i = 0; i < flags.size(); ++i)
    for (size_t j = i + 1; j < flags.size(); ++j) cmd->get_option(flags[i])->excludes(cmd->get_option(flags[j]));
}

void require(CLI::App* cmd, const std::string& flag) { cmd->get_option(flag)->required(); }

namespace {
std::map<std::string, std::string>& quantity_flags() {
  static std::map<std::string, std::string> flags;
  return flags;
}
}  // namespace

void note_quantity_flag(const std::string& quantity, const std::string& flag) { quantity_flags()[quantity] = flag; }

std::string option_for_quantity(const std::string& quantity) {
  const auto it = quantity_flags().find(quantity);
  return it == quantity_flags().end() ? std::string() : it->second;
}

const FigureWriter* figure_writer(const std::string& command) {
#ifdef ATTNSCOPE_HAVE_GUI
  static const views::QtFigureWriter qt;
  std::string why;
  if (views::ensure_qt(&why)) return &qt;
  std::cerr << command << ": no figures (" << why << "); the CSV files hold the same numbers\n";
#else
  std::cerr << command << ": figures need the Qt build (ATTNSCOPE_GUI=ON); the CSV files hold the same numbers\n";
#endif
  return nullptr;
}

namespace {
std::atomic<bool> stop_requested{false};
extern "C" void request_stop(int sig) {
  stop_requested.store(true);
  std::signal(sig, SIG_DFL);
}
}  // namespace

const std::atomic<bool>* stop_on_interrupt() {
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  return &stop_requested;
}

namespace {
// Without a terminal (a log file, a pipe, a batch job): the last progress the job reported, as one
// plain line every `period`, from a thread of its own, so a phase that reports nothing for minutes
// (a long evaluation, the speed measurement) is still seen to be running. The thread stops when the
// returned function is destroyed.
struct Heartbeat {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false, reported = false;
  double fraction = 0;
  std::string what;
  std::vector<ProgressSample> samples;  // for the time left (base/job.h)
  std::thread thread;
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
  }
};
}  // namespace

ProgressFn heartbeat_progress(const std::string& label, std::chrono::milliseconds period) {
  auto hb = std::make_shared<Heartbeat>();
  const auto start = std::chrono::steady_clock::now();
  hb->thread = std::thread([beat = hb.get(), label, period, start] {
    std::unique_lock<std::mutex> lock(beat->mu);
    while (!beat->cv.wait_for(lock, period, [beat] { return beat->stop; })) {
      if (!beat->reported) continue;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::vector<ProgressSample> now = beat->samples;
      now.push_back({secs, beat->fraction});
      const std::string left = time_left_text(estimate_seconds_left(now));
      std::fprintf(stderr, "%s: %d%% %s (%.0f s%s%s)\n", label.c_str(), int(beat->fraction * 100 + 0.5), beat->what.c_str(),
                   secs, left.empty() ? "" : ", ", left.c_str());
      std::fflush(stderr);
    }
  });
  return [hb, start](double f, const std::string& what) {
    std::lock_guard<std::mutex> lock(hb->mu);
    if (hb->samples.empty() || hb->samples.back().fraction != f) {
      hb->samples.push_back({std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), f});
      if (hb->samples.size() > 4096) hb->samples.erase(hb->samples.begin(), hb->samples.begin() + 2048);
    }
    hb->reported = true;
    hb->fraction = f;
    hb->what = what;
  };
}

ProgressFn terminal_progress(const std::string& label) {
  struct State {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    bool shown = false;
  };
  auto st = std::make_shared<State>();
  if (!isatty(STDERR_FILENO)) {
    // ATTNSCOPE_PROGRESS_SECONDS: the period of those lines (30 by default).
    double period = 30;
    if (const char* env = std::getenv("ATTNSCOPE_PROGRESS_SECONDS")) {
      char* end = nullptr;
      const double v = std::strtod(env, &end);
      if (end == env || *end || !(v > 0) || v > 86400)
        throw Error("ATTNSCOPE_PROGRESS_SECONDS=" + std::string(env) + ": not a number of seconds in (0, 86400]");
      period = v;
    }
    return heartbeat_progress(label, std::chrono::milliseconds(int64_t(period * 1000)));
  }
  return [st, label](double f, const std::string& what) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - st->start).count();
    if (secs < 1.0 && f < 1.0) return;
    if (secs < 1.0 && !st->shown) return;  // finished quickly: never draw
    constexpr int kWidth = 30;
    const int full = static_cast<int>(f * kWidth + 0.5);
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %s %.0fs\033[K", label.c_str(), full,
                 "##############################", kWidth - full, "", int(f * 100 + 0.5), what.c_str(), secs);
    st->shown = true;
    if (f >= 1.0) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

}  // namespace attnscope::cli
