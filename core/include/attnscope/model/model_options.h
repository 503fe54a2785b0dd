// The options of the commands that run a model as it is (info, logits, generate) and of the model
// every other command loads: --model, --tokenizer and --dtype, one table (options.h) that the
// command tables nest.
#pragma once
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/device.h"
#include "attnscope/base/options.h"

namespace attnscope {

struct LoadedModel;

struct ModelOptions {
  std::string model;      // anything load_model accepts; "" = the front end's default (the bundled model)
  std::string tokenizer;  // "" = the model's own
  std::optional<at::ScalarType> compute;  // --dtype (compute_dtype.h); unset: f32 on the CPU, bf16 on CUDA
};
// --model, --tokenizer, --dtype.
const OptionTable<ModelOptions>& model_option_table();
// --model, --tokenizer: for what reads the model's headers only (info) or computes in float32 (gui).
const OptionTable<ModelOptions>& model_source_option_table();
// The model, its tokenizer, computing in o.compute (else the device's default).
LoadedModel load_model(const ModelOptions& o, Device device = Device::Cpu);

// `attnscope logits`: the logits of a text or of explicit token ids.
struct LogitsOptions {
  ModelOptions model;
  std::string text;  // tokenized as the model expects
  std::string ids;   // "3,17,5", used verbatim (no BOS); exclusive with text
};
const OptionTable<LogitsOptions>& logits_option_table();

// `attnscope generate`: greedy decoding.
struct GenerateOptions {
  ModelOptions model;
  std::string prompt;
  std::string prompts;     // a file of prompts, one per line: decoded as one batch (exclusive with prompt)
  int64_t steps = 0;       // tokens in the output, prompt included (llama2.c's -n); 0: not given
  int64_t new_tokens = 0;  // tokens after the prompt; 0: not given (exclusive with steps)
  static constexpr int64_t kDefaultSteps = 256;  // when neither is given
};
const OptionTable<GenerateOptions>& generate_option_table();

}  // namespace attnscope
