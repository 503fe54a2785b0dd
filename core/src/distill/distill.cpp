// The distillation job (distill.h): options <-> job.json, the per-step loop over layers (each a list
// of head groups), AdamW, checkpoints and resume, and the final feature_maps.safetensors and
// report.json. Direct training (distill_direct.cpp) shares these pieces (distill_parts.h).
//
// Determinism: the mini-batch of step t and the l2 pairs are drawn from derive_seed(seed, stream, t)
// alone, so the random state of a run at step t is (seed, t): a resumed run draws exactly what the
// uninterrupted one would have, and the checkpoint's "rng" metadata records just that.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnscope/allocation/allocation.h"
#include "attnscope/capture/capture.h"
#include "attnscope/analysis/dof.h"
#include "base/device.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/distributed.h"
#include "attnscope/base/error.h"
#include "base/random.h"
#include "attnscope/distill/run_dir.h"
#include "attnscope/io/safetensors.h"
#include "distill/distill_parts.h"

namespace fs = std::filesystem;

namespace attnscope {
namespace distill_parts {

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

json options_json(const DistillOptions& o) {
  json j;
  j["kind"] = "distill";
  j["command"] = o.command;
  j["capture"] = o.capture;
  j["val_capture"] = o.val_capture;
  j["val_share"] = o.val_share;
  j["feature_map"] = {{"name", o.feature_map}, {"init", o.init}, {"tied", o.tied}, {"activation", o.activation},
                      {"seed", o.seed}};
  j["features"] = o.features;
  j["allocation"] = o.allocation;
  j["strategy"] = o.strategy;
  j["budget"] = o.budget;
  j["lambda"] = o.lambda;
  j["dof_samples"] = o.dof_samples;
  // Per layer when every head of a layer shares M, else per head (SPEC 7 allows both).
  if (o.head_dims.empty()) j["dims"] = o.dims;
  else j["dims"] = o.head_dims;
  j["loss"] = o.loss;
  if (o.loss == "direct") {
    j["text"] = o.text;
    j["seq_len"] = o.seq_len;
  }
  j["optimizer"] = {{"name", "adamw"}, {"lr", o.lr}, {"lr_alpha", o.lr_alpha}, {"betas", {kBeta1, kBeta2}},
                    {"eps", kEps}, {"weight_decay", o.weight_decay}};
  j["schedule"] = o.schedule;
  j["steps"] = o.steps;
  j["batch"] = o.batch;
  j["l2_pairs"] = o.l2_pairs;
  j["seed"] = o.seed;
  j["checkpoint_every"] = o.checkpoint_every;
  j["device"] = o.device;
  j["world_size"] = 1;
  return j;
}

double lr_at(const DistillOptions& o, double base, int64_t step) {
  if (o.schedule == "cosine") return base * 0.5 * (1.0 + std::cos(3.14159265358979323846 * double(step) / double(o.steps)));
  return base;
}

namespace {

double base_lr(const DistillOptions& o, const std::string& param) { return param == "alpha" ? o.lr_alpha : o.lr; }

bool one_group(const LayerState& st) { return st.groups.size() == 1; }

// The group's slice of a layer tensor [T, H, L, d] (the tensor itself for a layer of one group).
at::Tensor group_heads(const LayerState& st, const GroupState& g, const at::Tensor& t) {
  return one_group(st) ? t : t.index_select(1, g.head_index);
}

// Checkpoint name prefix of a group's tensors: "layers.{s}." for a layer of one group (the names of
// per-layer runs), "layers.{s}.m{M}." for the group of heads with M features.
std::string group_prefix(const LayerState& st, int layer, const GroupState& g) {
  const std::string base = "layers." + std::to_string(layer) + ".";
  return one_group(st) ? base : base + "m" + std::to_string(g.group.maps.features) + ".";
}

}  // namespace

void to_device(LayerState& st, const at::Device& device) {
  for (GroupState& g : st.groups) {
    for (auto& p : g.group.maps.params) p.second = p.second.to(device);
    for (auto& t : g.exp_avg) t = t.to(device);
    for (auto& t : g.exp_avg_sq) t = t.to(device);
    g.head_index = g.head_index.to(device);
  }
}

LayerMaps cpu_copy(const LayerMaps& maps) {
  LayerMaps m = maps;
  for (auto& p : m.params) p.second = p.second.detach().to(at::kCPU, at::kFloat);
  return m;
}

GroupState group_state(HeadGroup group) {
  GroupState g;
  g.group = std::move(group);
  g.head_index = at::tensor(g.group.heads, at::kLong);
  for (auto& [name, p] : g.group.maps.params) {
    g.exp_avg.push_back(at::zeros_like(p));
    g.exp_avg_sq.push_back(at::zeros_like(p));
  }
  return g;
}

void init_layer_state(const DistillOptions& o, int layer, int64_t heads, int64_t d, LayerState& st) {
  st.heads = heads;
  st.groups.clear();
  for (HeadGroup& hg : init_layer_groups(o, layer, heads, d)) st.groups.push_back(group_state(std::move(hg)));
}

void check_dims(const DistillOptions& o, int layers, int64_t heads, const std::string& where) {
  if (!o.head_dims.empty()) {
    if (int(o.head_dims.size()) != layers) fail(where, "dims do not match the model's " + std::to_string(layers) + " layers");
    for (const auto& l : o.head_dims)
      if (int64_t(l.size()) != heads) fail(where, "per-head dims do not match the model's " + std::to_string(heads) + " heads");
  } else if (int(o.dims.size()) != layers) {
    fail(where, "dims do not match the capture's layers");
  }
}

void adamw_step(const DistillOptions& o, GroupState& g, int64_t step /* 1-based */) {
  at::NoGradGuard no_grad;
  const double bc1 = 1.0 - std::pow(kBeta1, double(step)), bc2 = 1.0 - std::pow(kBeta2, double(step));
  LayerMaps& maps = g.group.maps;
  for (size_t i = 0; i < maps.params.size(); ++i) {
    at::Tensor& p = maps.params[i].second;
    const at::Tensor grad = p.grad();
    if (!grad.defined()) continue;  // a parameter the loss does not reach (none of the maps' so far)
    const double lr = lr_at(o, base_lr(o, maps.params[i].first), step - 1);
    g.exp_avg[i].mul_(kBeta1).add_(grad, 1.0 - kBeta1);
    g.exp_avg_sq[i].mul_(kBeta2).addcmul_(grad, grad, 1.0 - kBeta2);
    if (o.weight_decay > 0) p.mul_(1.0 - lr * o.weight_decay);
    const at::Tensor denom = (g.exp_avg_sq[i] / bc2).sqrt_().add_(kEps);
    p.addcdiv_(g.exp_avg[i], denom, -lr / bc1);
    p.mutable_grad().zero_();
  }
}

namespace {

at::Tensor step_pairs(const DistillOptions& o, int64_t L, int64_t step) {
  Rng rng(derive_seed(derive_seed(o.seed, kPairStream), uint64_t(step)));
  at::Tensor pairs = at::empty({o.l2_pairs, 2}, at::kLong);
  auto a = pairs.accessor<int64_t, 2>();
  for (int64_t p = 0; p < o.l2_pairs; ++p) {
    const int64_t i = int64_t(rng.below(uint64_t(L)));
    a[p][0] = i;
    a[p][1] = int64_t(rng.below(uint64_t(i + 1)));
  }
  return pairs;
}

// One training step of a layer on mini-batch q, k [B, H, L, d]: every group's loss, backward and
// AdamW; st.last_loss is the head-weighted mean of the groups' losses.
void train_layer_step(const DistillOptions& o, LayerState& st, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& pairs, int64_t step /* 0-based */) {
  std::vector<double> losses;
  for (GroupState& g : st.groups) {
    const at::Tensor loss = layer_loss(g.group.maps, group_heads(st, g, q), group_heads(st, g, k), o.loss, pairs);
    loss.backward();
    g.last_loss = loss.item<double>();
    losses.push_back(g.last_loss);
    adamw_step(o, g, step + 1);
  }
  st.last_loss = head_weighted(st, losses);
  if (step == 0) st.first_loss = st.last_loss;
}

}  // namespace

at::Tensor step_batch(const DistillOptions& o, int64_t n_train, int64_t step) {
  const auto idx = sample_without_replacement(n_train, std::min(o.batch, n_train),
                                              derive_seed(derive_seed(o.seed, kBatchStream), uint64_t(step)));
  return at::tensor(idx, at::kLong);
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> split_windows(const DistillOptions& o, int64_t T,
                                                                    const std::string& source) {
  const auto order = shuffle_indices(T, derive_seed(o.seed, kSplitStream));
  int64_t n_val = o.val_share > 0 ? std::max<int64_t>(1, int64_t(std::llround(o.val_share * double(T)))) : 0;
  if (n_val >= T) fail(source, "has " + std::to_string(T) + " windows: too few to hold out a validation share");
  return {std::vector<int64_t>(order.begin() + n_val, order.end()), std::vector<int64_t>(order.begin(), order.begin() + n_val)};
}

double head_weighted(const LayerState& st, const std::vector<double>& per_group) {
  if (one_group(st)) return per_group[0];
  double sum = 0;
  for (size_t g = 0; g < st.groups.size(); ++g) sum += per_group[g] * double(st.groups[g].group.heads.size());
  return sum / double(st.heads);
}

// Validation on all held-out windows, a few at a time.
std::pair<double, double> validate(const DistillOptions& o, const LayerState& st) {
  at::NoGradGuard no_grad;
  const int64_t T = st.val_q.size(0);
  const bool direct = o.loss == "direct";
  std::vector<double> losses, kls;
  const at::Tensor pairs = o.loss == "l2" ? step_pairs(o, st.val_q.size(2), -1).to(st.val_q.device()) : at::Tensor();
  for (const GroupState& g : st.groups) {
    const at::Tensor gq = group_heads(st, g, st.val_q), gk = group_heads(st, g, st.val_k);
    double loss = 0, kl = 0;
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
      const int64_t n = std::min<int64_t>(4, T - t0);
      const at::Tensor q = gq.narrow(0, t0, n), k = gk.narrow(0, t0, n);
      const double l = direct ? layer_kl(g.group.maps, q, k) : layer_loss(g.group.maps, q, k, o.loss, pairs).item<double>();
      const double kk = o.loss == "kl" || direct ? l : layer_kl(g.group.maps, q, k);
      loss += l * double(n);
      kl += kk * double(n);
    }
    losses.push_back(loss / double(T));
    kls.push_back(kl / double(T));
  }
  return {head_weighted(st, losses), head_weighted(st, kls)};
}

std::string num_str(double v, int digits) {
  std::ostringstream s;
  s.precision(digits);
  s << v;
  return s.str();
}

void save_checkpoint(RunDir& run, const DistillOptions& o, const std::vector<LayerState>& layers, int64_t step,
                     double elapsed_s, const std::map<std::string, std::string>& extra_meta) {
  NamedTensors tensors;
  for (size_t s = 0; s < layers.size(); ++s)
    for (const GroupState& g : layers[s].groups) {
      const LayerMaps& maps = g.group.maps;
      for (size_t i = 0; i < maps.params.size(); ++i) {
        const std::string base = group_prefix(layers[s], int(s), g) + maps.params[i].first;
        tensors.emplace_back(base, maps.params[i].second.detach().to(at::kCPU));
        tensors.emplace_back(base + ".adamw.exp_avg", g.exp_avg[i].to(at::kCPU));
        tensors.emplace_back(base + ".adamw.exp_avg_sq", g.exp_avg_sq[i].to(at::kCPU));
      }
    }
  std::map<std::string, std::string> meta = {{"step", std::to_string(step)},
                                             {"seed", std::to_string(o.seed)},
                                             {"elapsed_s", num_str(elapsed_s)},
                                             {"rng", "derive_seed(seed, stream, step): the state is (seed, step)"}};
  for (size_t s = 0; s < layers.size(); ++s) {
    meta["loss." + std::to_string(s)] = num_str(layers[s].last_loss, 17);
    meta["first_loss." + std::to_string(s)] = num_str(layers[s].first_loss, 17);
  }
  for (const auto& [key, v] : extra_meta) meta[key] = v;
  run.write_checkpoint(tensors, meta);
  run.log("checkpoint at step " + std::to_string(step));
}

int64_t load_checkpoint(RunDir& run, std::vector<LayerState>& layers, double& elapsed_s,
                        std::map<std::string, std::string>& meta) {
  const SafetensorsFile ck(run.checkpoint_path());
  meta = ck.metadata();
  const auto it = meta.find("step");
  if (it == meta.end()) fail(run.checkpoint_path(), "has no step");
  const int64_t step = std::stoll(it->second);
  if (meta.count("elapsed_s")) elapsed_s = std::stod(meta.at("elapsed_s"));
  for (size_t s = 0; s < layers.size(); ++s) {
    LayerState& st = layers[s];
    for (GroupState& g : st.groups)
      for (size_t i = 0; i < g.group.maps.params.size(); ++i) {
        const std::string base = group_prefix(st, int(s), g) + g.group.maps.params[i].first;
        const std::vector<std::pair<std::string, at::Tensor*>> parts = {
            {base, &g.group.maps.params[i].second},
            {base + ".adamw.exp_avg", &g.exp_avg[i]},
            {base + ".adamw.exp_avg_sq", &g.exp_avg_sq[i]}};
        for (const auto& [name, dst] : parts) {
          if (!ck.contains(name)) fail(run.checkpoint_path(), "has no tensor " + name);
          const at::Tensor t = ck.tensor(name);
          if (t.sizes() != dst->sizes()) fail(run.checkpoint_path(), "tensor " + name + " has the wrong shape");
          dst->copy_(t);
        }
      }
    if (meta.count("loss." + std::to_string(s))) st.last_loss = std::stod(meta.at("loss." + std::to_string(s)));
    if (meta.count("first_loss." + std::to_string(s))) st.first_loss = std::stod(meta.at("first_loss." + std::to_string(s)));
  }
  return step;
}

int64_t start_training(RunDir& run, bool resume, std::vector<LayerState>& layers, double& elapsed_s) {
  int64_t start_step = 0;
  if (resume) {
    std::map<std::string, std::string> meta;
    start_step = load_checkpoint(run, layers, elapsed_s, meta);
    run.truncate_metrics_after(start_step);
    run.log("resumed at step " + std::to_string(start_step));
  }
  for (auto& st : layers)
    for (auto& g : st.groups)
      for (auto& p : g.group.maps.params) p.second.requires_grad_(true);
  return start_step;
}

std::vector<LayerState> bench_layers(const std::vector<std::vector<HeadGroup>>& groups) {
  std::vector<LayerState> layers(groups.size());
  for (size_t s = 0; s < groups.size(); ++s)
    for (const HeadGroup& hg : groups[s]) {
      layers[s].groups.push_back(group_state(hg));  // the same tensors: updated in place
      layers[s].heads += int64_t(hg.heads.size());
      for (auto& p : layers[s].groups.back().group.maps.params) p.second.requires_grad_(true);
    }
  return layers;
}

void write_outputs(RunDir& run, const DistillOptions& o, std::vector<LayerState>& layers, const json& extra,
                   DistillResult& r) {
  NamedTensors maps_out;
  json rep;
  rep["feature_map"] = o.feature_map;
  rep["loss"] = o.loss;
  rep["steps"] = o.steps;
  rep["layers"] = json::array();
  double sum_kl = 0;
  const int S = int(layers.size());
  for (int s = 0; s < S; ++s) {
    LayerState& st = layers[size_t(s)];
    DistillLayerResult lr;
    lr.head_features.assign(size_t(st.heads), 0);
    std::vector<HeadGroup> groups;
    for (GroupState& g : st.groups) {
      for (auto& p : g.group.maps.params) p.second = p.second.detach().requires_grad_(false);
      for (size_t i = 0; i < g.group.heads.size(); ++i) lr.head_features[size_t(g.group.heads[i])] = g.group.maps.features;
      groups.push_back(g.group);
    }
    // Head by head in order, each head's tensors in its map's order (SPEC 7 names).
    for (int64_t h = 0; h < st.heads; ++h)
      for (const GroupState& g : st.groups)
        for (size_t i = 0; i < g.group.heads.size(); ++i)
          if (g.group.heads[i] == h)
            for (const auto& [name, t] : g.group.maps.params)
              maps_out.emplace_back(feature_map_tensor_name(s, int(h), name), t[int64_t(i)].to(at::kCPU, at::kFloat).contiguous());
    lr.layer = s;
    lr.features = *std::max_element(lr.head_features.begin(), lr.head_features.end());
    lr.initial_loss = st.first_loss;
    lr.final_loss = st.last_loss;
    lr.initial_val_kl = st.initial_val_kl;
    lr.val_kl = st.has_val ? st.val_kl : std::nan("");
    sum_kl += lr.val_kl;
    r.layers.push_back(lr);
    json jl = {{"layer", s}, {"features", lr.features}};
    if (!one_group(st)) jl["head_features"] = lr.head_features;
    jl["initial_loss"] = lr.initial_loss;
    jl["final_loss"] = lr.final_loss;
    if (st.has_val) {
      jl["initial_val_kl"] = lr.initial_val_kl;
      jl["val_kl"] = lr.val_kl;
    } else {
      jl["val_kl"] = nullptr;
    }
    rep["layers"].push_back(jl);
    for (HeadGroup& g : groups) g.maps = cpu_copy(g.maps);
    if (one_group(st)) r.maps.push_back(groups[0].maps);
    r.groups.push_back(std::move(groups));
  }
  if (int(r.maps.size()) != S) r.maps.clear();  // per-head dims: r.groups only
  rep["mean_val_kl"] = sum_kl / double(S);
  for (auto it = extra.begin(); it != extra.end(); ++it) rep[it.key()] = it.value();
  if (run.writes())
    write_safetensors(run.file("feature_maps.safetensors"), maps_out,
                      {{"feature_map", o.feature_map}, {"format", "attnscope feature maps (SPEC 7)"}});
  run.write_report(rep.dump(2) + "\n");
  run.log("finished: mean validation KL " + num_str(sum_kl / double(S)));
}

}  // namespace distill_parts

using namespace distill_parts;

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Runs f(layer) for every layer. Layers are independent: on the CPU one task each (ATen ops inside
// run single-threaded there); on CUDA one after another on the one stream, as the GPU is already
// parallel within a layer and concurrent host threads would only contend for the same stream.
template <class F>
void for_each_layer(const at::Device& device, int S, const F& f) {
  if (device.is_cuda()) {
    for (int64_t s = 0; s < S; ++s) f(s);
    return;
  }
  at::parallel_for(0, S, 1, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) f(s);
  });
}

