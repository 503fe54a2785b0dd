// The options of a distillation job (distill_options.h): name tables, the option table, the
// command line, job.json, the checks and the feature dimensions.
#include "attnscope/distill/distill_options.h"

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
#include "attnscope/base/error.h"
#include "attnscope/base/names.h"
#include "attnscope/capture/capture.h"

namespace fs = std::filesystem;

namespace attnscope {
namespace {

using json = nlohmann::ordered_json;

constexpr Named<DistillLoss> kLosses[] = {
    {DistillLoss::Kl, "kl"}, {DistillLoss::Softmax, "softmax"}, {DistillLoss::L2, "l2"},
    {DistillLoss::Output, "output"}, {DistillLoss::Direct, "direct"}};

// AdamW's fixed settings, recorded in job.json.
constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

// Limits of the numbers a job takes: far above any useful value, low enough that nothing
// overflows or asks for more memory than a machine has.
constexpr int64_t kMaxSteps = 1000000000;
constexpr int64_t kMaxBatch = 1 << 16;
constexpr int64_t kMaxPairs = 1 << 24;
constexpr int64_t kMaxSamples = 1 << 20;
constexpr int64_t kMaxSeqLen = 1 << 20;
constexpr double kMaxLr = 1e3;

std::string str(int64_t v) { return std::to_string(v); }
std::string positive(int64_t v) { return v > 0 ? std::to_string(v) : std::string(); }

using Row = OptionSpec<DistillOptions>;
using O = DistillOptions;

// The table: every option of `attnscope distill` DistillOptions holds, in the order the command
// line is written.
const std::vector<Row> kTable = {
    {"-c,--capture", "capture", "capture directory (attnscope capture); direct: optional, its model",
     [](const O& o) { return o.capture; }, [](O& o, const std::string& v) { o.capture = v; }},
    {"--val-capture", "validation capture", "held-out capture for validation (default: a share of the windows)",
     [](const O& o) { return o.val_capture; }, [](O& o, const std::string& v) { o.val_capture = v; }},
    {"--val-share", "validation share", "share of the windows held out when there is no validation capture",
     [](const O& o) { return number_arg(o.val_share); },
     [](O& o, const std::string& v) { o.val_share = parse_number(v, "validation share"); }},
    {"-m,--model", "model", "direct: the model (default: the capture's)",
     [](const O& o) { return o.model; }, [](O& o, const std::string& v) { o.model = v; }},
    compute_dtype_option<O>(),
    {"-t,--text", "text", "direct: the training text (.txt or .jsonl)",
     [](const O& o) { return o.text; }, [](O& o, const std::string& v) { o.text = v; }},
    {"-L,--seq-len", "sequence length", "direct: tokens per window (default: the capture's, else 128)",
     [](const O& o) { return positive(o.seq_len); },
     [](O& o, const std::string& v) { o.seq_len = parse_whole(v, "sequence length"); }},
    {"--feature-map", "feature map", "learned-prf | hedgehog | t2r | flex-stationary | flex-nonstationary",
     [](const O& o) { return o.feature_map; }, [](O& o, const std::string& v) { o.feature_map = v; }},
    {"--init", "initialization", "initialization of the map (learned-prf: gaussian | orthogonal; hedgehog: identity | random)",
     [](const O& o) { return o.init; }, [](O& o, const std::string& v) { o.init = v; }},
    {"--untied", "tied", "hedgehog, t2r: separate layers for queries and keys",
     [](const O& o) { return o.tied ? std::string() : std::string("1"); }, [](O& o, const std::string&) { o.tied = false; },
     true},
    {"--activation", "activation", "hedgehog: exp | softmax",
     [](const O& o) { return o.activation; }, [](O& o, const std::string& v) { o.activation = v; }},
    {"--window", "window", "hybrid heads: each query attends its last W keys with softmax weights and older keys through "
                           "the map, with a learned balance per head (0: plain linear attention)",
     [](const O& o) { return positive(o.window); },
     [](O& o, const std::string& v) { o.window = parse_whole(v, "window"); }},
    {"-M,--features", "feature dimension", "feature dimension M of every head",
     [](const O& o) { return positive(o.features); },
     [](O& o, const std::string& v) { o.features = parse_whole(v, "feature dimension"); }},
    {"--allocation", "allocation", "per-layer or per-head dimensions: `attnscope allocate --json` output",
     [](const O& o) { return o.allocation; }, [](O& o, const std::string& v) { o.allocation = v; }},
    {"--strategy", "strategy", "dimensions from the capture's DoF, as `attnscope allocate`: fix | dof | dof-clip | per-head",
     [](const O& o) { return o.strategy ? std::string(alloc_strategy_name(*o.strategy)) : std::string(); },
     [](O& o, const std::string& v) { o.strategy = parse_alloc_strategy(v); }},
    {"-C,--budget", "budget", "with a strategy: cost C, the mean feature dimension",
     [](const O& o) { return o.strategy ? str(o.budget) : std::string(); },
     [](O& o, const std::string& v) { o.budget = parse_whole(v, "budget"); }},
    {"--lambda", "lambda", "with a strategy: DoF tolerance lambda (2^-8, 0.0625, 1e-3)",
     [](const O& o) { return o.strategy ? lambda_arg(o.lambda) : std::string(); },
     [](O& o, const std::string& v) { o.lambda = parse_lambda(v); }},
    {"-J,--samples", "samples", "with a strategy: vectors sampled per head for the DoF",
     [](const O& o) { return o.strategy ? str(o.dof_samples) : std::string(); },
     [](O& o, const std::string& v) { o.dof_samples = parse_whole(v, "samples"); }},
    {"--loss", "loss", "kl | softmax | l2 | output (layerwise, on the capture) | direct (next-token loss of the whole model "
                       "with the maps in place, on the text)",
     [](const O& o) { return std::string(distill_loss_name(o.loss)); },
     [](O& o, const std::string& v) { o.loss = parse_distill_loss(v); }},
    {"--steps", "steps", "training steps",
     [](const O& o) { return str(o.steps); }, [](O& o, const std::string& v) { o.steps = parse_whole(v, "steps"); }},
    {"--lr", "learning rate", "learning rate of every parameter but alpha: z (learned-prf), W, b (hedgehog, t2r), omega, tau (flex)",
     [](const O& o) { return number_arg(o.lr); }, [](O& o, const std::string& v) { o.lr = parse_number(v, "learning rate"); }},
    {"--lr-alpha", "alpha learning rate", "learning rate of alpha (learned-prf)",
     [](const O& o) { return number_arg(o.lr_alpha); },
     [](O& o, const std::string& v) { o.lr_alpha = parse_number(v, "alpha learning rate"); }},
    {"--weight-decay", "weight decay", "AdamW weight decay",
     [](const O& o) { return number_arg(o.weight_decay); },
     [](O& o, const std::string& v) { o.weight_decay = parse_number(v, "weight decay"); }},
    {"--schedule", "schedule", "constant | cosine",
     [](const O& o) { return std::string(lr_schedule_name(o.schedule)); },
     [](O& o, const std::string& v) { o.schedule = parse_lr_schedule(v); }},
    {"--batch", "batch", "windows per mini-batch",
     [](const O& o) { return str(o.batch); }, [](O& o, const std::string& v) { o.batch = parse_whole(v, "batch"); }},
    {"--l2-pairs", "l2 pairs", "loss l2: sampled (query, key) pairs per mini-batch",
     [](const O& o) { return str(o.l2_pairs); }, [](O& o, const std::string& v) { o.l2_pairs = parse_whole(v, "l2 pairs"); }},
    {"--seed", "seed", "seed of the maps, the split and the mini-batches",
     [](const O& o) { return std::to_string(o.seed); }, [](O& o, const std::string& v) { o.seed = parse_unsigned(v, "seed"); }},
    {"--checkpoint-every", "checkpoint interval", "steps between checkpoints",
     [](const O& o) { return str(o.checkpoint_every); },
     [](O& o, const std::string& v) { o.checkpoint_every = parse_whole(v, "checkpoint interval"); }},
    {"--device", "device", "cpu | cuda",
     [](const O& o) { return std::string(device_name(o.device)); },
     [](O& o, const std::string& v) { o.device = parse_device_name(v); }},
};

bool is_trainable(const std::string& map) {
  const auto maps = trainable_feature_maps();
  return std::find(maps.begin(), maps.end(), map) != maps.end();
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void check_range(int64_t v, int64_t lo, int64_t hi, const char* quantity) {
  if (v < lo || v > hi)
    fail_value(quantity, std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
}

void check_rate(double v, const char* quantity) {
  if (!std::isfinite(v) || !(v > 0) || v > kMaxLr)
    fail_value(quantity, number_arg(v) + " is not a finite number in (0, " + number_arg(kMaxLr) + "]");
}

// The dims every head must satisfy, wherever they came from.
void check_map_dims(const DistillOptions& o, const std::vector<std::vector<int64_t>>& dims) {
  const bool even = o.feature_map == "hedgehog" || o.feature_map == "flex-stationary" || o.feature_map == "flex-nonstationary";
  for (const auto& layer : dims)
    for (int64_t m : layer) {
      check_feature_dim(m, "");
      if (even && m % 2)
        fail_value("feature dimension", std::to_string(m) + " is odd; " + o.feature_map + " needs an even M (" +
                                            (o.feature_map == "hedgehog" ? "[exp(u), exp(-u)]" : "[cos, sin]") + ")");
    }
}

// Typed reads of job.json: Error naming the file and the key for anything of the wrong type.
struct JobReader {
  const nlohmann::json& j;
  std::string file;

  const nlohmann::json& at(const nlohmann::json& obj, const char* key, const std::string& path) const {
    if (!obj.is_object() || !obj.contains(key)) fail(file, "has no \"" + path + "\"");
    return obj[key];
  }
  std::string text(const nlohmann::json& obj, const char* key, const std::string& path) const {
    const auto& v = at(obj, key, path);
    if (!v.is_string()) fail(file, "\"" + path + "\" is not a string");
    return v;
  }
  double number(const nlohmann::json& obj, const char* key, const std::string& path) const {
    const auto& v = at(obj, key, path);
    if (!v.is_number()) fail(file, "\"" + path + "\" is not a number");
    return v;
  }
  int64_t integer(const nlohmann::json& obj, const char* key, const std::string& path) const {
    const auto& v = at(obj, key, path);
    if (!v.is_number_integer()) fail(file, "\"" + path + "\" is not a whole number");
    return v;
  }
  bool boolean(const nlohmann::json& obj, const char* key, const std::string& path) const {
    const auto& v = at(obj, key, path);
    if (!v.is_boolean()) fail(file, "\"" + path + "\" is not true or false");
    return v;
  }
};

}  // namespace

DistillLoss parse_distill_loss(const std::string& name) { return parse_name(kLosses, name, "loss"); }
const char* distill_loss_name(DistillLoss loss) { return name_of(kLosses, loss); }
std::vector<std::string> distill_loss_names() { return names_of(kLosses); }


std::vector<std::string> trainable_feature_maps() {
  return {"learned-prf", "hedgehog", "t2r", "flex-stationary", "flex-nonstationary"};
}

const std::vector<OptionSpec<DistillOptions>>& distill_option_table() { return kTable; }

std::string distill_command(const DistillOptions& o, const std::string& run_dir) {
  std::vector<std::string> args = {"distill"};
  const auto opts = option_args(kTable, o);
  args.insert(args.end(), opts.begin(), opts.end());
  args.insert(args.end(), {"--out", run_dir});
  return attnscope_command(args);
}

std::string distill_resume_command(const std::string& run_dir, std::optional<Device> device) {
  std::vector<std::string> args = {"distill", "--resume", run_dir};
  if (device) args.insert(args.end(), {"--device", device_name(*device)});
  return attnscope_command(args);
}

void check_distill_options(const DistillOptions& o, bool dims_given) {
  if (!is_trainable(o.feature_map))
    fail_value("feature map", "'" + o.feature_map + "' cannot be trained (trainable maps: " + join(trainable_feature_maps()) + ")");
  if (o.feature_map == "hedgehog" && o.activation != "exp" && o.activation != "softmax")
    fail_value("activation", "'" + o.activation + "' cannot be trained yet (valid: exp, softmax)");
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
  if (o.features != 0) check_feature_dim(o.features, "");
  if (o.strategy) {
    check_range(o.budget, 1, kMaxFeatureDim, "budget");
    if (!(o.lambda > 0) || !std::isfinite(o.lambda)) fail_value("lambda", number_arg(o.lambda) + " is not positive and finite");
    check_range(o.dof_samples, 2, kMaxSamples, "samples");
  }
  if (o.seq_len != 0) check_range(o.seq_len, 2, kMaxSeqLen, "sequence length");
  if (o.window != 0) {
    check_range(o.window, 0, kMaxSeqLen, "window");
    if (o.feature_map == "t2r" || o.feature_map == "flex-stationary" || o.feature_map == "flex-nonstationary")
      fail_value("window", "hybrid heads are trained with the maps of positive features (learned-prf, hedgehog), not " + o.feature_map);
    if (o.loss == DistillLoss::L2)
      fail_value("window", "the l2 loss fits kernel values, not a hybrid head's weights: use kl, softmax, output or direct");
  }
  if (!(o.val_share >= 0 && o.val_share < 1)) fail_value("validation share", number_arg(o.val_share) + " is not in [0, 1)");
  check_range(o.steps, 1, kMaxSteps, "steps");
  check_range(o.batch, 1, kMaxBatch, "batch");
  check_range(o.l2_pairs, 1, kMaxPairs, "l2 pairs");
  check_range(o.checkpoint_every, 1, kMaxSteps, "checkpoint interval");
  check_rate(o.lr, "learning rate");
  check_rate(o.lr_alpha, "alpha learning rate");
  if (!std::isfinite(o.weight_decay) || o.weight_decay < 0 || o.weight_decay > 1)
    fail_value("weight decay", number_arg(o.weight_decay) + " is not a number in [0, 1]");
  if (o.features != 0) check_map_dims(o, {{o.features}});
}

std::vector<std::vector<int64_t>> distill_dims(const DistillOptions& o, int num_layers, int num_heads,
                                               const CaptureStore* capture) {
  std::vector<std::vector<int64_t>> dims;
  if (o.features > 0) {
    dims.assign(size_t(num_layers), std::vector<int64_t>(size_t(num_heads), o.features));
  } else if (!o.allocation.empty()) {
    dims = read_allocation_file(o.allocation, num_layers, num_heads).dims;
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
    a.multiple = o.feature_map == "hedgehog" || o.feature_map == "flex-stationary" || o.feature_map == "flex-nonstationary" ? 2 : 1;
    dims = allocation_at(compute_spectra(*capture, settings), o.lambda, a).allocation.dims;
  } else {
    fail_value("feature dimension", "is missing");
  }
  check_map_dims(o, dims);
  return dims;
}

std::string distill_job_json(const DistillJob& job) {
  const DistillOptions& o = job.options;
  json j;
  j["kind"] = "distill";
  j["command"] = job.command;
  j["model"] = job.model;
  j["capture"] = o.capture;
  j["val_capture"] = o.val_capture;
  j["val_share"] = o.val_share;
  j["feature_map"] = {{"name", o.feature_map}, {"init", o.init}, {"tied", o.tied}, {"activation", o.activation},
                      {"seed", o.seed}};
  j["window"] = o.window;
  j["features"] = o.features;
  j["allocation"] = o.allocation;
  j["strategy"] = o.strategy ? alloc_strategy_name(*o.strategy) : "";
  j["budget"] = o.budget;
  j["lambda"] = o.lambda;
  j["dof_samples"] = o.dof_samples;
  j["dims"] = dims_json(job.dims);
  j["loss"] = distill_loss_name(o.loss);
  if (o.loss == DistillLoss::Direct) {
    j["text"] = o.text;
    j["seq_len"] = o.seq_len;
    // Only when given: unset, a resumed run computes in its device's default (compute_dtype.h).
    if (o.compute) j["dtype"] = compute_dtype_name(*o.compute);
  }
  j["optimizer"] = {{"name", "adamw"}, {"lr", o.lr}, {"lr_alpha", o.lr_alpha}, {"betas", {kBeta1, kBeta2}},
                    {"eps", kEps}, {"weight_decay", o.weight_decay}};
  j["schedule"] = lr_schedule_name(o.schedule);
  j["steps"] = o.steps;
  j["batch"] = o.batch;
  j["l2_pairs"] = o.l2_pairs;
  j["seed"] = o.seed;
  j["checkpoint_every"] = o.checkpoint_every;
  j["device"] = device_name(o.device);
  j["world_size"] = job.world_size;
  j["trained_length"] = job.trained_length;
  return j.dump(2) + "\n";
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
  const std::string path = (fs::path(run_dir) / "job.json").string();
  std::ifstream in(path);
  if (!in) fail(run_dir, "is not a run directory (no job.json)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail(path, std::string("is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(path, "is not a JSON object");
  const JobReader r{j, path};
  if (j.contains("kind") && j["kind"] != "distill") fail(path, "is not a distillation job");
  DistillJob job;
  job.file = path;
  DistillOptions& o = job.options;
  // Every field is optional (a missing one keeps DistillOptions' default: hand-written and older
  // job.json files read too); one of the wrong type, or a bad name or number, names the file.
  const auto has = [](const nlohmann::json& obj, const char* key) { return obj.is_object() && obj.contains(key); };
  try {
    if (has(j, "command")) job.command = r.text(j, "command", "command");
    if (has(j, "model")) job.model = r.text(j, "model", "model");
    if (has(j, "loss") && j["loss"] == "direct") o.model = job.model;  // direct's --model (job.json's "model")
    if (has(j, "capture")) o.capture = r.text(j, "capture", "capture");
    if (has(j, "val_capture")) o.val_capture = r.text(j, "val_capture", "val_capture");
    if (has(j, "val_share")) o.val_share = r.number(j, "val_share", "val_share");
    const auto& fm = r.at(j, "feature_map", "feature_map");
    o.feature_map = r.text(fm, "name", "feature_map.name");
    if (has(fm, "init")) o.init = r.text(fm, "init", "feature_map.init");
    if (has(fm, "tied")) o.tied = r.boolean(fm, "tied", "feature_map.tied");
    if (has(fm, "activation")) o.activation = r.text(fm, "activation", "feature_map.activation");
    if (has(fm, "seed")) {
      if (!fm["seed"].is_number_unsigned()) fail(path, "\"feature_map.seed\" is not a whole number >= 0");
      o.seed = fm["seed"];
    }
    if (has(j, "window")) o.window = r.integer(j, "window", "window");
    if (has(j, "features")) o.features = r.integer(j, "features", "features");
    if (has(j, "allocation")) o.allocation = r.text(j, "allocation", "allocation");
    const std::string strategy = has(j, "strategy") ? r.text(j, "strategy", "strategy") : "";
    if (!strategy.empty()) o.strategy = parse_alloc_strategy(strategy);
    if (has(j, "budget")) o.budget = r.integer(j, "budget", "budget");
    // lambda was once written as the string given on the command line.
    if (has(j, "lambda")) o.lambda = j["lambda"].is_string() ? parse_lambda(j["lambda"]) : r.number(j, "lambda", "lambda");
    if (has(j, "dof_samples")) o.dof_samples = r.integer(j, "dof_samples", "dof_samples");
    if (has(j, "loss")) o.loss = parse_distill_loss(r.text(j, "loss", "loss"));
    if (has(j, "text")) o.text = r.text(j, "text", "text");
    if (has(j, "seq_len")) o.seq_len = r.integer(j, "seq_len", "seq_len");
    if (has(j, "dtype")) o.compute = parse_compute_dtype(r.text(j, "dtype", "dtype"));
    if (has(j, "optimizer")) {
      const auto& opt = j["optimizer"];
      if (has(opt, "lr")) o.lr = r.number(opt, "lr", "optimizer.lr");
      if (has(opt, "lr_alpha")) o.lr_alpha = r.number(opt, "lr_alpha", "optimizer.lr_alpha");
      if (has(opt, "weight_decay")) o.weight_decay = r.number(opt, "weight_decay", "optimizer.weight_decay");
    }
    if (has(j, "schedule")) o.schedule = parse_lr_schedule(r.text(j, "schedule", "schedule"));
    if (has(j, "steps")) o.steps = r.integer(j, "steps", "steps");
    if (has(j, "batch")) o.batch = r.integer(j, "batch", "batch");
    if (has(j, "l2_pairs")) o.l2_pairs = r.integer(j, "l2_pairs", "l2_pairs");
    if (has(j, "seed")) {
      if (!j["seed"].is_number_unsigned()) fail(path, "\"seed\" is not a whole number >= 0");
      o.seed = j["seed"];
    }
    if (has(j, "checkpoint_every")) o.checkpoint_every = r.integer(j, "checkpoint_every", "checkpoint_every");
    if (has(j, "device")) o.device = parse_device_name(r.text(j, "device", "device"));
    if (has(j, "world_size")) job.world_size = int(r.integer(j, "world_size", "world_size"));
    if (has(j, "trained_length")) job.trained_length = r.integer(j, "trained_length", "trained_length");
    // The dims' layer and head counts are checked against the capture or model where they are used.
    const auto& d = r.at(j, "dims", "dims");
    if (!d.is_array() || d.empty()) fail(path, "\"dims\" is not a list of feature dimensions");
    const int heads = d[0].is_array() ? int(d[0].size()) : 1;
    job.dims = parse_dims_json(d, int(d.size()), heads, path);
    check_map_dims(o, job.dims);
  } catch (const Error& e) {
    if (std::string(e.what()).rfind(path, 0) == 0) throw;
    throw Error(path + ": " + e.what());
  }
  return job;
}

}  // namespace attnscope
