// Reading a converted model (SPEC 7): its "attnscope" object and the feature map of every head.
// Fresh maps for untrained baselines are made here too, so writer and reader share one
// description of a head's map (the FeatureMapSpec below).
#include "attnscope/formats/converted_model.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"
#include "attnscope/attention/feature_map_tensors.h"
#include "attnscope/base/random.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/formats/source_weights.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace convert {

nlohmann::json read_config(const std::string& dir) {
  const fs::path p = fs::path(dir) / "config.json";
  std::ifstream in(p);
  if (!in) fail(p.string(), "cannot be read");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail(p.string(), std::string("is not valid JSON: ") + e.what());
  }
}

std::string tensor_prefix(int s, int h) {
  return "layers." + std::to_string(s) + ".heads." + std::to_string(h) + ".feature_map.";
}

std::string gamma_name(int s, int h) { return "layers." + std::to_string(s) + ".heads." + std::to_string(h) + ".gamma"; }
std::string decay_delta_name(int s, int h) { return "layers." + std::to_string(s) + ".heads." + std::to_string(h) + ".decay.delta"; }
std::string decay_w_name(int s, int h) { return "layers." + std::to_string(s) + ".heads." + std::to_string(h) + ".decay.w"; }
std::string decay_b_name(int s, int h) { return "layers." + std::to_string(s) + ".heads." + std::to_string(h) + ".decay.b"; }

}  // namespace convert

bool is_converted_model(const std::string& dir) {
  const fs::path p = fs::path(dir) / "config.json";
  if (!fs::is_regular_file(p)) return false;
  const nlohmann::json j = convert::read_config(dir);
  return j.is_object() && j.contains("attnscope");
}

std::string converted_weights_dir(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "model.safetensors") || fs::exists(fs::path(dir) / "model.safetensors.index.json"))
    return dir;
  const nlohmann::json j = convert::read_config(dir);
  const std::string cfg = (fs::path(dir) / "config.json").string();
  const auto& a = j.at("attnscope");
  if (!a.contains("source") || !a["source"].contains("path") || !a["source"]["path"].is_string())
    fail(cfg, "has no model.safetensors beside it and no attnscope.source.path to the original weights");
  return convert::check_source_weights(a["source"], cfg);
}