// Distributed runs (distributed.h): every rank trains the layers it owns (layer s: rank s % world)
// and these two put the owners' results on every rank, where rank 0 writes them. With one rank
// they do nothing.

// Sums `fields` of every layer over the ranks, each contributing only its own layers (0 for the
// rest, so the owner's value arrives exactly), with `stop` riding along: true when any rank asked
// to stop, so that a cancel on one rank stops all of them at the same step.
bool share_layer_values(DistGroup& dist, std::vector<LayerState>& layers,
                        const std::vector<double LayerState::*>& fields, bool stop = false) {
  if (dist.world() == 1) return stop;
  std::vector<double> v;
  for (size_t s = 0; s < layers.size(); ++s)
    for (const auto f : fields) v.push_back(dist.owns(int(s)) ? layers[s].*f : 0.0);
  v.push_back(stop ? 1.0 : 0.0);
  dist.all_reduce_sum(v);
  size_t i = 0;
  for (auto& st : layers)
    for (const auto f : fields) st.*f = v[i++];
  return v.back() > 0;
}

// Every layer's maps and AdamW moments (every group's) from its owner.
void share_layer_tensors(DistGroup& dist, std::vector<LayerState>& layers) {
  if (dist.world() == 1) return;
  for (size_t s = 0; s < layers.size(); ++s) {
    std::vector<at::Tensor> t;
    for (GroupState& g : layers[s].groups) {
      for (auto& p : g.group.maps.params) t.push_back(p.second);
      t.insert(t.end(), g.exp_avg.begin(), g.exp_avg.end());
      t.insert(t.end(), g.exp_avg_sq.begin(), g.exp_avg_sq.end());
    }
    dist.broadcast(t, int(s) % dist.world());
  }
}

