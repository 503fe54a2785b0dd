// Hostile converted models (SPEC 7, issue 19): each one broken in one way is refused by
// OUT/attnscope_linear.py (exit 1, one stderr line "FILE: problem", no traceback) and by attnscope's
// own load_model in the same words; a converted model whose referenced weights changed since the
// conversion is refused by both (and by `attnscope info`), while a good one, or one whose
// referenced weights were only touched, still runs.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "attnscope/convert/converted_model.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/model/model.h"
#include "hf_checkpoint_writer.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace attnscope;

namespace {

std::string bundled_tokenizer() { return test::source_dir() + "/resources/models/brown-gpt2-mini/tokenizer.json"; }

// A small GPT-2 (2 layers x 2 heads, head dim 16, the bundled tokenizer's 4096 tokens) in Hugging
// Face layout, in a fresh directory.
std::string write_source(const std::string& tag) {
  test::RefConfig rc;
  rc.arch = test::RefArch::GPT2;
  rc.n_layer = 2;
  rc.n_head = 2;
  rc.d_model = 32;
  rc.d_ff = 64;
  rc.vocab = 4096;
  rc.n_ctx = 32;
  const std::string src = test::temp_dir("runner_" + tag) + "/src";
  fs::create_directories(src);
  test::write_hf_checkpoint(src, rc, test::random_weights(rc, 17));
  fs::copy_file(bundled_tokenizer(), src + "/tokenizer.json");
  return src;
}

// `src` converted with prf, 8 features per head, weights copied or referenced.
std::string convert_source(const std::string& src, bool copy_weights, const std::string& out) {
  ConvertOptions o;
  o.map.name = "prf";
  o.map.seed = 5;
  o.dims = {{8, 8}, {8, 8}};
  o.budget = 8;
  o.copy_weights = copy_weights;
  o.python_module = test::source_dir() + "/resources/python/attnscope_linear.py";
  convert_model(load_model(src), o, out);
  return out;
}

// One good converted model (weights copied) made once; each case works on a copy of it.
const std::string& good_model() {
  static const std::string out = [] {
    const std::string src = write_source("good");
    return convert_source(src, true, src + "/../out");
  }();
  return out;
}

std::string copy_of_good(const std::string& tag) {
  const std::string dir = test::temp_dir("runner_case_" + tag) + "/out";
  fs::copy(good_model(), dir, fs::copy_options::recursive);
  return dir;
}

struct PythonRun {
  int exit_code = -1;
  std::string out, err;
};

// `python3 DIR/attnscope_linear.py DIR ARGS`, stdout and stderr apart.
PythonRun run_runner(const std::string& dir, const std::string& args = "--ids 1,2,3 --new-tokens 4") {
  PythonRun r;
  const std::string err = dir + "/../runner_stderr.txt";
  r.exit_code = test::run_command("(" + test::python_with_torch() + " '" + dir + "/attnscope_linear.py' '" + dir + "' " + args +
                                      " 2>'" + err + "')",
                                  &r.out);
  r.err = test::read_file(err);
  return r;
}

// Both readers refuse `dir`: attnscope_linear.py exits 1 with one stderr line that starts with
// `file` and holds `problem` (no traceback), and load_model throws an Error that does the same.
void expect_both_refuse(const std::string& dir, const std::string& file, const std::string& problem) {
  const std::string err = test::error_of([&] { load_model(dir); });
  EXPECT_EQ(err.rfind(file, 0), 0u) << "attnscope: " << err;
  EXPECT_NE(err.find(problem), std::string::npos) << "attnscope: " << err;
  if (test::python_with_torch().empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  const PythonRun py = run_runner(dir);
  EXPECT_EQ(py.exit_code, 1) << py.out << py.err;
  EXPECT_EQ(py.out, "");
  EXPECT_EQ(py.err.find("Traceback"), std::string::npos) << py.err;
  EXPECT_EQ(py.err.rfind(file, 0), 0u) << "attnscope_linear.py: " << py.err;
  EXPECT_NE(py.err.find(problem), std::string::npos) << "attnscope_linear.py: " << py.err;
  EXPECT_EQ(std::count(py.err.begin(), py.err.end(), '\n'), 1) << py.err;
}

// feature_maps.safetensors of `dir` rewritten by `edit` (name -> tensor, in the file's order).
void edit_maps(const std::string& dir, const std::function<void(NamedTensors&)>& edit) {
  const std::string file = dir + "/feature_maps.safetensors";
  NamedTensors t;
  {
    SafetensorsFile st(file);
    for (const auto& e : st.entries()) t.emplace_back(e.name, st.tensor(e.name).clone());
  }
  edit(t);
  write_safetensors(file, t);
}

at::Tensor& tensor_named(NamedTensors& t, const std::string& name) {
  for (auto& [n, v] : t)
    if (n == name) return v;
  throw std::runtime_error("no tensor " + name);
}

// config.json's "attnscope" object of `dir` rewritten by `edit`.
void edit_attnscope(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto cfg = nlohmann::json::parse(test::read_file(dir + "/config.json"));
  edit(cfg["attnscope"]);
  std::ofstream(dir + "/config.json", std::ios::trunc) << cfg.dump(2);
}

// One byte of the first tensor's data flipped: same size, valid safetensors, different weights.
void nudge_weights(const std::string& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  f.seekg(std::streamoff(8 + n));
  char b = 0;
  f.read(&b, 1);
  b ^= 1;
  f.seekp(std::streamoff(8 + n));
  f.write(&b, 1);
}

// The file's modification time in ns since the Unix epoch, as stat(2) (and Python's os.stat) give it.
int64_t mtime_ns(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + file);
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

struct Case {
  std::string name;
  std::string file;     // relative to OUT
  std::string problem;  // in both messages
  std::function<void(const std::string& dir)> corrupt;
};

}  // namespace

// Each case breaks one thing attnscope refuses; attnscope_linear.py used to run it or die in a
// traceback (KeyError, IndexError, shape mismatch, JSONDecodeError).
TEST(RunnerHostile, BrokenModelsAreRefusedByBothReaders) {
  const std::string FM = "feature_maps.safetensors", CFG = "config.json";
  const std::vector<Case> cases = {
      {"nan_in_map", FM, " (layer 1 head 0): tensor 'w' holds NaN or inf",
       [](const std::string& d) {
         edit_maps(d, [](NamedTensors& t) { tensor_named(t, "layers.1.heads.0.feature_map.w")[2][3].fill_(NAN); });
       }},
      {"int64_map", FM, " (layer 0 head 1): tensor 'w' is not float32",
       [](const std::string& d) {
         edit_maps(d, [](NamedTensors& t) {
           auto& w = tensor_named(t, "layers.0.heads.1.feature_map.w");
           w = w.to(at::kLong);
         });
       }},
      {"extra_tensor_in_head", FM, " (layer 0 head 0): unexpected tensor 'alpha' for feature map prf (it has: w)",
       [](const std::string& d) {
         edit_maps(d, [](NamedTensors& t) { t.emplace_back("layers.0.heads.0.feature_map.alpha", at::zeros({8})); });
       }},
      {"extra_tensor_outside", FM, ": holds 1 tensors outside layers.{0..1}.heads.{0..1}.feature_map.*",
       [](const std::string& d) {
         edit_maps(d, [](NamedTensors& t) { t.emplace_back("layers.2.heads.0.feature_map.w", at::zeros({8, 16})); });
       }},
      {"missing_tensor", FM, " (layer 1 head 1): missing tensor 'w' of feature map prf",
       [](const std::string& d) {
         edit_maps(d, [](NamedTensors& t) {
           t.erase(std::remove_if(t.begin(), t.end(), [](const auto& e) { return e.first == "layers.1.heads.1.feature_map.w"; }),
                   t.end());
         });
       }},
      {"wrong_shape", FM, " (layer 0 head 1): tensor 'w' has shape [4, 16], feature map prf needs [8, 16]",
       [](const std::string& d) {
         edit_maps(d, [](NamedTensors& t) { tensor_named(t, "layers.0.heads.1.feature_map.w") = at::randn({4, 16}); });
       }},
      {"dims_negative", CFG, ": attnscope.dims: layer 0 has feature dimension -16, outside 1..16384",
       [](const std::string& d) { edit_attnscope(d, [](nlohmann::json& a) { a["dims"] = {-16, 8}; }); }},
      {"dims_zero", CFG, ": attnscope.dims: layer 1 has feature dimension 0, outside 1..16384",
       [](const std::string& d) { edit_attnscope(d, [](nlohmann::json& a) { a["dims"] = {8, {8, 0}}; }); }},
      {"dims_layer_count", CFG, ": attnscope.dims: has dims for 3 layers, the model has 2",
       [](const std::string& d) { edit_attnscope(d, [](nlohmann::json& a) { a["dims"] = {8, 8, 8}; }); }},
      {"dims_head_count", CFG, ": attnscope.dims: layer 0 lists 3 per-head dimensions, the model has 2 heads",
       [](const std::string& d) { edit_attnscope(d, [](nlohmann::json& a) { a["dims"] = {{8, 8, 8}, 8}; }); }},
      {"dims_not_integers", CFG, ": attnscope.dims: layer 1 has a feature dimension that is not a whole number: 8.5",
       [](const std::string& d) { edit_attnscope(d, [](nlohmann::json& a) { a["dims"] = {8, {8, 8.5}}; }); }},
      {"dims_against_tensors", FM, " (layer 0 head 0): tensor 'w' has shape [8, 16], feature map prf needs [16, 16]",
       [](const std::string& d) { edit_attnscope(d, [](nlohmann::json& a) { a["dims"] = {16, 8}; }); }},
      {"dims_against_fixed_map", FM, ": layer 0 head 0 has 16 features, the dims say 8",
       [](const std::string& d) {
         edit_attnscope(d, [](nlohmann::json& a) { a["feature_map"]["name"] = "elu"; });
         edit_maps(d, [](NamedTensors& t) { t.clear(); });
       }},
      {"format_version", CFG, ": attnscope: format_version must be 1 (this attnscope reads version 1)",
       [](const std::string& d) { edit_attnscope(d, [](nlohmann::json& a) { a["format_version"] = 2; }); }},
      {"unknown_feature_map", CFG, ": attnscope.feature_map.name: 'softermax' is not a feature map attnscope knows",
       [](const std::string& d) { edit_attnscope(d, [](nlohmann::json& a) { a["feature_map"]["name"] = "softermax"; }); }},
      {"odd_pairs", FM, " (layer 0 head 0): feature map prf-hyperbolic: features (M) must be even (pairs of features), got 7",
       [](const std::string& d) {
         edit_attnscope(d, [](nlohmann::json& a) {
           a["feature_map"]["name"] = "prf-hyperbolic";
           a["dims"] = {7, 8};
         });
       }},
      {"truncated_config", CFG, ": not valid JSON",
       [](const std::string& d) {
         const std::string text = test::read_file(d + "/config.json");
         std::ofstream(d + "/config.json", std::ios::trunc) << text.substr(0, text.size() / 2);
       }},
      {"missing_feature_maps", FM, ": is missing: it should hold every head's feature map",
       [](const std::string& d) { fs::remove(d + "/feature_maps.safetensors"); }},
      {"truncated_feature_maps", FM, "truncated?",
       [](const std::string& d) { fs::resize_file(d + "/feature_maps.safetensors", fs::file_size(d + "/feature_maps.safetensors") - 100); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = copy_of_good(c.name);
    c.corrupt(dir);
    expect_both_refuse(dir, dir + "/" + c.file, c.problem);
  }
}

TEST(RunnerHostile, GoodModelStillRuns) {
  if (test::python_with_torch().empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  const PythonRun py = run_runner(good_model(), "--ids 5,17,300 --new-tokens 6");
  ASSERT_EQ(py.exit_code, 0) << py.err;
  EXPECT_EQ(py.err, "");
  const auto gen = load_model(good_model()).model->generate_greedy({5, 17, 300}, 6);
  std::string expected;
  for (size_t i = 3; i < gen.size(); ++i) expected += (i > 3 ? " " : "") + std::to_string(gen[i]);
  EXPECT_EQ(py.out, expected + "\n");
}

// Bad command lines are usage errors (exit 2, argparse's message), not tracebacks.
TEST(RunnerHostile, BadArgumentsAreUsageErrors) {
  if (test::python_with_torch().empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  for (const auto& [args, problem] : std::vector<std::pair<std::string, std::string>>{
           {"--ids 1,x,3", "'x' is not a token id"},
           {"--ids 1,4096", "token id 4096 is outside the vocabulary (0..4095)"},
           {"--ids 1 --new-tokens -2", "must be >= 0"}}) {
    SCOPED_TRACE(args);
    const PythonRun py = run_runner(good_model(), args);
    EXPECT_EQ(py.exit_code, 2) << py.err;
    EXPECT_EQ(py.err.find("Traceback"), std::string::npos) << py.err;
    EXPECT_NE(py.err.find(problem), std::string::npos) << py.err;
  }
}

// --weights reference: config.json records the sha256 and each file's size and mtime; weights that
// changed since the conversion are refused by load_model, `attnscope info` and attnscope_linear.py,
// naming config.json and the changed file.
TEST(RunnerHostile, ChangedReferencedWeightsAreRefused) {
  const std::string src = write_source("ref_changed");
  const std::string out = convert_source(src, false, src + "/../out");
  ASSERT_FALSE(fs::exists(out + "/model.safetensors"));
  const auto source = nlohmann::json::parse(test::read_file(out + "/config.json")).at("attnscope").at("source");
  std::string sum;
  ASSERT_EQ(test::run_command("sha256sum '" + src + "/model.safetensors'", &sum), 0) << sum;
  EXPECT_EQ(source.at("sha256"), sum.substr(0, 64));
  ASSERT_EQ(source.at("files").size(), 1u);
  EXPECT_EQ(source.at("files")[0].at("name"), "model.safetensors");
  EXPECT_EQ(source.at("files")[0].at("size").get<uint64_t>(), fs::file_size(src + "/model.safetensors"));
  EXPECT_EQ(source.at("files")[0].at("mtime_ns").get<int64_t>(), mtime_ns(src + "/model.safetensors"));

  nudge_weights(src + "/model.safetensors");
  const std::string weights = fs::path(src).lexically_normal().string() + "/model.safetensors";
  expect_both_refuse(out, out + "/config.json", "refers to the original weights " + weights + ", which changed since the conversion");
  std::string o;
  EXPECT_EQ(test::run_command(test::cli_path() + " info --model " + out, &o), 1) << o;
  EXPECT_NE(o.find(out + "/config.json: refers to the original weights " + weights + ", which changed"), std::string::npos) << o;
  EXPECT_EQ(o.find("validated"), std::string::npos) << o;
}

// Touched (new mtime, same bytes): the record no longer matches, so the weights are hashed again,
// and both readers accept them.
TEST(RunnerHostile, TouchedReferencedWeightsStillLoad) {
  const std::string src = write_source("ref_touched");
  const std::string out = convert_source(src, false, src + "/../out");
  const at::Tensor ids = at::arange(10, at::kLong).view({1, -1});
  const at::Tensor before = load_model(out).model->forward(ids);
  const std::string w = src + "/model.safetensors";
  const auto recorded = nlohmann::json::parse(test::read_file(out + "/config.json")).at("attnscope").at("source").at("files");
  EXPECT_EQ(recorded.at(0).at("mtime_ns").get<int64_t>(), mtime_ns(w));
  fs::last_write_time(w, fs::last_write_time(w) + std::chrono::seconds(7));
  EXPECT_EQ(mtime_ns(w) - recorded.at(0).at("mtime_ns").get<int64_t>(), 7000000000);
  LoadedModel m = load_model(out);
  EXPECT_TRUE(at::equal(m.model->forward(ids), before));
  if (test::python_with_torch().empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  const PythonRun py = run_runner(out);
  EXPECT_EQ(py.exit_code, 0) << py.err;
  EXPECT_EQ(py.err, "");
}

// The cheap path: files with the recorded size and mtime are not hashed (a repeat load costs a stat
// per file). Shown by a change the hash would catch, made with the mtime put back: accepted; once
// the mtime moves, the hash runs and the same change is refused.
TEST(RunnerHostile, RecordedSizeAndMtimeSkipTheHash) {
  const std::string src = write_source("ref_cheap");
  const std::string out = convert_source(src, false, src + "/../out");
  const std::string w = src + "/model.safetensors";
  const auto mtime = fs::last_write_time(w);
  nudge_weights(w);
  fs::last_write_time(w, mtime);
  EXPECT_EQ(test::error_of([&] { load_model(out); }), "");
  if (!test::python_with_torch().empty()) {
    EXPECT_EQ(run_runner(out).exit_code, 0);
  }
  fs::last_write_time(w, mtime + std::chrono::seconds(1));
  expect_both_refuse(out, out + "/config.json", "which changed since the conversion");
}

// A model converted before size and mtime were recorded is hashed on every load: unchanged weights
// load, changed ones are refused.
TEST(RunnerHostile, OlderRecordWithoutFilesIsAlwaysHashed) {
  const std::string src = write_source("ref_old");
  const std::string out = convert_source(src, false, src + "/../out");
  edit_attnscope(out, [](nlohmann::json& a) { a["source"].erase("files"); });
  EXPECT_EQ(test::error_of([&] { load_model(out); }), "");
  const std::string w = src + "/model.safetensors";
  const auto mtime = fs::last_write_time(w);
  nudge_weights(w);
  fs::last_write_time(w, mtime);
  expect_both_refuse(out, out + "/config.json", "which changed since the conversion");
}

// Sharded original weights: the sha256 covers the index and every shard, and a changed shard is
// named.
TEST(RunnerHostile, ChangedShardIsRefused) {
  const std::string src = write_source("ref_sharded");
  NamedTensors first, second;
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  {
    SafetensorsFile st(src + "/model.safetensors");
    for (const auto& e : st.entries()) {
      const bool in_first = first.size() <= second.size();
      (in_first ? first : second).emplace_back(e.name, st.tensor(e.name).clone());
      index["weight_map"][e.name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
  }
  fs::remove(src + "/model.safetensors");
  write_safetensors(src + "/model-00001-of-00002.safetensors", first);
  write_safetensors(src + "/model-00002-of-00002.safetensors", second);
  std::ofstream(src + "/model.safetensors.index.json") << index.dump(2);
  const std::string out = convert_source(src, false, src + "/../out");
  const auto files = nlohmann::json::parse(test::read_file(out + "/config.json")).at("attnscope").at("source").at("files");
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].at("name"), "model.safetensors.index.json");
  EXPECT_EQ(files[2].at("name"), "model-00002-of-00002.safetensors");
  EXPECT_EQ(test::error_of([&] { load_model(out); }), "");

  nudge_weights(src + "/model-00002-of-00002.safetensors");
  const std::string shard = fs::path(src).lexically_normal().string() + "/model-00002-of-00002.safetensors";
  expect_both_refuse(out, out + "/config.json", "refers to the original weights " + shard + ", which changed since the conversion");
}
