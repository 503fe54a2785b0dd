#include "test_support.h"

#include "attnscope/io/safetensors.h"

#include <ATen/ATen.h>

#include <cmath>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <algorithm>
#include <vector>

#include "attnscope/base/file_tree.h"
#include "attnscope/base/runtime.h"

namespace fs = std::filesystem;

namespace attnscope::test {

// Every test process runs with the runtime settings the CLI uses.
static const bool kRuntimeConfigured = (configure_runtime(), true);

std::string source_dir() { return ATTNSCOPE_SOURCE_DIR; }
std::string shared_models() { return ATTNSCOPE_SHARED_MODELS; }
std::string cli_path() { return ATTNSCOPE_CLI; }

namespace {
struct TempDirs {
  std::vector<fs::path> dirs;
  ~TempDirs() {
    std::error_code ec;
    for (const auto& d : dirs) remove_tree(d.string(), ec);
  }
};
TempDirs& temp_dirs() {
  static TempDirs t;
  return t;
}
}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string temp_dir(const std::string& tag) {
  std::random_device rd;
  fs::path p = fs::temp_directory_path() /
               ("attnscope_test_" + tag + "_" + std::to_string(rd()) + std::to_string(rd()));
  fs::create_directories(p);
  temp_dirs().dirs.push_back(p);
  return p.string();
}

std::string shared_model_file(const std::string& relative) {
  fs::path p = fs::path(shared_models()) / relative;
  return fs::exists(p) ? p.string() : std::string();
}

int run_command(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  int status = pclose(pipe);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string python_with_torch() {
  static const std::string python = [] {
    std::string o;
    for (const char* p : {"/usr/bin/python3", "python3"})
      if (run_command(std::string(p) + " -c 'import torch'", &o) == 0) return std::string(p);
    return std::string();
  }();
  return python;
}

std::vector<TextDocument> sample_documents() {
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(source_dir() + "/resources/texts")) paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  return read_text_documents(paths);
}

std::vector<double> to_doubles(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU).to(at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

double rel_diff(const std::vector<double>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size() || ref.empty()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return diff / std::max(scale, 1e-30);
}

at::Tensor seeded_randn(std::vector<int64_t> shape, uint64_t seed, double scale) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * scale;
}

std::map<std::string, at::Tensor> read_tensors(const std::string& file) {
  SafetensorsFile f(file);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : f.entries()) out[e.name] = f.tensor(e.name).clone();
  return out;
}

}  // namespace attnscope::test