// Every head's M, for the checks that hold per dimension.
std::vector<int64_t> all_dims(const DistillOptions& o) {
  std::vector<int64_t> out = o.dims;
  for (const auto& l : o.head_dims) out.insert(out.end(), l.begin(), l.end());
  return out;
}

// Per-head dims: kept per layer where every head of every layer agrees (the per-layer behaviour).
void set_head_dims(DistillOptions& o, const std::vector<std::vector<int64_t>>& dims) {
  bool uniform = true;
  for (const auto& l : dims)
    for (int64_t m : l) uniform = uniform && m == l[0];
  o.dims.clear();
  o.head_dims.clear();
  if (uniform)
    for (const auto& l : dims) o.dims.push_back(l[0]);
  else
    o.head_dims = dims;
}

}  // namespace

void resolve_dims(DistillOptions& o, int num_layers) {
  const int given = int(o.features > 0) + int(!o.allocation.empty()) + int(!o.strategy.empty());
  if (given > 1)
    fail_value("feature dimension", "comes from exactly one of --features, --allocation or --strategy, not several");
  if (!o.strategy.empty()) fail_value("feature dimension", "from --strategy needs the capture's spectra");
  if (o.features > 0) {
    o.dims.assign(size_t(num_layers), o.features);
    return;
  }
  if (o.allocation.empty())
    fail_value("feature dimension", "is missing: give --features M, --allocation FILE or --strategy S --budget C");
  std::ifstream in(o.allocation);
  if (!in) fail(o.allocation, "cannot be read (allocation file)");
  json j;
  try {
    j = json::parse(in);
  } catch (const std::exception& e) {
    fail(o.allocation, std::string("is not JSON (want `attnscope allocate --json` output): ") + e.what());
  }
  if (!j.is_object() || !j.contains("dims") || !j["dims"].is_array())
    fail(o.allocation, "has no \"dims\" array (want `attnscope allocate --json` output)");
  const json& d = j["dims"];
  if (int(d.size()) != num_layers)
    fail(o.allocation, "has dims for " + std::to_string(d.size()) + " layers, the capture has " +
                           std::to_string(num_layers));
  // Per layer [M_s], or per head [[M_s0, M_s1, ...], ...] (`allocate --strategy per-head`).
  o.dims.clear();
  o.head_dims.clear();
  std::vector<std::vector<int64_t>> dims;
  for (const json& v : d) {
    std::vector<int64_t> row;
    for (const json& m : v.is_array() ? v : json::array({v})) {
      if (!m.is_number_integer() || m.get<int64_t>() < 1)
        fail(o.allocation, "has a dimension that is not a positive integer (layer " + std::to_string(dims.size()) + ")");
      row.push_back(m.get<int64_t>());
    }
    if (row.empty()) fail(o.allocation, "has no dimension for layer " + std::to_string(dims.size()));
    if (v.is_array() != d[0].is_array()) fail(o.allocation, "mixes per-layer and per-head dims");
    dims.push_back(row);
  }
  if (d[0].is_array()) set_head_dims(o, dims);
  else for (const auto& row : dims) o.dims.push_back(row[0]);
}

