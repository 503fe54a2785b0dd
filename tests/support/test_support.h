// Paths and small helpers shared by the test suites.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "attnscope/base/error.h"
#include "attnscope/io/text_source.h"

namespace attnscope::test {

std::string source_dir();    // the repository root
std::string shared_models();  // ../shared/models beside the repository
std::string cli_path();       // the built `attnscope` executable
// A fresh empty directory under the system temp dir, removed at process exit.
std::string temp_dir(const std::string& tag);
// Path to a shared model file, or "" (and a GTEST_SKIP message is the caller's job) when missing.
std::string shared_model_file(const std::string& relative);

// The bundled sample texts (resources/texts/*.txt), in file-name order: what the capture tests read.
std::vector<TextDocument> sample_documents();

// A tensor's values as float64, row-major (any device, any floating dtype).
std::vector<double> to_doubles(const at::Tensor& t);
// max |got - ref| / max |ref|; infinite when the sizes differ so the check fails loudly.
double rel_diff(const std::vector<double>& got, const std::vector<double>& ref);

// Standard normal draws in float64 from a generator of their own seeded with `seed`, times `scale`.
at::Tensor seeded_randn(std::vector<int64_t> shape, uint64_t seed, double scale = 1.0);

// Every tensor of a .safetensors file by name (copies, in their stored dtype).
std::map<std::string, at::Tensor> read_tensors(const std::string& file);

// The whole file as bytes ("" when it cannot be read).
std::string read_file(const std::string& path);

// The message of the attnscope::Error that `call` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Runs a command through the shell; returns its exit code and captures stdout+stderr.
int run_command(const std::string& cmd, std::string* output);

// A python3 that imports torch (/usr/bin/python3 first), or "" when there is none (the caller skips
// with GTEST_SKIP). Looked up once.
std::string python_with_torch();

// attnscope_linear.py run on converted model `dir` against attnscope's logits of `ids` (`attnscope
// logits`): the largest absolute difference of the runner's batch logits, and of its recurrent
// logits (the first `prefix` tokens in one call, then one token per call), from attnscope's; with
// `variant` (Python statements that change the loaded model `m`), also how far the changed model's
// batch logits are from attnscope's (a check that the comparison has power; 0 without). nullopt
// when no Python with torch is installed. A failing command fails the calling test (output in `output`).
struct RunnerDiffs {
  double batch = 1, recurrent = 1, variant = 0;
  std::string output;
};
std::optional<RunnerDiffs> python_runner_diffs(const std::string& dir, const std::vector<int64_t>& ids, int prefix = 0,
                                               const std::string& variant = "");

}  // namespace attnscope::test
