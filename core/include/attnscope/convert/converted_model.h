// Converted models (SPEC 7): a model directory whose attention layers run as causal linear
// attention with one feature map per head. `convert_model` writes one (the reader is
// formats/converted_model.h); load_model (model.h)
// recognizes the "attnscope" object in its config.json and loads it as linear attention.
//
//   OUT/config.json               the original config.json plus "attnscope": {format_version 1,
//                                 feature_map {name, activation, tied, seed, ...}, dims, strategy,
//                                 lambda, budget, loss, steps, source {path, sha256, files}, job}
//   OUT/model.safetensors         the original weights (absent with weights = reference: then
//                                 source.path is the original model directory, and source.files
//                                 the name, size and mtime_ns of each file the sha256 covers)
//   OUT/feature_maps.safetensors  layers.{s}.heads.{h}.feature_map.{param}, float32: every tensor of
//                                 each head's map (feature_map_tensors.h), random draws included
//   OUT/tokenizer files, OUT/attnscope_linear.py, OUT/README.md
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/base/progress.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/formats/converted_model.h"
#include "attnscope/attention/head_feature_maps.h"

namespace attnscope {

class Model;
struct LoadedModel;
struct ModelConfig;
struct ModelWeights;

struct ConvertOptions {
  FeatureMapSpec map;                       // name, activation, tied, init, temperature, seed
  std::vector<std::vector<int64_t>> dims;   // [S][H]; the "dims" written is per layer when all heads agree
  std::string strategy = "fix";
  double lambda = 0;
  int64_t budget = 0;
  std::string loss;                         // "" for untrained maps (written as null)
  int64_t steps = 0;
  int64_t trained_length = 0;               // tokens per window the maps were trained on (0: untrained)
  int64_t window = 0;                       // untrained maps only: hybrid heads with this window (trained maps carry their own)
  std::vector<std::vector<HeadType>> types;  // untrained maps only: mixed head types [S][H] (empty: as the window says)
  std::string job_json;                     // the job's job.json text, "" for untrained maps
  bool copy_weights = true;                 // false: --weights reference
  std::string python_module;                // attnscope_linear.py to copy into OUT (required)
  // Trained maps (from a distillation job); null: make_head_feature_maps(map, dims).
  std::shared_ptr<const HeadFeatureMaps> maps;
  // Finetuned weights (stage 2): written as OUT/model.safetensors (the source checkpoint's tensors
  // with these attention projections) instead of copying or referencing the original's. `original`
  // is then the converted model they were finetuned from.
  std::shared_ptr<const ModelWeights> weights;
  int64_t finetune_rank = 0, finetune_steps = 0;  // the attnscope object's "finetune" (0: none)
};

// Writes the converted model of `original` (loaded from a Hugging Face directory) to `out` through
// OutputDir: nothing appears at `out` unless everything was written. Throws Error.
void convert_model(const LoadedModel& original, const ConvertOptions& options, const std::string& out);

// Copies the model folder `model` (a converted model, or a run directory's RUN/model link to one:
// the link is followed) to `out` through OutputDir, every file byte for byte, so a model kept in
// the workspace (pruned after 14 days) can be kept elsewhere. Error naming `model` when it is not
// a model folder (no config.json), or the file that could not be copied; `out` is left as it was.
void save_model_copy(const std::string& model, const std::string& out, const ProgressFn& progress = nullptr);

}  // namespace attnscope