void resolve_dims(DistillOptions& o, const CaptureStore& capture) {
  if (o.strategy.empty()) return resolve_dims(o, capture.num_layers());
  if (o.features > 0 || !o.allocation.empty())
    fail_value("feature dimension", "comes from exactly one of --features, --allocation or --strategy, not several");
  const AllocStrategy strategy = parse_alloc_strategy(o.strategy);
  if (o.budget < 1) fail_value("budget", "must be a positive integer (--budget C with --strategy)");
  // The spectra exactly as `attnscope allocate --capture` computes them with its defaults (seed 0,
  // trace normalization, exact_limit and top_k), so the dims are the ones that command prints.
  DofSettings settings;
  settings.samples = o.dof_samples;
  const DofSpectra spectra = compute_spectra(capture, settings);
  AllocOptions a;
  a.strategy = strategy;
  a.budget = o.budget;
  a.head_dim = spectra.head_dim;
  // Per-head allocations give each head its own M: heads that share one train as a group.
  set_head_dims(o, allocate(dof_values(head_dofs(spectra, parse_lambda(o.lambda))), a).dims);
}

int64_t head_features(const DistillOptions& o, int layer, int64_t head) {
  if (!o.head_dims.empty()) return o.head_dims.at(size_t(layer)).at(size_t(head));
  return o.dims.at(size_t(layer));
}

