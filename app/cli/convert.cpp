// `attnscope convert`: a model with feature maps in place of softmax attention, written as a
// converted model directory (SPEC 7) that attnscope and plain PyTorch load. The maps are a
// finished distillation job's (--job RUN) or untrained ones (--feature-map with --features or
// --allocation: the Performer-style baselines).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "attnscope/convert/convert_job.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/base/error.h"
#include "common.h"

namespace fs = std::filesystem;

namespace attnscope::cli {

namespace {

// `attnscope allocate --json` output: dims per layer ([M_s]) or per head ([[M_sh]]), with strategy,
// lambda and budget.
void read_allocation(const std::string& file, int n_layer, int n_head, ConvertOptions& o) {
  std::ifstream in(file);
  if (!in) fail(file, "cannot be read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail(file, std::string("is not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("dims") || !j["dims"].is_array())
    fail(file, "has no \"dims\" array (expected the output of `attnscope allocate --json`)");
  if (int(j["dims"].size()) != n_layer)
    fail(file, "allocates " + std::to_string(j["dims"].size()) + " layers, the model has " + std::to_string(n_layer));
  o.dims.clear();
  for (const auto& d : j["dims"]) {
    std::vector<int64_t> row;
    if (d.is_number_integer()) row.assign(n_head, d.get<int64_t>());
    else if (d.is_array() && int(d.size()) == n_head)
      for (const auto& m : d) row.push_back(m.is_number_integer() ? m.get<int64_t>() : 0);
    else fail(file, "layer " + std::to_string(o.dims.size()) + " of dims is neither M nor " + std::to_string(n_head) + " values");
    for (int64_t m : row)
      if (m < 1) fail(file, "layer " + std::to_string(o.dims.size()) + " has a feature dimension < 1");
    o.dims.push_back(row);
  }
  if (j.contains("strategy") && j["strategy"].is_string()) o.strategy = j["strategy"];
  if (j.contains("lambda") && j["lambda"].is_number()) o.lambda = j["lambda"];
  if (j.contains("budget") && j["budget"].is_number_integer()) o.budget = j["budget"];
}

}  // namespace

void register_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "Write a converted model: linear attention with a feature map per head (SPEC 7)");
  auto args = std::make_shared<ModelArgs>();
  auto o = std::make_shared<ConvertOptions>();
  auto features = std::make_shared<int64_t>(0);
  auto allocation = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto weights = std::make_shared<std::string>("copy");
  auto untied = std::make_shared<bool>(false);
  auto job = std::make_shared<std::string>();
  args->add_to(cmd);
  auto* j = cmd->add_option("--job", *job, "a finished distillation run directory: convert with its trained maps");
  auto* fmo = cmd->add_option("--feature-map", o->map.name, "untrained map of every head (prf, elu, hedgehog, learned-prf, ...)")
      ->check(feature_map_validator());
  j->excludes(fmo);
  auto* f = cmd->add_option("-M,--features", *features, "feature dimension M of every head")->check(CLI::PositiveNumber);
  auto* a = cmd->add_option("--allocation", *allocation, "per-layer dimensions from `attnscope allocate --json`");
  f->excludes(a);
  j->excludes(f);
  j->excludes(a);
  cmd->add_option("--seed", o->map.seed, "seed of the maps' random draws (head (s, h) uses derive_seed(seed, s, h))")
      ->capture_default_str();
  cmd->add_option("--init", o->map.init, "initialization (family default when empty)");
  cmd->add_option("--activation", o->map.activation, "hedgehog: exp | softmax | softmax-joint")->capture_default_str();
  cmd->add_flag("--untied", *untied, "hedgehog, t2r: separate query and key maps");
  cmd->add_option("--temperature", o->map.temperature, "exp: t in exp(t x)")->capture_default_str();
  cmd->add_option("-o,--out", *out, "output directory (written atomically)")->required();
  cmd->add_option("--weights", *weights, "copy the original weights, or reference them by path")
      ->check(CLI::IsMember({"copy", "reference"}))
      ->capture_default_str();
  cmd->callback([=] {
    if (!job->empty()) {
      ModelArgs a = *args;
      if (!cmd->get_option("--model")->count()) a.model = distill_run_model(*job);
      const LoadedModel m = a.load();
      ConvertOptions opt = distill_run_convert_options(*job, m.model->config());
      opt.copy_weights = *weights == "copy";
      opt.python_module = resources_dir() + "/python/attnscope_linear.py";
      convert_model(m, opt, *out);
      std::cout << "wrote " << fs::absolute(*out).lexically_normal().string() << " (" << opt.map.name
                << " linear attention trained by " << *job << ")\n";
      return;
    }
    if (o->map.name.empty()) throw CLI::ValidationError("--feature-map", "give --job RUN, or --feature-map NAME for untrained maps");
    const bool fixed = feature_map_has_fixed_size(o->map.name);
    if (!fixed && *features == 0 && allocation->empty())
      throw CLI::ValidationError("--features", "feature map " + o->map.name + " needs --features M or --allocation FILE");
    LoadedModel m = args->load();
    const ModelConfig& c = m.model->config();
    ConvertOptions opt = *o;
    opt.map.tied = !*untied;
    opt.copy_weights = *weights == "copy";
    opt.python_module = resources_dir() + "/python/attnscope_linear.py";
    if (!allocation->empty()) {
      read_allocation(*allocation, c.n_layer, c.n_head, opt);
    } else {
      const int64_t M = *features > 0 ? *features : 0;
      opt.dims.assign(c.n_layer, std::vector<int64_t>(c.n_head, M));
      opt.strategy = "fix";
      opt.budget = M;
    }
    convert_model(m, opt, *out);
    std::cout << "wrote " << fs::absolute(*out).lexically_normal().string() << " (" << o->map.name
              << " linear attention, " << c.n_layer << " layers x " << c.n_head << " heads)\n";
  });
}

}  // namespace attnscope::cli
