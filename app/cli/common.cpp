#include "common.h"

#include "attnscope/base/command_line.h"
#include "attnscope/base/error.h"
#include "attnscope/attention/feature_map.h"

#include <unistd.h>

#include <iostream>
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

void ModelArgs::add_to(CLI::App* cmd, bool with_dtype) {
  model = default_model();
  cmd->add_option("-m,--model", model,
                  "Hugging Face model directory, cached model name (ORG/NAME), or llama2.c .bin")
      ->capture_default_str();
  cmd->add_option("--tokenizer", tokenizer,
                  "tokenizer file or directory (llama2.c: default a tokenizer.bin/tok*.bin beside the model)");
  if (with_dtype) add_compute_dtype_option(cmd, compute);
}

LoadedModel ModelArgs::load() const { return load_model(model, tokenizer, compute_dtype_of(compute, Device::Cpu)); }

void add_compute_dtype_option(CLI::App* cmd, std::optional<at::ScalarType>& compute) {
  note_quantity_flag(kComputeDtypeQuantity, kComputeDtypeFlag);
  cmd->add_option_function<std::string>(kComputeDtypeFlag, [&compute](const std::string& v) { compute = parse_compute_dtype(v); },
                                        kComputeDtypeHelp)
      ->check(CLI::IsMember(compute_dtype_names()));
}

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

CLI::Option* add_lambda_option(CLI::App* cmd, double& lambda, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          "--lambda",
          [&lambda](const std::string& text) { lambda = parse_lambda(text); },  // Error: exit 1, naming it
          help)
      ->default_str(lambda_arg(lambda));
}

CLI::Validator feature_map_validator() {
  return CLI::Validator(
      [](std::string& name) -> std::string {
        if (name.empty()) return {};  // softmax only
        std::string all;
        for (const auto& n : feature_map_names()) {
          if (n == name) return {};
          all += (all.empty() ? "" : ", ") + n;
        }
        return "unknown feature map \"" + name + "\"; choose one of " + all;
      },
      "NAME");
}

void AnalysisArgs::add_to(CLI::App* cmd, bool mixers) {
  cmd->add_option("--feature-map", opt.feature_map, "also measure this feature map's linear attention (e.g. prf, hedgehog, elu)")
      ->check(feature_map_validator())->capture_default_str();
  cmd->add_option("-M,--features", opt.features, "feature dimension M of the feature map")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  add_window_option(cmd, opt);
  cmd->add_option("--seed", opt.seed, "seed for the feature map and sampled pairs")->capture_default_str();
  cmd->add_option("--max-seqs", opt.max_seqs, "use the first N windows only (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  if (mixers)
    cmd->add_option("--mixer-state", opt.mixer_state, "state size N for structured-mixer distances (0 = skip)")
        ->capture_default_str()->check(CLI::NonNegativeNumber);
  add_scale_options(cmd, opt);
}

void add_scale_options(CLI::App* cmd, AnalysisOptions& opt) {
  cmd->add_option("--sample-rows", opt.sample_rows,
                  "query positions per window at which the row metrics are estimated, with standard errors (0 = every row, "
                  "exact); the softmax entropies are always exact")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--mixer-tokens", opt.mixer_tokens,
                  "structured-mixer distances of the map of the first P tokens of the first window (0 = the whole window)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
}

void add_window_option(CLI::App* cmd, AnalysisOptions& opt) {
  cmd->add_option("--window", opt.window,
                  "hybrid heads: each query attends its last W keys with softmax weights and older keys through the "
                  "feature map, one normalizer, balance 1/2 (0 = the feature map alone)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
}

void check_analysis_options(const AnalysisOptions& opt) {
  if (!opt.feature_map.empty() && opt.features == 0 && !feature_map_has_fixed_size(opt.feature_map))
    throw CLI::ValidationError("--features", "feature map " + opt.feature_map + " needs a feature dimension: give --features M (e.g. 64)");
  if (opt.window > 0 && opt.feature_map.empty())
    throw CLI::ValidationError("--window", "a hybrid head mixes softmax with a feature map's linear attention: give --feature-map too");
}

void AnalysisArgs::check() const { check_analysis_options(opt); }

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

ProgressFn terminal_progress(const std::string& label) {
  if (!isatty(STDERR_FILENO)) return nullptr;
  struct State {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    bool shown = false;
  };
  auto st = std::make_shared<State>();
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