void check_distill_options(const DistillOptions& o) {
  const auto maps = trainable_feature_maps();
  if (std::find(maps.begin(), maps.end(), o.feature_map) == maps.end())
    fail_value("feature map", "'" + o.feature_map + "' cannot be trained (trainable maps: " + join(maps) + ")");
  const auto losses = distill_losses();
  if (std::find(losses.begin(), losses.end(), o.loss) == losses.end())
    fail_value("loss", "'" + o.loss + "' is unknown (valid: " + join(losses) + ")");
  if (o.loss == "direct" && o.text.empty()) fail_value("text", "loss direct trains on a text: give --text FILE");
  if (o.seq_len < 0 || o.seq_len == 1) fail_value("sequence length", "must be at least 2 (or 0 for the default)");
  if (o.schedule != "constant" && o.schedule != "cosine")
    fail_value("schedule", "'" + o.schedule + "' is unknown (valid: constant, cosine)");
  if (o.steps < 1) fail_value("steps", "must be at least 1");
  if (o.batch < 1) fail_value("batch", "must be at least 1");
  if (o.checkpoint_every < 1) fail_value("checkpoint interval", "must be at least 1");
  if (o.device != "cpu" && o.device != "cuda") fail_value("device", "'" + o.device + "' is unknown (valid: cpu, cuda)");
  if (!(o.lr > 0) || !(o.lr_alpha > 0)) fail_value("learning rate", "must be positive");
  if (!(o.val_share >= 0 && o.val_share < 1)) fail_value("validation share", "must be in [0, 1)");
  if (o.feature_map == "hedgehog" && o.activation != "exp" && o.activation != "softmax")
    fail_value("activation", "'" + o.activation + "' cannot be trained yet (valid: exp, softmax)");
  if (o.feature_map == "hedgehog")
    for (int64_t m : all_dims(o))
      if (m % 2) fail_value("feature dimension", std::to_string(m) + " is odd; hedgehog needs an even M ([exp(u), exp(-u)])");
  if (o.feature_map == "flex-stationary" || o.feature_map == "flex-nonstationary")
    for (int64_t m : all_dims(o))
      if (m % 2) fail_value("feature dimension", std::to_string(m) + " is odd; " + o.feature_map + " needs an even M ([cos, sin])");
}

