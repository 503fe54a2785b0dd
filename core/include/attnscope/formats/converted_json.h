// The "attnscope" object of a converted model's config.json (SPEC 7), shared by the writer
// (convert_model.cpp) and the reader (converted_model.cpp).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/head.h"

namespace attnscope {

struct ConvertedHeader {
  FeatureMapSpec map;                      // name, activation, tied, seed, init, temperature
  std::vector<std::vector<int64_t>> dims;  // [S][H], expanded from per-layer dims
  int64_t trained_length = 0;              // "trained_length", 0 when absent
  int64_t window = 0;                      // "window": hybrid heads; 0 when absent (plain linear)
  Decay decay = Decay::None;               // "decay": SPEC 5's decayed heads, fixed or gated; none when absent
  // "head_decays" [S][H] (a model that mixes none, fixed and gated heads; then no "decay"); empty when absent.
  std::vector<std::vector<Decay>> decays;
  // "head_types" [S][H] (mixed types, SPEC 7); empty when absent (every head as "window" says). A
  // softmax head's dims entry is 0: it has no map.
  std::vector<std::vector<HeadType>> types;
};

namespace convert {

nlohmann::json read_config(const std::string& dir);  // DIR/config.json; Error naming it
std::string tensor_prefix(int s, int h);  // "layers.{s}.heads.{h}.feature_map."
std::string gamma_name(int s, int h);     // "layers.{s}.heads.{h}.gamma"
std::string decay_delta_name(int s, int h);  // "layers.{s}.heads.{h}.decay.delta"
std::string decay_w_name(int s, int h);      // "layers.{s}.heads.{h}.decay.w" (gated)
std::string decay_b_name(int s, int h);      // "layers.{s}.heads.{h}.decay.b" (gated)

// The "feature_map" object and dims from the maps' spec and per-head sizes.
nlohmann::ordered_json feature_map_json(const FeatureMapSpec& spec);
// Parses and checks config.json's "attnscope" object against the model's layers and heads.
ConvertedHeader parse_header(const nlohmann::json& config, const std::string& file, int n_layer, int n_head);

}  // namespace convert
}  // namespace attnscope
