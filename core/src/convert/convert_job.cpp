// A finished distillation run as ConvertOptions (convert_job.h).
#include "attnscope/convert/convert_job.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/analysis/dof.h"
#include "attnscope/base/error.h"
#include "attnscope/model/model_config.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

nlohmann::json read_json(const std::string& file) {
  std::ifstream in(file);
  if (!in) fail(file, "cannot be read");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail(file, std::string("is not valid JSON: ") + e.what());
  }
}

// job.json of a finished run.
nlohmann::json finished_job(const std::string& run) {
  const fs::path dir(run);
  const std::string job_file = (dir / "job.json").string();
  if (!fs::is_regular_file(job_file)) fail(run, "is not a run directory (no job.json)");
  if (!fs::is_regular_file(dir / "report.json"))
    fail(run, "has not finished (no report.json): let it finish, or continue it with --resume");
  return read_json(job_file);
}

}  // namespace

std::string distill_run_model(const std::string& run) {
  const nlohmann::json j = finished_job(run);
  if (!j.contains("model") || !j["model"].is_string()) fail(run + "/job.json", "names no model (give --model)");
  return j["model"];
}

ConvertOptions distill_run_convert_options(const std::string& run, const ModelConfig& c) {
  const fs::path dir(run);
  const std::string job_file = (dir / "job.json").string();
  const nlohmann::json j = finished_job(run);
  ConvertOptions o;
  if (!j.contains("feature_map") || !j["feature_map"].is_object() || !j["feature_map"].contains("name"))
    fail(job_file, "has no feature_map {name, ...}");
  const auto& fm = j["feature_map"];
  o.map.name = fm["name"];
  if (fm.contains("activation") && fm["activation"].is_string()) o.map.activation = fm["activation"];
  if (fm.contains("tied") && fm["tied"].is_boolean()) o.map.tied = fm["tied"];
  if (fm.contains("init") && fm["init"].is_string()) o.map.init = fm["init"];
  if (fm.contains("seed") && fm["seed"].is_number_unsigned()) o.map.seed = fm["seed"];
  if (!j.contains("dims") || !j["dims"].is_array() || int(j["dims"].size()) != c.n_layer)
    fail(job_file, "dims must list the model's " + std::to_string(c.n_layer) + " layers");
  for (const auto& d : j["dims"]) {
    if (d.is_number_integer()) o.dims.emplace_back(c.n_head, d.get<int64_t>());
    else if (d.is_array() && int(d.size()) == c.n_head) o.dims.push_back(d.get<std::vector<int64_t>>());
    else fail(job_file, "dims of layer " + std::to_string(o.dims.size()) + " are neither M nor one per head");
  }
  o.budget = j.value("features", int64_t(0));
  o.strategy = "fix";
  const std::string alloc = j.contains("allocation") && j["allocation"].is_string() ? j["allocation"].get<std::string>() : "";
  // A run whose dims came from --strategy (the workbench's DoF view) records them in job.json.
  const std::string strategy = j.contains("strategy") && j["strategy"].is_string() ? j["strategy"].get<std::string>() : "";
  if (!strategy.empty()) {
    o.strategy = strategy;
    o.budget = j.value("budget", int64_t(0));
    if (j.contains("lambda") && j["lambda"].is_string()) o.lambda = parse_lambda(j["lambda"].get<std::string>());
  }
  if (!alloc.empty() && fs::is_regular_file(alloc)) {
    const nlohmann::json aj = read_json(alloc);
    if (aj.contains("strategy") && aj["strategy"].is_string()) o.strategy = aj["strategy"];
    if (aj.contains("lambda") && aj["lambda"].is_number()) o.lambda = aj["lambda"];
    if (aj.contains("budget") && aj["budget"].is_number_integer()) o.budget = aj["budget"];
  }
  if (j.contains("loss") && j["loss"].is_string()) o.loss = j["loss"];
  if (j.contains("steps") && j["steps"].is_number_integer()) o.steps = j["steps"];
  o.job_json = j.dump();
  o.maps = read_feature_maps((dir / "feature_maps.safetensors").string(), o.map, o.dims, c);
  return o;
}

}  // namespace attnscope