DistillOptions read_distill_job(const std::string& run_dir) {
  const std::string path = run_dir + "/job.json";
  std::ifstream in(path);
  if (!in) fail(run_dir, "is not a run directory (no job.json)");
  json j;
  try {
    j = json::parse(in);
    DistillOptions o;
    o.command = j.at("command");
    o.capture = j.at("capture");
    o.val_capture = j.at("val_capture");
    o.val_share = j.at("val_share");
    o.feature_map = j.at("feature_map").at("name");
    o.init = j.at("feature_map").at("init");
    o.tied = j.at("feature_map").at("tied");
    o.activation = j.at("feature_map").at("activation");
    o.features = j.at("features");
    o.allocation = j.at("allocation");
    // Jobs written before --strategy existed have none of these.
    o.strategy = j.value("strategy", std::string());
    o.budget = j.value("budget", int64_t(0));
    o.lambda = j.value("lambda", std::string("2^-8"));
    o.dof_samples = j.value("dof_samples", int64_t(1024));
    const json& dims = j.at("dims");
    if (!dims.empty() && dims[0].is_array()) o.head_dims = dims.get<std::vector<std::vector<int64_t>>>();
    else o.dims = dims.get<std::vector<int64_t>>();
    o.loss = j.at("loss");
    o.text = j.value("text", std::string());
    o.seq_len = j.value("seq_len", int64_t(0));
    o.model = j.value("model", std::string());
    o.lr = j.at("optimizer").at("lr");
    o.lr_alpha = j.at("optimizer").at("lr_alpha");
    o.weight_decay = j.at("optimizer").at("weight_decay");
    o.schedule = j.at("schedule");
    o.steps = j.at("steps");
    o.batch = j.at("batch");
    o.l2_pairs = j.at("l2_pairs");
    o.seed = j.at("seed");
    o.checkpoint_every = j.at("checkpoint_every");
    o.device = j.value("device", std::string("cpu"));
    return o;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(path, std::string("is not a distillation job: ") + e.what());
  }
}