std::shared_ptr<HeadFeatureMaps> read_feature_maps(const std::string& file, const ConvertedHeader& hdr, int n_layer, int n_head,
                                                   int64_t head_dim, int64_t d_model) {
  const int64_t window = hdr.window;
  const auto& dims = hdr.dims;
  if (!fs::exists(file)) fail(file, "is missing: it should hold every head's feature map");
  if (int(dims.size()) != n_layer) fail(file, "dims list " + std::to_string(dims.size()) + " layers, the model has " + std::to_string(n_layer));
  check_head_types(hdr.types, n_layer, n_head, window, file);
  SafetensorsFile st(file);
  auto lin = std::make_shared<HeadFeatureMaps>();
  lin->window = window;
  lin->types = hdr.types;
  lin->decays = hdr.decays;
  lin->maps.resize(n_layer);
  // Each map head's decay: its entry in head_decays, else the model's one "decay".
  const auto decay_of = [&](int s, int h) {
    if (lin->type(s, h) == HeadType::Softmax) return Decay::None;
    return hdr.decays.empty() ? hdr.decay : hdr.decays[size_t(s)][size_t(h)];
  };
  bool fixed = false, gated = false;
  for (int s = 0; s < n_layer; ++s)
    for (int h = 0; h < n_head; ++h) fixed = fixed || decay_of(s, h) == Decay::Fixed, gated = gated || decay_of(s, h) == Decay::Gated;
  if (gated && d_model < 1) fail(file, "gated heads need the model's width to be read");
  size_t used = 0;
  for (int s = 0; s < n_layer; ++s) {
    if (int(dims[s].size()) != n_head) fail(file, "dims of layer " + std::to_string(s) + " do not list " + std::to_string(n_head) + " heads");
    for (int h = 0; h < n_head; ++h) {
      const std::string prefix = convert::tensor_prefix(s, h);
      std::map<std::string, at::Tensor> tensors;
      for (const auto& e : st.entries())
        if (e.name.rfind(prefix, 0) == 0) tensors[e.name.substr(prefix.size())] = st.tensor(e.name);
      used += tensors.size();
      if (lin->type(s, h) == HeadType::Softmax) {
        if (!tensors.empty()) fail(file, "layer " + std::to_string(s) + " head " + std::to_string(h) + " is a softmax head but has feature-map tensors");
        lin->maps[s].push_back(nullptr);
        continue;
      }
      const FeatureMapSpec hs = head_map_spec(hdr.map, head_dim, dims[s][h]);
      auto map = feature_map_from_tensors(hs, tensors, file + " (layer " + std::to_string(s) + " head " + std::to_string(h) + ")");
      if (map->feature_dim() != dims[s][h])
        fail(file, "layer " + std::to_string(s) + " head " + std::to_string(h) + " has " +
                       std::to_string(map->feature_dim()) + " features, the dims say " + std::to_string(dims[s][h]));
      lin->maps[s].push_back(std::shared_ptr<FeatureMap>(std::move(map)));
    }
  }
  // Each head's tensor `name_of(s, h)`, stacked per layer, for the heads of the types `uses` takes
  // (the others' entries are 0 and not read): one finite number ([H] float32 per layer: hybrid
  // heads' balances, fixed decays' deltas, gates' biases), or with width > 0 a vector of that many
  // ([H, width]: gates' weights).
  auto per_head = [&](std::string (*name_of)(int, int), const std::string& needs, const std::function<bool(int, int)>& uses,
                      int64_t width = 0) {
    std::vector<at::Tensor> layers;
    for (int s = 0; s < n_layer; ++s) {
      at::Tensor g = width > 0 ? at::zeros({n_head, width}, at::kFloat) : at::zeros({n_head}, at::kFloat);
      for (int h = 0; h < n_head; ++h) {
        if (!uses(s, h)) continue;
        const std::string name = name_of(s, h);
        if (!st.contains(name)) fail(file, "has no " + name + ": " + needs);
        const at::Tensor t = st.tensor(name);
        if (width > 0) {
          if (t.dim() != 1 || t.size(0) != width || !at::isfinite(t).all().item<bool>())
            fail(file, name + " must be " + std::to_string(width) + " finite numbers (the model's width)");
          g[h] = t.to(at::kFloat);
        } else {
          if (t.numel() != 1 || t.dim() > 1 || !at::isfinite(t).all().item<bool>())
            fail(file, name + " must be one finite number, got shape " + std::to_string(t.dim()) + "-d with " +
                           std::to_string(t.numel()) + " values");
          g[h] = t.reshape({}).to(at::kFloat);
        }
        ++used;
      }
      layers.push_back(g);
    }
    return layers;
  };
  const auto hybrid = [&](int s, int h) { return lin->type(s, h) == HeadType::Hybrid; };
  const auto is_fixed = [&](int s, int h) { return decay_of(s, h) == Decay::Fixed; };
  const auto is_gated = [&](int s, int h) { return decay_of(s, h) == Decay::Gated; };
  if (window > 0) lin->gamma = per_head(convert::gamma_name, "a hybrid head (window " + std::to_string(window) + ") needs its balance", hybrid);
  if (fixed) lin->decay_delta = per_head(convert::decay_delta_name, "a head with fixed decay needs its delta", is_fixed);
  if (gated) {
    lin->decay_b = per_head(convert::decay_b_name, "a gated head needs its gate's bias b", is_gated);
    lin->decay_w = per_head(convert::decay_w_name, "a gated head needs its gate's weights w", is_gated, d_model);
  }
  if (used != st.entries().size()) {
    std::string own = "feature_map.*";
    if (window > 0) own += ", gamma";
    if (fixed) own += ", decay.delta";
    if (gated) own += ", decay.w, decay.b";
    if (own.find(',') != std::string::npos) own = "{" + own + "}";
    fail(file, "holds " + std::to_string(st.entries().size() - used) + " tensors outside layers.{0.." +
                   std::to_string(n_layer - 1) + "}.heads.{0.." + std::to_string(n_head - 1) + "}." + own +
                   " (gamma belongs to hybrid heads, decay.delta to heads whose decay is fixed, decay.w and decay.b "
                   "to gated ones (\"decay\" or \"head_decays\"); a softmax head has none)");
  }
  return lin;
}

std::shared_ptr<HeadFeatureMaps> load_head_feature_maps(const std::string& dir, int n_layer, int n_head, int64_t head_dim,
                                                        int64_t d_model) {
  const std::string cfg = (fs::path(dir) / "config.json").string();
  const ConvertedHeader hdr = convert::parse_header(convert::read_config(dir), cfg, n_layer, n_head);
  auto maps = read_feature_maps((fs::path(dir) / "feature_maps.safetensors").string(), hdr, n_layer, n_head, head_dim, d_model);
  maps->trained_length = hdr.trained_length;
  return maps;
}

}  // namespace attnscope
