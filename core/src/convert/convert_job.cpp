// A finished distillation run as ConvertOptions (convert_job.h).
#include "attnscope/convert/convert_job.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/allocation/allocation_file.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/base/error.h"
#include "attnscope/model/model_config.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

// job.json of a finished run.
DistillJob finished_job(const std::string& run) {
  const fs::path dir(run);
  if (!fs::is_regular_file(dir / "job.json")) fail(run, "is not a run directory (no job.json)");
  if (!fs::is_regular_file(dir / "report.json"))
    fail(run, "has not finished (no report.json): let it finish, or resume it");
  return read_distill_job(run);
}

}  // namespace

std::string distill_run_model(const std::string& run) {
  const DistillJob job = finished_job(run);
  if (job.model.empty()) throw Error(job.file + ": names no model", "model");
  return job.model;
}

ConvertOptions distill_run_convert_options(const std::string& run, const ModelConfig& c) {
  const fs::path dir(run);
  const DistillJob job = finished_job(run);
  const DistillOptions& d = job.options;
  ConvertOptions o;
  o.map.name = d.feature_map;
  o.map.activation = d.activation;
  o.map.tied = d.tied;
  o.map.init = d.init;
  o.map.seed = d.seed;
  o.dims = job.dims_for(c.n_layer, c.n_head);
  o.strategy = "fix";
  o.budget = d.features;
  if (d.strategy) {  // dims from Algorithm 1 on the capture (the workbench's DoF view, compare)
    o.strategy = alloc_strategy_name(*d.strategy);
    o.budget = d.budget;
    o.lambda = d.lambda;
  }
  if (!d.allocation.empty() && fs::is_regular_file(d.allocation)) {
    const AllocationFile a = read_allocation_file(d.allocation, c.n_layer, c.n_head);
    if (a.strategy) o.strategy = alloc_strategy_name(*a.strategy);
    if (a.lambda > 0) o.lambda = a.lambda;
    if (a.budget > 0) o.budget = a.budget;
  }
  o.loss = distill_loss_name(d.loss);
  o.steps = d.steps;
  o.trained_length = job.trained_length;
  std::ifstream in(job.file);
  o.job_json = nlohmann::json::parse(in).dump();  // read_distill_job has read it whole
  ConvertedHeader hdr;
  hdr.map = o.map;
  hdr.dims = o.dims;
  hdr.window = d.window;
  if (d.decay == Decay::Mixer) hdr.decays = job.decays;  // each head's, as the job resolved them
  else hdr.decay = d.decay;
  hdr.types = job.types;
  o.maps = read_feature_maps((dir / "feature_maps.safetensors").string(), hdr, c.n_layer, c.n_head, c.head_dim, c.d_model);
  return o;
}

}  // namespace attnscope
