#include "test_support.h"

#include <gtest/gtest.h>

#include <sstream>

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

std::optional<RunnerDiffs> python_runner_diffs(const std::string& dir, const std::vector<int64_t>& ids, int prefix,
                                               const std::string& variant) {
  const std::string python = python_with_torch();
  if (python.empty()) return std::nullopt;
  RunnerDiffs r;
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
  if (run_command(cli_path() + " logits --model " + dir + " --ids " + list + " --out " + dir + "/ref.safetensors", &r.output) != 0) {
    ADD_FAILURE() << r.output;
    return r;
  }
  std::string py = "import sys, torch; sys.path.insert(0, '" + dir + "'); import attnscope_linear as a\n"
                   "m = a.load('" + dir + "')\n"
                   "ref = a.read_safetensors('" + dir + "/ref.safetensors')\n"
                   "ids = ref['ids'].view(1, -1)\n"
                   "got = m(ids)[0]\n"
                   "cache = m.new_cache()\n"
                   "p = " + std::to_string(prefix) + "\n"
                   "rec = torch.cat(([m(ids[:, :p], cache, 0)] if p else []) + [m(ids[:, t:t + 1], cache, t) for t in range(p, ids.shape[1])], 1)[0]\n"
                   "var = 0.0\n";
  if (!variant.empty()) py += variant + "\nvar = float((m(ids)[0] - ref['logits']).abs().max())\n";
  py += "print('maxdiff', float((got - ref['logits']).abs().max()), float((rec - got).abs().max()), var)\n";
  const std::string script = dir + "/runner_check.py";
  std::ofstream(script) << py;
  if (run_command(python + " " + script, &r.output) != 0 || r.output.find("maxdiff") == std::string::npos) {
    ADD_FAILURE() << r.output;
    return r;
  }
  std::istringstream in(r.output.substr(r.output.find("maxdiff")));
  std::string word;
  in >> word >> r.batch >> r.recurrent >> r.variant;
  return r;
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
