// Converting a finished distillation run (`attnscope convert --job RUN`, the workbench's Convert):
// the run's job.json names the model, the map and the dimensions, and its
// feature_maps.safetensors holds the trained maps.
#pragma once
#include <string>

#include "attnscope/convert/converted_model.h"

namespace attnscope {

struct ModelConfig;

// The model the run trained on (job.json "model"). Throws Error naming RUN when it is no run
// directory, has not finished (no report.json), or job.json names no model.
std::string distill_run_model(const std::string& run);

// ConvertOptions for `run` on a model of shape `config`: the map and dims of job.json, strategy,
// lambda and budget from its allocation file when there is one, loss, steps, the job itself, and
// the trained maps. python_module and copy_weights are left for the caller. Throws Error naming the
// file and the problem.
ConvertOptions distill_run_convert_options(const std::string& run, const ModelConfig& config);

}  // namespace attnscope
