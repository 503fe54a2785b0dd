// One layer's feature maps stacked over heads (attention/stacked_maps.h), and the distillation
// losses in the log domain (distill.h). The kernel of flex-stationary and flex-nonstationary,
// exp(ls_i + ls_j) V_ij (V = the cos/sin dot products), can be negative and is clamped at 0 as
// linear attention does (SPEC 5); ls_i cancels in a row, ls_j is taken relative to the row's largest
// (a running max over j <= i), so nothing overflows.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <algorithm>
#include <cmath>
#include <tuple>
#include <limits>

#include "attnscope/distill/layer_maps.h"

#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/structured_mixers.h"
#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/attention/head.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/attention/map_family.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/model/model.h"
#include "attnscope/base/random.h"
#include "attnscope/base/tensor_checks.h"

namespace attnscope {

std::string feature_map_tensor_name(int layer, int head, const std::string& param) {
  // A hybrid head's balance sits beside its map (SPEC 7), not in it.
  if (param == kGammaParam) return convert::gamma_name(layer, head);
  if (param == kDecayParam) return convert::decay_delta_name(layer, head);
  if (param == kGateWeightParam) return convert::decay_w_name(layer, head);
  if (param == kGateBiasParam) return convert::decay_b_name(layer, head);
  return convert::tensor_prefix(layer, head) + param;
}

namespace {

// The kl / softmax loss of t2r and flex-stationary (clamped kernels), from its kernel Khat = phi_q phi_k^T (>= 0, causal part only).
// A row whose weights j <= i are all 0 has no distribution Ahat (core's undefined rows,
// attention/attention.h): it is left out of the mean, which is over the defined rows only (and 0, with
// no gradient, when no row is defined). In a defined row an entry Ahat_ij = 0 would make the loss
// infinite; its log is floored at log(1e-30) (no gradient through that entry, as through the ReLU
// that zeroed it), the same floor as log_kernel's.
// `seen`: the keys the teacher's softmax row reads (causal, within its sliding window).
at::Tensor relu_row_loss(const at::Tensor& khat, const at::Tensor& log_a, const at::Tensor& seen,
                         DistillLoss loss, const at::Tensor& v, LayerOutputs* outputs) {
  const at::Tensor z = khat.sum(-1, true);  // [B, H, L, 1]
  const at::Tensor defined = z.squeeze(-1) > 0;
  const at::Tensor a = log_a.exp();
  if (loss == DistillLoss::Output) {
    // Undefined rows have no output: left out, as from the other losses (and 0 in y_hat, as the
    // model reads nothing from them).
    const at::Tensor y_lin = at::matmul(khat / z.clamp_min(1e-30), v), y = at::matmul(a, v);
    if (outputs) *outputs = {y, y_lin};
    const at::Tensor rows = (y - y_lin).pow(2).mean(-1).masked_fill(defined.logical_not(), 0.0);
    return rows.sum() / defined.sum().clamp_min(1).to(rows.scalar_type());
  }
  const at::Tensor log_ahat = at::log((khat / z.clamp_min(1e-30)).clamp_min(1e-30));
  at::Tensor per_entry;
  if (loss == DistillLoss::Kl) per_entry = a * (log_a - log_ahat);
  else if (loss == DistillLoss::Softmax) per_entry = -a * log_ahat;
  const at::Tensor rows = per_entry.masked_fill(seen.logical_not(), 0.0).sum(-1).masked_fill(defined.logical_not(), 0.0);
  return rows.sum() / defined.sum().clamp_min(1).to(rows.scalar_type());
}

// log Khat_ij = logsumexp_m(lq_im + lk_jm), by taking each vector's largest log feature out before
// the matrix product: exact up to rounding, and no [L, L, M] tensor.
at::Tensor log_kernel(const at::Tensor& lq, const at::Tensor& lk) {
  const at::Tensor mq = std::get<0>(lq.max(-1, true)).detach();
  const at::Tensor mk = std::get<0>(lk.max(-1, true)).detach();
  const at::Tensor prod = at::matmul(at::exp(lq - mq), at::exp(lk - mk).transpose(-1, -2));
  // Both factors have a 1 somewhere, but in different m the product can underflow: a floor keeps
  // log finite (such pairs carry essentially no weight).
  return at::log(prod.clamp_min(1e-30)) + mq + mk.transpose(-1, -2);
}

}  // namespace

std::unique_ptr<FeatureMap> LayerMaps::head_map(int64_t head) const { return stacked_head_copy(*this, head); }

namespace {

// Maps for the given heads of a layer, stacked in that order; head h has seed derive_seed(seed, layer, h).
LayerMaps init_maps(const DistillOptions& o, int layer, const std::vector<int64_t>& head_ids, int64_t d,
                    int64_t features, int64_t d_model, int64_t window, Decay decay) {
  if (decay == Decay::Mixer)
    fail_value("decay", "mixer gives each head its own decay: the job resolves them (head_decays_for) before the maps are made");
  FeatureMapSpec spec;
  spec.name = o.feature_map;
  spec.d = d;
  spec.features = features;
  spec.init = o.init;
  spec.tied = o.tied;
  spec.activation = o.activation;
  std::vector<uint64_t> seeds;
  for (int64_t h : head_ids) seeds.push_back(derive_seed(o.seed, layer, int(h)));
  check_head(o.feature_map, window);
  LayerMaps m;
  static_cast<StackedMaps&>(m) = init_stacked_maps(spec, seeds);
  m.window = window;
  if (window > 0) m.params.emplace_back(kGammaParam, at::zeros({m.heads}, at::kFloat));  // g = 1/2 (SPEC 5)
  if (decay == Decay::Fixed) m.params.emplace_back(kDecayParam, at::full({m.heads}, kUndecayedDelta, at::kFloat));
  if (decay == Decay::Gated) {
    if (d_model < 1) fail("distill", "gated decays need the layer input's width (d_model)");
    m.params.emplace_back(kGateWeightParam, at::zeros({m.heads, d_model}, at::kFloat));
    m.params.emplace_back(kGateBiasParam, at::full({m.heads}, kUndecayedDelta, at::kFloat));
  }
  return m;
}

}  // namespace

std::shared_ptr<FeatureMap> LayerMaps::trainable_head_map(int64_t head) const { return stacked_head_view(*this, head); }

LayerMaps init_layer_maps(const DistillOptions& o, int layer, int64_t heads, int64_t d, int64_t features,
                          int64_t d_model) {
  std::vector<int64_t> all(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) all[size_t(h)] = h;
  return init_maps(o, layer, all, d, features, d_model, o.window, o.decay);
}

std::vector<HeadGroup> init_layer_groups(const DistillOptions& o, int layer, const std::vector<int64_t>& head_dims,
                                         int64_t d, int64_t d_model, const std::vector<HeadType>& types,
                                         const std::vector<Decay>& decays) {
  if (!decays.empty() && decays.size() != head_dims.size())
    fail("distill", "layer " + std::to_string(layer) + " has " + std::to_string(decays.size()) + " head decays for " +
                        std::to_string(head_dims.size()) + " heads");
  std::vector<HeadGroup> groups;
  std::vector<std::tuple<int64_t, int64_t, Decay>> group_key;  // (window, M, decay)
  for (int64_t h = 0; h < int64_t(head_dims.size()); ++h) {
    const HeadType type = types.empty() ? map_head_type(o.window) : types[size_t(h)];
    if (type == HeadType::Softmax) continue;
    const std::tuple<int64_t, int64_t, Decay> key{type == HeadType::Hybrid ? o.window : 0, head_dims[size_t(h)],
                                                  decays.empty() ? o.decay : decays[size_t(h)]};
    size_t g = 0;
    while (g < group_key.size() && group_key[g] != key) ++g;
    if (g == group_key.size()) {
      group_key.push_back(key);
      groups.emplace_back();
    }
    groups[g].heads.push_back(h);
  }
  for (size_t g = 0; g < groups.size(); ++g)
    groups[g].maps = init_maps(o, layer, groups[g].heads, d, std::get<1>(group_key[g]), d_model, std::get<0>(group_key[g]),
                               std::get<2>(group_key[g]));
  return groups;
}

at::Tensor layer_head_param(const std::vector<HeadGroup>& layer, const char* name, int64_t n_heads) {
  std::vector<at::Tensor> parts;
  std::vector<int64_t> where(size_t(n_heads), -1);  // where[h]: head h's place in the concatenation (-1: none)
  int64_t at_ = 0;
  for (const auto& g : layer) {
    if (!g.maps.has_param(name)) continue;
    parts.push_back(g.maps.param(name));
    for (int64_t h : g.heads) {
      if (h < 0 || h >= n_heads) fail("distill", "a head group names head " + std::to_string(h) + " of a layer of " + std::to_string(n_heads));
      where[size_t(h)] = at_++;
    }
  }
  if (parts.empty()) return {};
  // A zero row after the groups' values stands for the heads without the parameter.
  const at::Tensor values = at::cat(parts);
  std::vector<int64_t> shape = values.sizes().vec();
  shape[0] = 1;
  for (int64_t& w : where)
    if (w < 0) w = at_;
  return at::cat({values, at::zeros(shape, values.options())}).index_select(0, at::tensor(where, at::kLong).to(values.device()));
}

at::Tensor fitted_decay_delta(const CaptureStore& capture, int layer) {
  const at::Tensor log_a = fit_decay_to_softmax(capture.layer_tensor(layer, "q"), capture.layer_tensor(layer, "k"),
                                                capture.sliding_window());
  at::Tensor delta = at::empty({log_a.size(0)}, at::kFloat);
  for (int64_t h = 0; h < log_a.size(0); ++h) delta[h] = delta_of_log_decay(log_a[h].item<double>());
  return delta;
}

at::Tensor initial_decay_delta(const std::vector<Decay>& decays, DecayInit init, const CaptureStore* capture, int layer) {
  if (std::all_of(decays.begin(), decays.end(), [](Decay d) { return d == Decay::None; })) return {};
  if (init == DecayInit::None) return at::full({int64_t(decays.size())}, kUndecayedDelta, at::kFloat);
  if (!capture) fail_value("decay initialization", "fit reads the head's attention from a capture: give one, or --decay-init none");
  return fitted_decay_delta(*capture, layer);
}

std::vector<std::vector<Decay>> head_decays_for(Decay choice, int64_t window, std::vector<std::vector<HeadType>>& types,
                                                const CaptureStore* capture, int n_layer, int n_head) {
  std::vector<std::vector<Decay>> out(size_t(n_layer), std::vector<Decay>(size_t(n_head), Decay::None));
  if (choice == Decay::Mixer && !capture)
    fail_value("decay", "mixer reads each head's attention from a capture (its mixer distances): give one, or one decay for every head");
  const bool windows = choice == Decay::Mixer && window > 0;  // each map head hybrid or linear, as its student says
  std::vector<std::vector<HeadType>> chosen =
      types.empty() ? std::vector<std::vector<HeadType>>(size_t(n_layer), std::vector<HeadType>(size_t(n_head), HeadType::Hybrid)) : types;
  for (int s = 0; s < n_layer; ++s) {
    at::Tensor q, k;
    if (choice == Decay::Mixer) q = capture->layer_tensor(s, "q"), k = capture->layer_tensor(s, "k");
    for (int h = 0; h < n_head; ++h) {
      if (!types.empty() && types[size_t(s)][size_t(h)] == HeadType::Softmax) continue;
      if (choice != Decay::Mixer) {
        out[size_t(s)][size_t(h)] = choice;
        continue;
      }
      AnalysisOptions opt;
      opt.mixer_state = kStudentMixerState;
      opt.window = window;
      const Student student =
          best_student(head_mixer_distances(q.select(1, h), k.select(1, h), capture->sliding_window(), opt));
      out[size_t(s)][size_t(h)] = student.decay;
      chosen[size_t(s)][size_t(h)] = student.window ? HeadType::Hybrid : HeadType::Linear;
    }
  }
  if (windows) types = chosen;
  return out;
}

void add_initial_decays(HeadFeatureMaps& maps, const std::vector<std::vector<Decay>>& decays, DecayInit init,
                        const CaptureStore* capture, int n_layer, int64_t n_head, int64_t d_model) {
  bool fixed = false, gated = false;
  for (int s = 0; s < n_layer; ++s)
    for (int64_t h = 0; h < n_head; ++h) {
      if (maps.type(s, h) == HeadType::Softmax) continue;
      const Decay d = decays[size_t(s)][size_t(h)];
      if (d == Decay::Mixer) fail_value("decay", "mixer must be resolved to each head's decay (head_decays_for) first");
      fixed = fixed || d == Decay::Fixed, gated = gated || d == Decay::Gated;
    }
  for (int s = 0; s < n_layer && (fixed || gated); ++s) {
    at::Tensor start = initial_decay_delta(decays[size_t(s)], init, capture, s);
    if (!start.defined()) start = at::full({n_head}, kUndecayedDelta, at::kFloat);  // a layer without decayed heads: not read
    if (fixed) maps.decay_delta.push_back(start);
    if (gated) {
      maps.decay_b.push_back(start);
      maps.decay_w.push_back(at::zeros({n_head, d_model}, at::kFloat));
    }
  }
  set_head_decays(maps, decays);
}

void set_layer_decay(std::vector<HeadGroup>& layer, const at::Tensor& delta) {
  at::NoGradGuard no_grad;
  for (HeadGroup& g : layer)
    for (auto& [name, t] : g.maps.params)
      if (name == kDecayParam || name == kGateBiasParam)
        for (size_t i = 0; i < g.heads.size(); ++i) t[int64_t(i)].fill_(delta[g.heads[i]].item<double>());
}

std::shared_ptr<HeadFeatureMaps> group_feature_maps(const std::vector<std::vector<HeadGroup>>& groups, bool copy,
                                                    const std::vector<std::vector<HeadType>>& types) {
  auto lin = std::make_shared<HeadFeatureMaps>();
  lin->types = types;
  bool gamma = false, delta = false, gate = false;  // whether any group has them: then every layer has them
  int64_t gate_width = 0;                             // the gates' w [H, width]
  for (const auto& layer : groups)
    for (const auto& g : layer) {
      lin->window = std::max(lin->window, g.maps.window);
      gamma = gamma || g.maps.has_param(kGammaParam);
      delta = delta || g.maps.has_param(kDecayParam);
      if (g.maps.has_param(kGateWeightParam)) gate = true, gate_width = g.maps.param(kGateWeightParam).size(1);
    }
  if (!types.empty() && types.size() != groups.size()) fail("distill", "head types for " + std::to_string(types.size()) + " layers, groups for " + std::to_string(groups.size()));
  std::vector<std::vector<Decay>> decays;  // [S][H]
  for (size_t s = 0; s < groups.size(); ++s) {
    const auto& layer = groups[s];
    int64_t n = 0;
    for (const auto& g : layer) n += int64_t(g.heads.size());
    if (!types.empty()) n = int64_t(types[s].size());
    std::vector<std::shared_ptr<FeatureMap>> heads(static_cast<size_t>(n));
    for (const auto& g : layer)
      for (size_t i = 0; i < g.heads.size(); ++i) {
        if (g.heads[i] < 0 || g.heads[i] >= n || heads[size_t(g.heads[i])])
          fail("distill", "head groups do not cover each head of a layer once");
        heads[size_t(g.heads[i])] = copy ? std::shared_ptr<FeatureMap>(g.maps.head_map(int64_t(i)))
                                         : g.maps.trainable_head_map(int64_t(i));
      }
    for (int64_t h = 0; h < n; ++h) {
      const bool softmax = !types.empty() && types[s][size_t(h)] == HeadType::Softmax;
      if (softmax != !heads[size_t(h)])
        fail("distill", "layer " + std::to_string(s) + " head " + std::to_string(h) +
                            (softmax ? " is a softmax head but has a map" : " has no map and is not a softmax head"));
    }
    lin->maps.push_back(std::move(heads));
    // Each head's decay, from its group's parameters (softmax heads none).
    std::vector<Decay> kinds(size_t(n), Decay::None);
    for (const auto& g : layer)
      for (int64_t h : g.heads)
        kinds[size_t(h)] = g.maps.has_param(kGateWeightParam) ? Decay::Gated : g.maps.has_param(kDecayParam) ? Decay::Fixed : Decay::None;
    decays.push_back(kinds);
    // Differentiable unless copied: direct training reaches gamma and the decays. A layer without
    // any head that has it (every head softmax) gets zeros.
    const auto param = [&](const char* name, std::vector<int64_t> shape) {
      at::Tensor t = layer_head_param(layer, name, n);
      if (!t.defined()) {
        shape.insert(shape.begin(), n);
        return at::zeros(shape, at::kFloat);
      }
      return copy ? t.detach().to(at::kCPU, at::kFloat).clone() : t;
    };
    if (gamma) lin->gamma.push_back(param(kGammaParam, {}));
    if (delta) lin->decay_delta.push_back(param(kDecayParam, {}));
    if (gate) {
      lin->decay_w.push_back(param(kGateWeightParam, {gate_width}));
      lin->decay_b.push_back(param(kGateBiasParam, {}));
    }
  }
  set_head_decays(*lin, std::move(decays));
  return lin;
}

at::Tensor direct_loss(const Model& model, const at::Tensor& ids) {
  if (ids.dim() != 2 || ids.size(1) < 2) fail("distill", "direct loss needs windows ids [B, L] with L >= 2");
  const int64_t L = ids.size(1);
  const at::Tensor logits = model.forward(ids);  // [B, L, V]
  return at::cross_entropy_loss(logits.narrow(1, 0, L - 1).reshape({-1, logits.size(-1)}),
                                ids.narrow(1, 1, L - 1).reshape({-1}));
}

namespace {

// layer_loss, and (loss output) the outputs it compares when `outputs` is given.
at::Tensor layer_loss_and_outputs(const LayerMaps& m, const at::Tensor& q, const at::Tensor& k, DistillLoss loss,
                                  const at::Tensor& pairs, const at::Tensor& v, const at::Tensor& x, LayerOutputs* outputs) {
  if (loss == DistillLoss::Direct) fail("distill", "direct is not a layerwise loss");
  if (loss == DistillLoss::Block) fail("distill", "block compares a whole layer's output: block_loss, not layer_loss");
  if (loss == DistillLoss::Output && (!v.defined() || v.dim() != 4 || v.size(2) != q.size(2)))
    fail("distill", "the output loss needs the values v [B, H, L, d_v]");
  const int64_t L = q.size(2);
  const at::Tensor causal = causal_mask(L, q.device());
  const at::Tensor scores = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(m.d));
  const double ninf = -std::numeric_limits<double>::infinity();
  const at::Tensor masked = scores.masked_fill(causal.logical_not(), ninf);
  // The target A: the softmax the model ran, within its sliding window (m.softmax_window, Mistral)
  // when it has one; Ahat reads every key j <= i (a converted head has no window; a hybrid's own,
  // m.window, is part of Ahat). A is 0 on the keys it does not see: their terms are 0 (0 log 0).
  // The l2 loss fits kernel values exp(q_i.k_j / sqrt d) on sampled pairs, not A's weights: those
  // are what the linear head reads for every key, so it ignores the window (its row scale c is
  // over every key j <= i).
  const at::Tensor seen = causal_mask(L, q.device(), m.softmax_window);
  // log A, formed only by the losses that read it (l2 stays without an L x L softmax).
  const auto target_log_a = [&] { return at::log_softmax(scores.masked_fill(seen.logical_not(), ninf), -1); };
  const MapFeatures form = map_family(m.map).features;
  // Decayed heads (SPEC 5, head.h): Lambda on the features' log scales, queries + Lambda_i and keys
  // - Lambda_j (the l2 loss is refused with decay: check_distill_options); [H, L, 1] for a fixed
  // decay, [B, H, L, 1] for a gated one (from the layer's inputs x).
  const bool gated = m.has_param(kGateWeightParam), decayed = gated || m.has_param(kDecayParam);
  if (gated && (!x.defined() || x.dim() != 3 || x.size(0) != q.size(0) || x.size(1) != L))
    fail("distill", "gated decays need the layer's inputs x [B, L, D]");
  const at::Tensor lambda =
      gated     ? gated_decay_lambda(x, m.param(kGateWeightParam), m.param(kGateBiasParam)).to(q.scalar_type()).unsqueeze(-1)
      : decayed ? fixed_decay_lambda(m.param(kDecayParam), L).to(q.scalar_type()).unsqueeze(-1)
                : at::Tensor();
  if (decayed && loss == DistillLoss::L2) fail_value("decay", "the l2 loss does not train decayed heads");
  if (form == MapFeatures::Signed) {
    auto [vq, lsq] = stacked_fourier_features(m, q);
    auto [vk, lsk] = stacked_fourier_features(m, k);
    if (decayed) lsq = lsq + lambda.squeeze(-1), lsk = lsk - lambda.squeeze(-1);
    const at::Tensor kv = at::relu(at::matmul(vq, vk.transpose(-1, -2)));  // clamped at 0: SPEC 5
    if (loss == DistillLoss::L2) {
      if (!pairs.defined() || pairs.numel() == 0) fail("distill", "l2 needs sampled pairs");
      const at::Tensor i = pairs.select(1, 0).contiguous(), j = pairs.select(1, 1).contiguous();
      const at::Tensor c = std::get<0>(masked.max(-1)).index_select(-1, i);  // [B, H, P]
      const at::Tensor s_ij = (q.index_select(2, i) * k.index_select(2, j)).sum(-1) / std::sqrt(double(m.d));
      const at::Tensor v_ij = at::relu((vq.index_select(2, i) * vk.index_select(2, j)).sum(-1));
      const at::Tensor log_scale = lsq.index_select(-1, i) + lsk.index_select(-1, j) - c;
      return (v_ij * at::exp(log_scale.clamp_max(30.0)) - at::exp(s_ij - c)).pow(2).mean();
    }
    // exp(ls_j - max_{j' <= i} ls_j'): at most 1 on j <= i, and -inf (0) above the diagonal.
    const at::Tensor run_max = std::get<0>(at::cummax(lsk, -1)).detach();  // [B, H, L]
    const at::Tensor rel = (lsk.unsqueeze(-2) - run_max.unsqueeze(-1)).masked_fill(causal.logical_not(), ninf);
    const at::Tensor khat = (kv * at::exp(rel)).masked_fill(causal.logical_not(), 0.0);
    return relu_row_loss(khat, target_log_a(), seen, loss, v, outputs);
  }
  // log Khat_ij, the features' scales included: the linear part of the head's log weights.
  at::Tensor log_khat;
  if (form == MapFeatures::NonNegative) {
    const at::Tensor pq = stacked_relu_features(m, q, MapSide::Query), pk = stacked_relu_features(m, k, MapSide::Key);
    if (loss == DistillLoss::L2) {
      if (!pairs.defined() || pairs.numel() == 0) fail("distill", "l2 needs sampled pairs");
      const at::Tensor i = pairs.select(1, 0).contiguous(), j = pairs.select(1, 1).contiguous();
      const at::Tensor c = std::get<0>(masked.max(-1)).index_select(-1, i);  // [B, H, P]
      const at::Tensor s_ij = (q.index_select(2, i) * k.index_select(2, j)).sum(-1) / std::sqrt(double(m.d));
      const at::Tensor khat = (pq.index_select(2, i) * pk.index_select(2, j)).sum(-1);
      // Khat exp(-c): exp(-c) capped at e^80 so that a row with a very negative maximum stays finite.
      return (khat * at::exp((-c).clamp_max(80.0)) - at::exp(s_ij - c)).pow(2).mean();
    }
    at::Tensor khat = at::matmul(pq, pk.transpose(-1, -2));
    if (decayed)  // exp(Lambda_i - Lambda_j) <= 1 on j <= i: no overflow
      khat = khat * at::exp((lambda - lambda.transpose(-1, -2)).masked_fill(causal.logical_not(), -INFINITY));
    if (m.window == 0) return relu_row_loss(khat.masked_fill(causal.logical_not(), 0.0), target_log_a(), seen, loss, v, outputs);
    // A hybrid head's rows are all defined (key i is in its own window); a kernel value of 0 has its
    // log floored at log(1e-30), as log_kernel's (no gradient through it, as through the ReLU).
    log_khat = at::log(khat.clamp_min(1e-30));
  } else {
    at::Tensor lq = stacked_log_features(m, q, MapSide::Query), lk = stacked_log_features(m, k, MapSide::Key);
    if (decayed) lq = lq + lambda, lk = lk - lambda;
    if (loss == DistillLoss::L2) {
      // Only the sampled pairs: log Khat_ij = logsumexp_m(lq_im + lk_jm) on [B, H, P, M], no L x L.
      if (!pairs.defined() || pairs.numel() == 0) fail("distill", "l2 needs sampled pairs");
      const at::Tensor i = pairs.select(1, 0).contiguous(), j = pairs.select(1, 1).contiguous();
      const at::Tensor c = std::get<0>(masked.max(-1)).index_select(-1, i);  // [B, H, P]
      const at::Tensor s_ij = (q.index_select(2, i) * k.index_select(2, j)).sum(-1) / std::sqrt(double(m.d));
      const at::Tensor log_kij = at::logsumexp(lq.index_select(2, i) + lk.index_select(2, j), -1);
      const at::Tensor target = at::exp(s_ij - c);
      // exp of at most 30 above the row's softmax maximum: a diverging pair still has a gradient.
      const at::Tensor approx = at::exp((log_kij - c).clamp_max(30.0));
      return (approx - target).pow(2).mean();
    }
    log_khat = log_kernel(lq, lk);
  }
  // The head's log weights (head.h): with a window (hybrid heads, SPEC 5) softmax's own weights on
  // the last W keys beside the map's, balanced by g = sigmoid(gamma).
  const at::Tensor pos = at::arange(L, q.options().dtype(at::kLong));
  const at::Tensor gamma = m.window > 0 ? m.param(kGammaParam) : at::Tensor();
  const at::Tensor log_a = target_log_a();
  const at::Tensor log_ahat = at::log_softmax(head_log_weights({scores, log_khat, key_lag(pos, pos), m.window, gamma}), -1);
  const at::Tensor a = log_a.exp();
  if (loss == DistillLoss::Output) {  // LoLCATs' attention transfer: mean over rows and d_v of (A V - Ahat V)^2
    const at::Tensor y = at::matmul(a, v), y_hat = at::matmul(log_ahat.exp(), v);
    if (outputs) *outputs = {y, y_hat};
    return (y - y_hat).pow(2).mean();
  }
  at::Tensor per_entry;
  if (loss == DistillLoss::Kl) per_entry = a * (log_a - log_ahat);
  else if (loss == DistillLoss::Softmax) per_entry = -a * log_ahat;
  // Entries A does not see are 0 * (-inf - ...) = NaN: zero them explicitly.
  return per_entry.masked_fill(seen.logical_not(), 0.0).sum(-1).mean();
}

}  // namespace

