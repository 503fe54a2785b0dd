// The options of `attnscope convert` and `attnscope eval`: the catalogue's definitions
// (option_defs.h) bound to their fields, for the CLI and the workbench's command lines.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/base/options.h"
#include "attnscope/convert/converted_eval.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/model/model_options.h"

namespace attnscope {

// `attnscope convert`: a finished distillation run's trained maps (job), or untrained maps
// (convert.map) of one M for every head (features) or an allocation file's dims and head types.
struct ConvertCommand {
  ModelOptions model;  // with a job: "" = the job's model
  std::string job;
  ConvertOptions convert;  // its map (name, seed, init, activation, tied, temperature) and window
  int64_t features = 0;    // 0: not given
  std::string allocation;
  std::string weights = "copy";  // copy | reference (ConvertOptions::copy_weights)
  // Untrained decayed heads (SPEC 5) where training would start them: fit reads each head's decay
  // from `capture` (a capture of this model), none starts every head without decay.
  Decay decay = Decay::None;
  DecayInit decay_init = DecayInit::Fit;
  std::string capture;
};
// The map rows are written back only without a job (they are the job's then).
const OptionTable<ConvertCommand>& convert_command_option_table();

// `attnscope eval`: the loss of a model on a text at one or more window lengths; on a converted
// model also the comparison with its original (ConvertedEvalOptions).
struct EvalOptions {
  ModelOptions model;
  std::vector<std::string> texts;
  std::vector<int> seq_lens;  // empty: the context length
  std::string original;       // converted models: the model they were made from ("": their weights with softmax)
  ConvertedEvalOptions converted;
};
const OptionTable<EvalOptions>& eval_option_table();

}  // namespace attnscope