namespace {

DistillResult train_layers(DistillOptions o, const std::string& run_dir, const ProgressFn& progress, bool resume,
                           DistGroup& dist) {
  const auto t_start = std::chrono::steady_clock::now();
  const CaptureStore cap(o.capture);
  if (!resume) resolve_dims(o, cap);
  check_distill_options(o);
  const at::Device device = parse_device(o.device);
  check_dims(o, cap.num_layers(), cap.num_heads(), run_dir + "/job.json");

  RunDir run(run_dir, !resume, /*writes=*/dist.rank() == 0);
  if (resume && !run.has_checkpoint()) fail(run.checkpoint_path(), "missing: nothing to resume from");
  run.mark_running();
  if (!resume) {
    json job = options_json(o);
    job["model"] = cap.model_path();
    job["world_size"] = dist.world();
    run.write_job(job.dump(2) + "\n");
    run.log("distill " + o.feature_map + " loss " + o.loss + " on " + o.capture + ", " + std::to_string(o.steps) + " steps");
  }

  // Windows: a seeded held-out share, or all of them when a validation capture is given.
  const int64_t T = cap.num_seqs();
  std::vector<int64_t> train_idx, val_idx;
  if (o.val_capture.empty()) {
    std::tie(train_idx, val_idx) = split_windows(o, T, o.capture);
  } else {
    for (int64_t t = 0; t < T; ++t) train_idx.push_back(t);
  }
  const bool has_val = !o.val_capture.empty() || !val_idx.empty();
  std::unique_ptr<CaptureStore> val_cap;
  if (!o.val_capture.empty()) {
    val_cap = std::make_unique<CaptureStore>(o.val_capture);
    if (val_cap->num_layers() != cap.num_layers() || val_cap->num_heads() != cap.num_heads() ||
        val_cap->head_dim() != cap.head_dim())
      fail(o.val_capture, "is a capture of another model shape than " + o.capture);
  }

  const int S = cap.num_layers();
  std::vector<LayerState> layers(static_cast<size_t>(S));
  const at::Tensor train_t = at::tensor(train_idx, at::kLong);
  for (int s = 0; s < S; ++s) {
    LayerState& st = layers[size_t(s)];
    st.has_val = has_val;
    if (dist.owns(s)) {  // a rank holds only its own layers' windows
      const at::Tensor q = cap.layer_tensor(s, "q"), k = cap.layer_tensor(s, "k");
      st.q = q.index_select(0, train_t).contiguous().to(device);
      st.k = k.index_select(0, train_t).contiguous().to(device);
      if (val_cap) {
        st.val_q = val_cap->layer_tensor(s, "q").to(device);
        st.val_k = val_cap->layer_tensor(s, "k").to(device);
      } else if (!val_idx.empty()) {
        const at::Tensor v = at::tensor(val_idx, at::kLong);
        st.val_q = q.index_select(0, v).contiguous().to(device);
        st.val_k = k.index_select(0, v).contiguous().to(device);
      }
    }
    init_layer_state(o, s, cap.num_heads(), cap.head_dim(), st);
    to_device(st, device);
    if (st.val_q.defined()) st.initial_val_kl = validate(o, st).second;
  }
  share_layer_values(dist, layers, {&LayerState::initial_val_kl});

  double elapsed_before = 0;  // training time of the killed run up to its checkpoint
  const int64_t start_step = start_training(run, resume, layers, elapsed_before);
  if (resume) run.log("resumed on " + o.device);

  const int64_t L = cap.seq_len();
  const auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };
  const auto validate_layers = [&] {
    for (auto& st : layers)
      if (st.val_q.defined()) std::tie(st.val_loss, st.val_kl) = validate(o, st);
    share_layer_values(dist, layers, {&LayerState::val_loss, &LayerState::val_kl});
  };
  const auto validation_lines = [&](int64_t step) {
    if (!has_val) return;
    validate_layers();
    std::vector<std::string> lines;
    for (int s = 0; s < S; ++s) {
      const LayerState& st = layers[size_t(s)];
      lines.push_back(json{{"step", step}, {"layer", s}, {"val_loss", st.val_loss}, {"val_kl", st.val_kl}}.dump());
    }
    run.append_metrics(lines);
  };

