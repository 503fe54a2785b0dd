#include "attnscope/workbench/run_results.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"
#include "attnscope/base/text_file.h"
#include "attnscope/convert/converted_eval_json.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace attnscope {

namespace {

std::string evaluation_file(const std::string& run_dir) { return (fs::path(run_dir) / "evaluation.json").string(); }

// Typed reads of evaluation.json: Error naming the file and the key for anything of the wrong type.
struct EvalReader {
  std::string file;

  const json& at(const json& obj, const char* key, const std::string& path) const {
    if (!obj.is_object() || !obj.contains(key)) fail(file, "has no \"" + path + "\"");
    return obj[key];
  }
  double number(const json& obj, const char* key, const std::string& path) const {
    const json& v = at(obj, key, path);
    if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();  // written for a non-finite value
    if (!v.is_number()) fail(file, "\"" + path + "\" is not a number");
    return v.get<double>();
  }
  int64_t integer(const json& obj, const char* key, const std::string& path) const {
    const json& v = at(obj, key, path);
    if (!v.is_number_integer()) fail(file, "\"" + path + "\" is not a whole number");
    return v.get<int64_t>();
  }
  const json& array(const json& obj, const char* key, const std::string& path) const {
    const json& v = at(obj, key, path);
    if (!v.is_array()) fail(file, "\"" + path + "\" is not an array");
    return v;
  }
};

}  // namespace

void write_run_evaluation(const std::string& run_dir, const RunEvaluation& e) {
  const json j = {{"command", e.command}, {"evaluation", converted_eval_to_json(e.evaluation)}};
  write_text_file(evaluation_file(run_dir), j.dump(2) + "\n");
}

std::optional<RunEvaluation> read_run_evaluation(const std::string& run_dir) {
  const std::string file = evaluation_file(run_dir);
  std::error_code ec;
  if (!fs::exists(file, ec) || !fs::is_directory(fs::path(run_dir) / "converted", ec)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot be read");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& ex) {
    fail(file, std::string("is not JSON: ") + ex.what());
  }
  const EvalReader r{file};
  RunEvaluation out;
  const json& cmd = r.at(j, "command", "command");
  if (!cmd.is_string()) fail(file, "\"command\" is not a string");
  out.command = cmd.get<std::string>();
  const json& e = r.at(j, "evaluation", "evaluation");
  ConvertedEvaluation& v = out.evaluation;
  v.tokens = r.integer(e, "tokens", "evaluation.tokens");
  v.seq_len = int(r.integer(e, "seq_len", "evaluation.seq_len"));
  if (e.contains("trained_length")) v.trained_length = r.integer(e, "trained_length", "evaluation.trained_length");
  v.closeness_windows = int(r.integer(e, "closeness_windows", "evaluation.closeness_windows"));
  v.original_loss = r.number(r.at(e, "original", "evaluation.original"), "loss", "evaluation.original.loss");
  v.converted_loss = r.number(r.at(e, "converted", "evaluation.converted"), "loss", "evaluation.converted.loss");
  for (const json& l : r.array(e, "layers", "evaluation.layers")) {
    LayerCloseness c;
    c.layer = int(r.integer(l, "layer", "evaluation.layers[].layer"));
    c.attention_kl = r.number(l, "attention_kl", "evaluation.layers[].attention_kl");
    c.output_rel_error = r.number(l, "output_rel_error", "evaluation.layers[].output_rel_error");
    v.layers.push_back(c);
  }
  for (const json& s : r.array(e, "speed", "evaluation.speed")) {
    SpeedEntry x;
    x.seq_len = int(r.integer(s, "seq_len", "evaluation.speed[].seq_len"));
    const json& mode = r.at(s, "mode", "evaluation.speed[].mode");
    if (mode != "batch" && mode != "generate") fail(file, "\"evaluation.speed[].mode\" is not batch or generate");
    x.generate = mode == "generate";
    x.softmax_tokens_per_s = r.number(s, "softmax_tokens_per_s", "evaluation.speed[].softmax_tokens_per_s");
    x.linear_tokens_per_s = r.number(s, "linear_tokens_per_s", "evaluation.speed[].linear_tokens_per_s");
    x.softmax_peak_bytes = r.integer(s, "softmax_peak_bytes", "evaluation.speed[].softmax_peak_bytes");
    x.linear_peak_bytes = r.integer(s, "linear_peak_bytes", "evaluation.speed[].linear_peak_bytes");
    v.speed.push_back(x);
  }
  if (e.contains("positions"))
    for (const json& p : r.array(e, "positions", "evaluation.positions")) {
      PositionBucket b;
      b.first = int(r.integer(p, "first", "evaluation.positions[].first"));
      b.last = int(r.integer(p, "last", "evaluation.positions[].last"));
      b.tokens = r.integer(p, "tokens", "evaluation.positions[].tokens");
      b.original_loss = r.number(p, "original_loss", "evaluation.positions[].original_loss");
      b.converted_loss = r.number(p, "converted_loss", "evaluation.positions[].converted_loss");
      b.attention_kl = r.number(p, "attention_kl", "evaluation.positions[].attention_kl");
      v.positions.push_back(b);
    }
  return out;
}

double final_validation_kl(const RunMetrics& metrics) {
  std::map<int, double> last;
  for (const ValidationPoint& v : metrics.validation) last[v.layer] = v.val_kl;
  if (last.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (const auto& [layer, kl] : last) sum += kl;
  return sum / double(last.size());
}

}  // namespace attnscope
