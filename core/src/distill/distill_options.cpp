// The options of a distillation job (distill_options.h): name tables, the option table, the
// command line, job.json, the checks and the feature dimensions.
#include "attnscope/distill/distill_options.h"

#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/formats/converted_json.h"

#include "attnscope/model/compute_dtype.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "attnscope/allocation/allocation_file.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/head.h"
#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "attnscope/base/names.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/formats/job_file.h"
#include "attnscope/capture/capture.h"

namespace fs = std::filesystem;

namespace attnscope {
namespace {

using json = nlohmann::ordered_json;

constexpr Named<DistillLoss> kLosses[] = {
    {DistillLoss::Kl, "kl"}, {DistillLoss::Softmax, "softmax"}, {DistillLoss::L2, "l2"},
    {DistillLoss::Output, "output"}, {DistillLoss::Block, "block"}, {DistillLoss::Direct, "direct"}};

using Row = Option<DistillOptions>;
using O = DistillOptions;

bool has_strategy(const O& o) { return o.strategy.has_value(); }
bool has_decay(const O& o) { return o.decay != Decay::None; }

// The table: every option of `attnscope distill` DistillOptions holds, in the order the command
// line is written; each is a definition of the catalogue (option_defs.h) bound to its field.
const OptionTable<O>& table() {
  static const OptionTable<O> rows = {
      described(bind(opt::capture, &O::capture), "capture directory (attnscope capture); direct: optional, its model"),
      bind(opt::val_capture, &O::val_capture),
      bind(opt::val_share, &O::val_share),
      // direct's model: job.json records the resolved model of every job as "model" (DistillJob::model).
      [] {
        Row r = described(bind(opt::model, &O::model), "direct: the model (default: the capture's)");
        r.key = "";
        return r;
      }(),
      compute_dtype_option<O>(),
      [] {
        Row r = described(bind(opt::texts, &O::text), "direct: the training text (.txt or .jsonl)");
        r.flags = "-t,--text", r.key = "text", r.kind = OptionKind::Text;
        return r;
      }(),
      described(bind(opt::seq_len, &O::seq_len, 0), "direct: tokens per window (default: the capture's, else 128)"),
      bind(opt::feature_map, &O::feature_map, trainable_map_names()),
      bind(opt::init, &O::init),
      bind(opt::untied, &O::tied, false),
      bind(opt::activation, &O::activation, std::vector<std::string>{"exp", "softmax"}),
      bind(opt::window, &O::window, 0),
      omitted_at_default(bind(opt::decay, &O::decay, parse_decay, decay_name, decay_names())),
      only_when(bind(opt::decay_init, &O::decay_init, parse_decay_init, decay_init_name, decay_init_names()), has_decay),
      bind(opt::features, &O::features, 0),
      bind(opt::allocation, &O::allocation),
      bind(opt::strategy, &O::strategy, parse_alloc_strategy, alloc_strategy_name, alloc_strategy_names()),
      only_when(bind(opt::budget, &O::budget, 0), has_strategy),
      only_when(bind(opt::lambda, &O::lambda, parse_lambda, lambda_arg), has_strategy),
      only_when(bind(opt::dof_samples, &O::dof_samples), has_strategy),
      omitted_at_default(only_when(bind(opt::state_budget, &O::state_budget, 0), has_strategy)),
      omitted_at_default(only_when(bind(opt::state_share, &O::state_share), has_strategy)),
      bind(opt::loss, &O::loss, parse_distill_loss, distill_loss_name, distill_loss_names()),
      bind(opt::steps, &O::steps),
      [] {
        Row r = described(bind(opt::lr, &O::lr),
                          "learning rate of every parameter but alpha: z (learned-prf), W, b (hedgehog, t2r), omega, tau (flex)");
        r.key = "optimizer.lr";
        return r;
      }(),
      [] {
        Row r = bind(opt::lr_alpha, &O::lr_alpha);
        r.key = "optimizer.lr_alpha";
        return r;
      }(),
      [] {
        Row r = bind(opt::weight_decay, &O::weight_decay);
        r.key = "optimizer.weight_decay";
        return r;
      }(),
      bind(opt::schedule, &O::schedule, parse_lr_schedule, lr_schedule_name, lr_schedule_names()),
      bind(opt::batch, &O::batch),
      bind(opt::l2_pairs, &O::l2_pairs),
      described(bind(opt::seed, &O::seed), "seed of the maps, the split and the mini-batches"),
      bind(opt::checkpoint_every, &O::checkpoint_every),
      bind(opt::device, &O::device, parse_device_name, device_name, device_names()),
  };
  return rows;
}

// The dims every head must satisfy, wherever they came from (a softmax head's is 0: it has no map).
void check_map_dims(const DistillOptions& o, const std::vector<std::vector<int64_t>>& dims,
                    const std::vector<std::vector<HeadType>>& types = {}) {
  const MapFamily& family = map_family(o.feature_map);
  for (size_t s = 0; s < dims.size(); ++s)
    for (size_t h = 0; h < dims[s].size(); ++h) {
      const int64_t m = dims[s][h];
      if (s < types.size() && h < types[s].size() && types[s][h] == HeadType::Softmax) continue;
      check_feature_dim(m, "");
      if (family.pairs && m % 2)
        fail_value("feature dimension", std::to_string(m) + " is odd; " + o.feature_map + " needs an even M (" + family.pairs + ")");
    }
}

}  // namespace

DistillLoss parse_distill_loss(const std::string& name) { return parse_name(kLosses, name, "loss"); }
const char* distill_loss_name(DistillLoss loss) { return name_of(kLosses, loss); }
std::vector<std::string> distill_loss_names() { return names_of(kLosses); }


const OptionTable<DistillOptions>& distill_option_table() { return table(); }

std::string distill_command(const DistillOptions& o, const std::string& run_dir) {
  return command_for("distill", table(), o, {"--out", run_dir});
}

std::string distill_resume_command(const std::string& run_dir, std::optional<Device> device) {
  std::string command = resume_command("distill", run_dir);
  if (device) command += std::string(" --device ") + device_name(*device);
  return command;
}

void check_distill_options(const DistillOptions& o, bool dims_given) {
  check_options(table(), o);  // each option by its own definition: kind, range, names
  const bool direct = o.loss == DistillLoss::Direct;
  if (direct && o.text.empty()) fail_value("text", "is missing: direct distillation trains on a text");
  if (!direct && o.capture.empty()) fail_value("capture", "is missing: layerwise distillation trains on a capture");
  if (direct && o.capture.empty() && o.model.empty())
    fail_value("model", "is missing: direct distillation needs the model, or a capture of it");
  const int given = int(o.features != 0) + int(!o.allocation.empty()) + int(o.strategy.has_value());
  if (given > 1 || (given == 0 && !dims_given))
    fail_value("feature dimension", given == 0 ? "is missing: give one M for every head, an allocation file, or a strategy "
                                                 "with a budget"
                                               : "comes from exactly one of: one M for every head, an allocation file, "
                                                 "or a strategy with a budget");
  if (o.strategy && o.budget == 0) fail_value("budget", "is missing: a strategy allocates a budget C (the mean feature dimension)");
  if ((o.state_budget > 0 || o.state_share > 0) && !o.strategy)
    fail_value("state budget", "allocates head types from the capture's DoF: give a strategy (e.g. dof) with it");
  if (o.state_budget > 0 && o.state_share > 0)
    fail_value("state budget", "give bytes or a share of the original's key-value cache, not both");
  if ((o.state_budget > 0 || o.state_share > 0) && o.loss == DistillLoss::Block)
    fail_value("loss", "block with softmax heads kept exact is not supported yet: use output or kl");
  if (o.window != 0) {
    check_head(o.feature_map, o.window);  // the one rule of a head's settings (attention/head.h)
    if (o.loss == DistillLoss::L2)
      fail_value("window", "the l2 loss fits kernel values, not a hybrid head's weights: use kl, softmax, output or direct");
  }
  if (o.decay != Decay::None) {
    if (o.loss == DistillLoss::L2)
      fail_value("decay", std::string(decay_name(o.decay)) + " does not train with the l2 loss (it fits kernel values, not a decayed head's weights): use kl, softmax, output or direct");
    if (o.decay_init == DecayInit::Fit && o.capture.empty())
      fail_value("decay initialization", "fit reads the head's attention from a capture: give one, or --decay-init none");
    if (o.decay == Decay::Mixer && o.capture.empty())
      fail_value("decay", "mixer reads each head's attention from a capture (its mixer distances): give one, or one decay for every head");
    if (o.decay == Decay::Mixer && o.window > 0 && o.loss == DistillLoss::Block)
      fail_value("loss", "block with mixed head types (--decay mixer beside a window makes each head hybrid or linear) is not "
                         "supported yet: use output or kl");
  }
  if (o.features != 0) check_map_dims(o, {{o.features}});
}

void check_window_fits(int64_t window, int64_t seq_len) {
  if (window > 0 && window >= seq_len)
    fail_value("window", std::to_string(window) + " tokens is not below the sequence length " + std::to_string(seq_len) +
                             ": every key would be in the softmax window, nothing left to linearize (0: plain linear attention)");
}

std::vector<std::vector<int64_t>> distill_dims(const DistillOptions& o, int num_layers, int num_heads,
                                               const CaptureStore* capture, std::vector<std::vector<HeadType>>* types) {
  std::vector<std::vector<int64_t>> dims;
  std::vector<std::vector<HeadType>> head_types;
  if (o.features > 0) {
    dims.assign(size_t(num_layers), std::vector<int64_t>(size_t(num_heads), o.features));
  } else if (!o.allocation.empty()) {
    AllocationFile f = read_allocation_file(o.allocation, num_layers, num_heads);
    dims = f.dims;
    head_types = f.types;
    try {
      check_head_types(head_types, num_layers, num_heads, o.window, o.allocation);
    } catch (const Error& e) {
      fail_value("window", std::string(e.what()) + ": give the window the allocation was made for");
    }
  } else if (o.strategy) {
    if (!capture) fail_value("strategy", "needs the capture's spectra: give a capture");
    // The spectra exactly as `attnscope allocate --capture` computes them with its defaults (seed
    // 0, trace normalization), so the dims are the ones that command prints.
    DofSettings settings;
    settings.samples = o.dof_samples;
    settings.lambda = o.lambda;  // as allocate: the fast path certifies, and J doubles, at this lambda
    AllocOptions a;
    a.strategy = *o.strategy;
    a.budget = o.budget;
    // Maps built of [f, g] pairs (hedgehog, the Fourier maps) need an even M: rounded to pairs.
    a.multiple = map_family(o.feature_map).pairs ? 2 : 1;
    a.state = {o.state_budget, o.state_share, capture->seq_len(), o.window, capture->num_kv_heads(), 4};
    const Allocation al = allocation_at(compute_spectra(*capture, settings), o.lambda, a).allocation;
    dims = al.dims;
    head_types = al.types;
  } else {
    fail_value("feature dimension", "is missing");
  }
  if (!head_types.empty() && !types)
    fail_value("head types", "softmax heads kept exact cannot be trained by this job");
  check_map_dims(o, dims, head_types);
  if (types) *types = head_types;
  return dims;
}

std::string distill_job_json(const DistillJob& job) {
  nlohmann::ordered_json resolved;
  resolved["model"] = job.model;
  resolved["optimizer"] = adamw_json();
  resolved["dims"] = dims_json(job.dims);
  if (!job.types.empty()) resolved["head_types"] = head_types_json(job.types);
  if (job.options.decay == Decay::Mixer) resolved["head_decays"] = head_decays_json(job.decays);
  resolved["world_size"] = job.world_size;
  resolved["trained_length"] = job.trained_length;
  return job_json("distill", job.command, table(), job.options, resolved);
}

bool DistillJob::has_gates() const {
  for (const auto& layer : decays)
    for (Decay d : layer)
      if (d == Decay::Gated) return true;
  return false;
}

void check_head_decays_of(const DistillJob& job, int n_layer, int n_head) {
  const std::string where = job.file.empty() ? std::string("head decays") : job.file;
  bool fits = int(job.decays.size()) == n_layer;
  for (const auto& layer : job.decays) fits = fits && int(layer.size()) == n_head;
  if (!fits) fail(where, "head_decays must list the decay of each of the model's " + std::to_string(n_layer) + " x " + std::to_string(n_head) + " heads");
}

std::vector<std::vector<int64_t>> DistillJob::dims_for(int n_layer, int n_head) const {
  const std::string where = file.empty() ? std::string("dims") : file;
  if (int(dims.size()) != n_layer)
    fail(where, "dims must list the model's " + std::to_string(n_layer) + " layers (they list " + std::to_string(dims.size()) + ")");
  std::vector<std::vector<int64_t>> out;
  for (size_t s = 0; s < dims.size(); ++s) {
    if (int(dims[s].size()) == n_head) out.push_back(dims[s]);
    else if (dims[s].size() == 1) out.emplace_back(size_t(n_head), dims[s][0]);
    else
      fail(where, "layer " + std::to_string(s) + " lists " + std::to_string(dims[s].size()) +
                      " per-head dimensions, the model has " + std::to_string(n_head) + " heads");
  }
  return out;
}

DistillJob read_distill_job(const std::string& run_dir) {
  DistillJob job;
  job.file = job_file(run_dir);
  const std::string& path = job.file;
  const nlohmann::json j = read_job_json(run_dir, "distill", table(), job.options);
  // What the job resolved when it started; every key optional but "feature_map" and "dims" (a
  // hand-written job.json needs only those).
  const JsonReader r{path};
  r.string(j, "command", "command", job.command);
  r.string(j, "model", "model", job.model);
  if (job.options.loss == DistillLoss::Direct) job.options.model = job.model;  // direct's --model is the job's model
  r.integer(j, "world_size", "world_size", 1, 1 << 20, "a positive integer", job.world_size);
  r.integer(j, "trained_length", "trained_length", 0, opt::kMaxTokens, "a non-negative integer", job.trained_length);
  if (!j.contains("feature_map")) fail(path, "has no \"feature_map\"");
  if (!j.contains("dims")) fail(path, "has no \"dims\"");
  // The dims' layer and head counts are checked against the capture or model where they are used.
  const auto& d = j["dims"];
  if (!d.is_array() || d.empty()) fail(path, "\"dims\" is not a list of feature dimensions");
  int heads = d[0].is_array() ? int(d[0].size()) : 1;
  if (j.contains("head_types")) {
    const auto& t = j["head_types"];
    if (t.is_array() && !t.empty() && t[0].is_array()) heads = int(t[0].size());
    job.types = parse_head_types_json(t, int(d.size()), heads, job.options.window, path + ": head_types");
  }
  job.dims = parse_dims_json(d, int(d.size()), heads, path, job.types);
  // Each head's decay: recorded for mixer; one kind for every head is resolved again from the options.
  if (j.contains("head_decays")) {
    const auto& t = j["head_decays"];
    const int decay_heads = t.is_array() && !t.empty() && t[0].is_array() ? int(t[0].size()) : heads;
    if (!job.types.empty() && decay_heads != heads) fail(path, "head_decays and head_types list different numbers of heads");
    job.decays = parse_head_decays_json(t, int(d.size()), decay_heads, job.types, path + ": head_decays");
  } else if (job.options.decay == Decay::Mixer) {
    fail(path, "has decay mixer but no \"head_decays\" (each head's decay, resolved when the job started)");
  }
  try {
    check_map_dims(job.options, job.dims, job.types);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what(), e.quantity());
  }
  return job;
}

}  // namespace attnscope
