// `attnscope convert`: a model with feature maps in place of softmax attention, written as a
// converted model directory (SPEC 7) that attnscope and plain PyTorch load. The maps are a
// finished distillation job's (--job RUN) or untrained ones (--feature-map with --features or
// --allocation: the Performer-style baselines; --decay: decayed heads where training starts them).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "attnscope/allocation/allocation_file.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/convert/convert_job.h"
#include "attnscope/convert/convert_options.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/distill/layer_maps.h"
#include "common.h"

namespace fs = std::filesystem;

namespace attnscope::cli {

void register_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "Write a converted model: linear attention with a feature map per head (SPEC 7)");
  auto c = std::make_shared<ConvertCommand>();
  auto output = std::make_shared<OutputOptions>();
  add_option_table(cmd, convert_command_option_table(), c);
  for (const char* flag : {"--feature-map", "--features", "--allocation", "--window", "--decay", "--decay-init", "--capture"})
    exclusive(cmd, {"--job", flag});
  exclusive(cmd, {"--features", "--allocation"});
  add_out_option(cmd, output, "output directory (written atomically)", true);
  cmd->callback([=] {
    const std::string* job = &c->job;
    const std::string* out = &output->out;
    const ConvertOptions* o = &c->convert;
    const bool copy_weights = c->weights == "copy";
    if (!job->empty()) {
      ModelOptions a = c->model;
      if (a.model.empty()) a.model = distill_run_model(*job);
      const LoadedModel m = load_model_of(a);
      ConvertOptions opt = distill_run_convert_options(*job, m.model->config());
      opt.copy_weights = copy_weights;
      opt.python_module = resources_dir() + "/python/attnscope_linear.py";
      convert_model(m, opt, *out);
      std::cout << "wrote " << fs::absolute(*out).lexically_normal().string() << " (" << opt.map.name
                << " linear attention trained by " << *job << ")\n";
      return;
    }
    if (o->map.name.empty())
      throw CLI::ValidationError(option_for_quantity(attnscope::opt::feature_map.quantity),
                                 "give --job RUN, or --feature-map NAME for untrained maps");
    const bool fixed = feature_map_has_fixed_size(o->map.name);
    const int64_t features = c->features;
    const std::string& allocation = c->allocation;
    if (!fixed && features == 0 && allocation.empty())
      throw CLI::ValidationError(option_for_quantity(attnscope::opt::features.quantity),
                                 "feature map " + o->map.name + " needs --features M or --allocation FILE");
    // The capture gives each head's decay (fit) and, for mixer, each head's kind.
    const bool fit = c->decay != Decay::None && (c->decay_init == DecayInit::Fit || c->decay == Decay::Mixer);
    if (fit && c->capture.empty())
      throw CLI::ValidationError(option_for_quantity(attnscope::opt::capture.quantity),
                                 c->decay == Decay::Mixer
                                     ? "--decay mixer reads each head's mixer distances from a capture of the model: give --capture DIR"
                                     : "--decay-init fit reads each head's decay from a capture of the model: give --capture DIR, "
                                       "or --decay-init none");
    if (!fit && !c->capture.empty())
      throw CLI::ValidationError(option_for_quantity(attnscope::opt::capture.quantity),
                                 "a capture is read only for --decay mixer, or --decay fixed|gated with --decay-init fit");
    LoadedModel m = load_model_of(c->model);
    const ModelConfig& cfg = m.model->config();
    std::unique_ptr<CaptureStore> cap;
    if (fit) {
      cap = std::make_unique<CaptureStore>(c->capture);
      check_capture_of(*cap, cfg, c->capture, m.path);
    }
    ConvertOptions opt = *o;
    opt.copy_weights = copy_weights;
    opt.python_module = resources_dir() + "/python/attnscope_linear.py";
    if (!allocation.empty()) {
      const AllocationFile a = read_allocation_file(allocation, cfg.n_layer, cfg.n_head);
      opt.dims = a.dims;
      opt.types = a.types;
      if (a.strategy) opt.strategy = alloc_strategy_name(*a.strategy);
      opt.lambda = a.lambda;
      opt.budget = a.budget;
    } else {
      const int64_t M = features > 0 ? features : 0;
      opt.dims.assign(cfg.n_layer, std::vector<int64_t>(cfg.n_head, M));
      opt.strategy = "fix";
      opt.budget = M;
    }
    if (c->decay != Decay::None) {  // the maps here, so the decays can be added to them (mixer: and the types)
      const auto decays = head_decays_for(c->decay, opt.window, opt.types, cap.get(), cfg.n_layer, cfg.n_head);
      auto maps = std::make_shared<HeadFeatureMaps>(
          make_head_feature_maps(opt.map, opt.dims, cfg.n_layer, cfg.n_head, cfg.head_dim, opt.window, opt.types));
      add_initial_decays(*maps, decays, c->decay_init, cap.get(), cfg.n_layer, cfg.n_head, cfg.d_model);
      opt.maps = maps;
    }
    convert_model(m, opt, *out);
    std::cout << "wrote " << fs::absolute(*out).lexically_normal().string() << " (" << o->map.name
              << (c->decay != Decay::None ? std::string(", ") + decay_name(c->decay) + " decay" : std::string())
              << " linear attention, " << cfg.n_layer << " layers x " << cfg.n_head << " heads)\n";
  });
}

}  // namespace attnscope::cli