at::Tensor layer_loss(const LayerMaps& m, const at::Tensor& q, const at::Tensor& k, DistillLoss loss,
                      const at::Tensor& pairs, const at::Tensor& v, const at::Tensor& x) {
  return layer_loss_and_outputs(m, q, k, loss, pairs, v, x, nullptr);
}

LayerOutputs layer_outputs(const LayerMaps& m, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& x) {
  LayerOutputs out;
  layer_loss_and_outputs(m, q, k, DistillLoss::Output, {}, v, x, &out);
  return out;
}

at::Tensor block_loss(const Model& model, int layer, const at::Tensor& resid, const LayerOutputs& heads) {
  // In float32 at least (a bfloat16 model's outputs are widened; a float64 one's stay).
  const auto wide = [](const at::Tensor& t) { return t.scalar_type() == at::kDouble ? t : t.to(at::kFloat); };
  at::Tensor target;
  {
    at::NoGradGuard no_grad;
    target = wide(model.layer_output(layer, resid, heads.y));
  }
  return (wide(model.layer_output(layer, resid, heads.y_hat)) - target).pow(2).mean();
}

double layer_kl(const LayerMaps& m, const at::Tensor& q, const at::Tensor& k, const at::Tensor& x) {
  at::NoGradGuard no_grad;
  return layer_loss(m, q, k, DistillLoss::Kl, {}, {}, x).item<double>();
}

}  // namespace attnscope