  for (int64_t step = start_step; step < o.steps; ++step) {
    const at::Tensor batch = step_batch(o, int64_t(train_idx.size()), step).to(device);
    const at::Tensor pairs = o.loss == "l2" ? step_pairs(o, L, step).to(device) : at::Tensor();
    for_each_layer(device, S, [&](int64_t s) {
      if (!dist.owns(int(s))) return;
      LayerState& st = layers[size_t(s)];
      train_layer_step(o, st, st.q.index_select(0, batch), st.k.index_select(0, batch), pairs, step);
    });
    if (share_layer_values(dist, layers, {&LayerState::last_loss, &LayerState::first_loss})) throw Cancelled();
    const double elapsed_s = elapsed();
    std::vector<std::string> lines;
    for (int s = 0; s < S; ++s) {
      const LayerState& st = layers[size_t(s)];
      lines.push_back(json{{"step", step + 1}, {"layer", s}, {"loss", st.last_loss},
                           {"lr", lr_at(o, o.lr, step)}, {"elapsed_s", elapsed_s}}.dump());
      if (!std::isfinite(st.last_loss))
        fail("distill", "layer " + std::to_string(s) + " loss is not finite at step " + std::to_string(step + 1) +
                            " (lower --lr)");
    }
    run.append_metrics(lines);
    const bool last = step + 1 == o.steps;
    if ((step + 1) % o.checkpoint_every == 0 || last) {
      validation_lines(step + 1);
      share_layer_tensors(dist, layers);
      save_checkpoint(run, o, layers, step + 1, elapsed());
    }
    // Cancellation lands here: after a complete step, its checkpoint (if due) already written.
    try {
      report_progress(progress, double(step + 1) / double(o.steps),
                      "step " + std::to_string(step + 1) + "/" + std::to_string(o.steps) + " loss " +
                          num_str(layers[0].last_loss));
    } catch (const Cancelled&) {
      // The other ranks are in the next step's sharing of losses: this one tells them to stop.
      share_layer_values(dist, layers, {&LayerState::last_loss, &LayerState::first_loss}, /*stop=*/true);
      throw;
    }
  }
  share_layer_tensors(dist, layers);
  if (has_val) validate_layers();

  // Final outputs: the maps under SPEC 7's names, then the report, last.
  DistillResult r;
  r.steps = o.steps;
  r.initial_val_loss = r.val_loss = std::nan("");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  json extra;
  extra["seconds"] = r.seconds;
  extra["seconds_per_step"] = r.seconds / double(std::max<int64_t>(1, o.steps - start_step));
  write_outputs(run, o, layers, extra, r);
  run.clear_running();
  dist.barrier();  // every rank returns once rank 0's files are complete
  return r;
}

}  // namespace

DistillResult distill(DistillOptions o, const std::string& run_dir, const ProgressFn& progress, bool resume) {
  if (resume) {
    const std::string device = o.device;
    o = read_distill_job(run_dir);
    if (!device.empty()) o.device = device;  // a run resumes on either device
  }
  const DistEnv env = dist_env_from_environment();
  if (o.loss == "direct") {
    if (env.world > 1)
      fail_value("loss", "direct trains the whole model in one process; run it without WORLD_SIZE (ranks shard "
                         "the layers of layerwise losses only)");
    return distill_direct(o, run_dir, progress, resume);
  }
  if (env.world == 1) {
    DistGroup one(env, o.device);
    return train_layers(o, run_dir, progress, resume, one);
  }
  // Which rank failed: the others fail too (their collectives lose it), each saying its own rank.
  const std::string rank = "rank " + std::to_string(env.rank) + ": ";
  try {
    DistGroup ranks(env, o.device);
    return train_layers(o, run_dir, progress, resume, ranks);
  } catch (const Cancelled&) {
    throw;
  } catch (const Error& e) {
    throw Error(rank + e.what(), e.quantity());
  } catch (const std::exception& e) {
    throw Error(rank + e.what());
  }
}

double distill_step_seconds(DistillBench& b) {
  const DistillOptions& o = b.options;
  if (o.loss == "direct") return direct_step_seconds(b);
  const int S = int(b.groups.size());
  if (int(b.q.size()) != S || int(b.k.size()) != S) fail("distill bench", "q and k must hold one tensor per layer");
  std::vector<LayerState> layers = bench_layers(b.groups);
  const at::Tensor pairs = o.loss == "l2" ? step_pairs(o, b.q[0].size(2), 0).to(b.q[0].device()) : at::Tensor();
  const auto one_step = [&](int64_t step) {
    for_each_layer(b.q[0].device(), S, [&](int64_t s) {
      train_layer_step(o, layers[size_t(s)], b.q[size_t(s)], b.k[size_t(s)], pairs, step);
    });
  };
  const at::Tensor& some_param = layers[0].groups[0].group.maps.params[0].second;
  one_step(0);  // warm-up
  wait_for_device(some_param);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= b.steps; ++i) one_step(i);
  wait_for_device(some_param);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace attnscope
