// `attnscope convert`: a model with feature maps in place of softmax attention, written as a
// converted model directory (SPEC 7) that attnscope and plain PyTorch load. The maps are a
// finished distillation job's (--job RUN) or untrained ones (--feature-map with --features or
// --allocation: the Performer-style baselines).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "attnscope/allocation/allocation_file.h"
#include "attnscope/convert/convert_job.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/base/error.h"
#include "common.h"

namespace fs = std::filesystem;

namespace attnscope::cli {

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
  auto* w = cmd->add_option("--window", o->window, "untrained hybrid heads: softmax over the last W keys beside the map, "
                                                  "balance 1/2 (0: plain linear attention)")
                ->check(CLI::NonNegativeNumber);
  j->excludes(w);
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
      const AllocationFile a = read_allocation_file(*allocation, c.n_layer, c.n_head);
      opt.dims = a.dims;
      if (a.strategy) opt.strategy = alloc_strategy_name(*a.strategy);
      opt.lambda = a.lambda;
      opt.budget = a.budget;
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
