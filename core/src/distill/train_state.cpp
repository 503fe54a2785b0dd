// The distillation trainers' shared pieces (train_state.h), except checkpoints (checkpoint.cpp).
//
// Determinism: the mini-batch of step t and the l2 pairs are drawn from derive_seed(seed, stream, t)
// alone, so the random state of a run at step t is (seed, t): a resumed run draws exactly what the
// uninterrupted one would have.
#include "distill/train_state.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/base/random.h"
#include "attnscope/run/adamw.h"

namespace attnscope {

namespace {
// One group holding every head of the layer, in order: its tensors are the layer's own.
bool one_group(const LayerState& st) { return st.groups.size() == 1 && int64_t(st.groups[0].group.heads.size()) == st.heads; }
}  // namespace

at::Tensor group_heads(const LayerState& st, const GroupState& g, const at::Tensor& t) {
  return one_group(st) ? t : t.index_select(1, g.head_index);
}

Optimizer optimizer_of(const DistillOptions& o) { return {o.lr, o.lr_alpha, o.weight_decay, o.schedule, o.steps}; }

void adamw_step(const Optimizer& opt, GroupState& g, int64_t step) {
  LayerMaps& maps = g.group.maps;
  for (size_t i = 0; i < maps.params.size(); ++i) {
    at::Tensor& p = maps.params[i].second;
    const at::Tensor grad = p.grad();
    if (!grad.defined()) continue;  // a parameter the loss does not reach (none of the maps' so far)
    const std::string& name = maps.params[i].first;
    const double base = name == "alpha" ? opt.lr_alpha : opt.lr;
    adamw_update(p, grad, g.exp_avg[i], g.exp_avg_sq[i], scheduled_lr(opt.schedule, base, step - 1, opt.steps),
                 opt.weight_decay, step);
    p.mutable_grad().zero_();
  }
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

void init_layer_state(const DistillOptions& o, int layer, const std::vector<int64_t>& head_dims, int64_t d,
                      int64_t d_model, int64_t softmax_window, LayerState& st, const at::Tensor& decay_delta,
                      const std::vector<HeadType>& types, const std::vector<Decay>& decays) {
  st.heads = int64_t(head_dims.size());
  st.types = types;
  st.groups.clear();
  std::vector<HeadGroup> groups = init_layer_groups(o, layer, head_dims, d, d_model, types, decays);
  if (decay_delta.defined()) set_layer_decay(groups, decay_delta);
  for (HeadGroup& hg : groups) {
    hg.maps.softmax_window = softmax_window;
    st.groups.push_back(group_state(std::move(hg)));
  }
}

std::vector<std::vector<HeadType>> layer_types(const std::vector<LayerState>& layers) {
  std::vector<std::vector<HeadType>> out;
  for (const LayerState& st : layers)
    if (!st.types.empty()) out.push_back(st.types);
  if (!out.empty() && out.size() != layers.size()) fail("distill", "head types for some layers only");
  return out;
}

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

void check_capture_of(const CaptureStore& cap, const ModelConfig& c, const std::string& where, const std::string& model_name) {
  if (cap.num_layers() != c.n_layer || cap.num_heads() != c.n_head || cap.head_dim() != c.head_dim ||
      (cap.d_model() && cap.d_model() != c.d_model))
    fail(where, "is a capture of another model shape than " + model_name);
}

at::Tensor step_batch(uint64_t seed, int64_t batch, int64_t n_train, int64_t step) {
  const auto idx = sample_without_replacement(n_train, std::min(batch, n_train),
                                              derive_seed(derive_seed(seed, kBatchStream), uint64_t(step)));
  return at::tensor(idx, at::kLong);
}

at::Tensor step_pairs(uint64_t seed, int64_t n_pairs, int64_t L, int64_t step) {
  Rng rng(derive_seed(derive_seed(seed, kPairStream), uint64_t(step)));
  at::Tensor pairs = at::empty({n_pairs, 2}, at::kLong);
  auto a = pairs.accessor<int64_t, 2>();
  for (int64_t p = 0; p < n_pairs; ++p) {
    const int64_t i = int64_t(rng.below(uint64_t(L)));
    a[p][0] = i;
    a[p][1] = int64_t(rng.below(uint64_t(i + 1)));
  }
  return pairs;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> split_windows(uint64_t seed, double val_share, int64_t T,
                                                                    const std::string& source) {
  const auto order = shuffle_indices(T, derive_seed(seed, kSplitStream));
  int64_t n_val = val_share > 0 ? std::max<int64_t>(1, int64_t(std::llround(val_share * double(T)))) : 0;
  if (n_val >= T) fail(source, "has " + std::to_string(T) + " windows: too few to hold out a validation share");
  return {std::vector<int64_t>(order.begin() + n_val, order.end()), std::vector<int64_t>(order.begin(), order.begin() + n_val)};
}

double head_weighted(const LayerState& st, const std::vector<double>& per_group) {
  if (one_group(st)) return per_group[0];
  double sum = 0;
  for (size_t g = 0; g < st.groups.size(); ++g) sum += per_group[g] * double(st.groups[g].group.heads.size());
  return sum / double(st.heads);
}

at::Tensor layer_block_loss(const LayerState& st, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& x, const at::Tensor& resid) {
  if (!st.block_model) fail("distill", "the block loss needs the model");
  LayerOutputs all;
  for (const GroupState& g : st.groups) {
    const LayerOutputs o = layer_outputs(g.group.maps, group_heads(st, g, q), group_heads(st, g, k), group_heads(st, g, v), x);
    if (one_group(st)) return block_loss(*st.block_model, st.layer, resid, o);
    if (!all.y.defined()) all = {at::zeros_like(v), at::zeros_like(v)};
    all.y = all.y.index_copy(1, g.head_index, o.y);
    all.y_hat = all.y_hat.index_copy(1, g.head_index, o.y_hat);
  }
  return block_loss(*st.block_model, st.layer, resid, all);
}

// Validation on all held-out windows, a few at a time.
std::pair<double, double> validate(const LayerState& st, DistillLoss loss, const at::Tensor& pairs) {
  at::NoGradGuard no_grad;
  const int64_t T = st.val_q.size(0);
  const bool direct = loss == DistillLoss::Direct;
  std::vector<double> losses, kls;
  double block_sum = 0;  // the block loss is the layer's, not a group's
  if (loss == DistillLoss::Block)
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
      const int64_t n = std::min<int64_t>(4, T - t0);
      const auto rows = [&](const at::Tensor& t) { return t.defined() ? t.narrow(0, t0, n) : t; };
      block_sum += layer_block_loss(st, rows(st.val_q), rows(st.val_k), rows(st.val_v), rows(st.val_x), rows(st.val_resid))
                       .item<double>() * double(n);
    }
  for (const GroupState& g : st.groups) {
    const at::Tensor gq = group_heads(st, g, st.val_q), gk = group_heads(st, g, st.val_k);
    const at::Tensor gv = st.val_v.defined() ? group_heads(st, g, st.val_v) : at::Tensor();
    const at::Tensor& gx = st.val_x;  // the layer's inputs: every head reads them
    double sum_loss = 0, sum_kl = 0;
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
      const int64_t n = std::min<int64_t>(4, T - t0);
      const at::Tensor q = gq.narrow(0, t0, n), k = gk.narrow(0, t0, n);
      const at::Tensor v = gv.defined() ? gv.narrow(0, t0, n) : at::Tensor();
      const at::Tensor x = gx.defined() ? gx.narrow(0, t0, n) : at::Tensor();
      const bool kl_only = direct || loss == DistillLoss::Block;  // the group's own loss is its KL
      const double l = kl_only ? layer_kl(g.group.maps, q, k, x) : layer_loss(g.group.maps, q, k, loss, pairs, v, x).item<double>();
      const double kk = loss == DistillLoss::Kl || kl_only ? l : layer_kl(g.group.maps, q, k, x);
      sum_loss += l * double(n);
      sum_kl += kk * double(n);
    }
    losses.push_back(sum_loss / double(T));
    kls.push_back(sum_kl / double(T));
  }
  if (loss == DistillLoss::Block) return {block_sum / double(T), head_weighted(st, kls)};
  return {head_weighted(st, losses), head_weighted(st, kls)};
}

std::string num_str(double v, int digits) {
  std::ostringstream s;
  s.precision(digits);
  s << v;
  return s.str();
}

void check_training_memory(const std::vector<std::vector<int64_t>>& dims, int64_t head_dim, int64_t windows,
                           int64_t batch, int64_t seq_len) {
  const double f = 4.0;  // float32
  const double d = double(head_dim), L = double(seq_len), B = double(std::min(batch, std::max<int64_t>(windows, 1)));
  double params = 0, largest_layer = 0;
  for (const auto& layer : dims) {
    double step = 0;
    for (int64_t m : layer) {
      params += 4.0 * (2.0 * double(m) * d + double(m)) * f;  // maps, gradients, two AdamW moments
      step += B * L * (2.0 * double(m) + 3.0 * L) * f * 2.0;   // log features of q and k, L x L maps, backward
    }
    largest_layer = std::max(largest_layer, step);
  }
  const double threads = std::min<double>(double(dims.size()), double(std::max(1, at::get_num_threads())));
  const double data = double(dims.size()) * double(windows) * double(dims.empty() ? 0 : dims[0].size()) * L * d * f * 2.0;
  const double need = params + data + threads * largest_layer;
  const double have = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  if (have > 0 && need > have) {
    int64_t m_max = 0;
    for (const auto& layer : dims)
      for (int64_t m : layer) m_max = std::max(m_max, m);
    fail_value("feature dimension", "M up to " + std::to_string(m_max) + " needs about " + num_str(need / 1e9, 3) +
                                        " GB to train, more than this machine's " + num_str(have / 1e9, 3) + " GB");
  }
}

void write_outputs(RunDir& run, const DistillOptions& o, std::vector<LayerState>& layers, const json& extra,
                   DistillResult& r) {
  NamedTensors maps_out;
  json rep;
  rep["feature_map"] = o.feature_map;
  rep["loss"] = distill_loss_name(o.loss);
  rep["steps"] = o.steps;
  rep["layers"] = json::array();
  double sum_kl = 0;
  const int S = int(layers.size());
  std::vector<std::vector<HeadGroup>> groups(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    LayerState& st = layers[size_t(s)];
    DistillLayerResult lr;
    lr.head_features.assign(size_t(st.heads), 0);
    for (GroupState& g : st.groups) {
      for (auto& p : g.group.maps.params) p.second = p.second.detach().requires_grad_(false);
      for (size_t i = 0; i < g.group.heads.size(); ++i) lr.head_features[size_t(g.group.heads[i])] = g.group.maps.features;
      groups[size_t(s)].push_back({g.group.heads, cpu_copy(g.group.maps)});
    }
    // Head by head in order, each head's tensors in its map's order (SPEC 7 names).
    for (int64_t h = 0; h < st.heads; ++h)
      for (const GroupState& g : st.groups)
        for (size_t i = 0; i < g.group.heads.size(); ++i)
          if (g.group.heads[i] == h)
            for (const auto& [name, t] : g.group.maps.params)
              maps_out.emplace_back(feature_map_tensor_name(s, int(h), name), t[int64_t(i)].to(at::kCPU, at::kFloat).contiguous());
    lr.layer = s;
    lr.features = *std::max_element(lr.head_features.begin(), lr.head_features.end());  // 0: every head softmax
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
  }
  // The trained maps as every head's own FeatureMap (copies, CPU float32).
  r.maps = group_feature_maps(groups, /*copy=*/true, layer_types(layers));
  rep["mean_val_kl"] = sum_kl / double(S);
  for (auto it = extra.begin(); it != extra.end(); ++it) rep[it.key()] = it.value();
  if (run.writes())
    write_safetensors(run.file("feature_maps.safetensors"), maps_out,
                      {{"feature_map", o.feature_map}, {"format", "attnscope feature maps (SPEC 7)"}});
  run.write_report(rep.dump(2) + "\n");
  run.log("finished: mean validation KL " + num_str(sum_kl / double(S)));
}

}  // namespace attnscope
