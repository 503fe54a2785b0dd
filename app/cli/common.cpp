#include "common.h"

#include "attnscope/error.h"
#include "attnscope/feature_map.h"

#include <unistd.h>

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace attnscope::cli {

std::string resources_dir() {
  if (const char* r = std::getenv("ATTNSCOPE_RESOURCES"); r && *r) return r;
  return ATTNSCOPE_RESOURCES;
}

std::string default_model() { return resources_dir() + "/models/brown-gpt2-mini"; }

void ModelArgs::add_to(CLI::App* cmd) {
  model = default_model();
  cmd->add_option("-m,--model", model,
                  "Hugging Face model directory, cached model name (ORG/NAME), or llama2.c .bin")
      ->capture_default_str();
  cmd->add_option("--tokenizer", tokenizer,
                  "tokenizer file or directory (llama2.c: default a tokenizer.bin/tok*.bin beside the model)");
}

LoadedModel ModelArgs::load() const { return load_model(model, tokenizer); }

void check_feature_map(const std::string& name, int64_t features) {
  if (name.empty()) return;  // softmax only
  std::string all;
  bool known = false;
  for (const auto& n : feature_map_names()) {
    known |= n == name;
    all += (all.empty() ? "" : ", ") + n;
  }
  if (!known) fail("--feature-map", "unknown feature map \"" + name + "\"; choose one of " + all);
  // These have a size of their own (d, 2d, 1 + d + d^2); every other map needs M from the user.
  static const std::vector<std::string> fixed = {"elu", "relu", "exp", "taylor2", "cosformer"};
  if (features == 0 && std::find(fixed.begin(), fixed.end(), name) == fixed.end())
    fail("--features", "feature map " + name + " needs a feature dimension: give --features M (e.g. 64)");
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
