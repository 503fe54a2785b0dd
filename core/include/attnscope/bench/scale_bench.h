// `attnscope bench scale`: random-weight checkpoints with the exact shapes of real models, in Hugging
// Face layout and their published stored dtype, to measure what opening, capturing and analysing a
// model of that size costs (time and peak resident memory; docs/PERFORMANCE.md). The weights are
// random: these checkpoints measure cost, never quality.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/base/options.h"
#include "attnscope/base/progress.h"

namespace attnscope {

struct ModelConfig;

enum class ModelShape { Gpt2Small, Llama32_1B, Llama3_8B };

// "gpt2-small", "llama-3.2-1b", "llama-3-8b" (one table).
ModelShape parse_model_shape(const std::string& name);
const char* model_shape_name(ModelShape s);
std::vector<std::string> model_shape_names();
// The shape's config as Hugging Face publishes it (write_shaped_checkpoint's config.json), parsed.
ModelConfig model_shape_config(ModelShape s);

struct ShapedCheckpoint {
  std::string dir;               // the model directory written
  int64_t weight_bytes = 0;      // tensor data in the safetensors files
  int64_t parameters = 0;
  int shards = 0;                // 1: model.safetensors; more: model-0000i-of-0000n + index
  std::string dtype;             // "F32" or "BF16", as the published checkpoint stores it
};

// Writes a checkpoint of `shape` into `dir` (replaced whole, OutputDir), streaming each tensor in
// blocks so memory stays small whatever the size: config.json as Hugging Face publishes it (Llama 3.x
// without its rope_scaling, which attnscope does not run yet: it changes no cost), tensors
// ~ N(0, 0.02^2) with norm weights 1 and biases 0 from `seed`, sharded at ~5 GB as the Hub does, and
// `tokenizer_json` copied beside it (any tokenizer whose vocabulary fits the model's; "": none, for
// code that reads only the weights, e.g. bench generate).
ShapedCheckpoint write_shaped_checkpoint(ModelShape shape, const std::string& dir, const std::string& tokenizer_json,
                                         uint64_t seed = 0, const ProgressFn& progress = nullptr);

// What `attnscope bench scale` runs on each checkpoint (its children are attnscope's own commands):
// info, capture, spectra, metrics, distill, eval.
std::vector<std::string> scale_bench_step_names();

struct ScaleBenchOptions {
  std::vector<std::string> shapes{"gpt2-small", "llama-3.2-1b"};  // model_shape_names()
  std::vector<std::string> steps = scale_bench_step_names();
  std::string dir;                // checkpoints and outputs (required)
  int seq_len = 0, num_seqs = 0;  // 0: per shape (gpt2-small 1024 x 8, Llama 256 x 2)
  int eval_chars = 2000;          // eval reads this many characters of the sample text
  double timeout = 1800;          // seconds before a step is stopped
  bool reuse = false;             // keep a checkpoint already in dir
};
// Every option of `attnscope bench scale` (bench_options.cpp).
const OptionTable<ScaleBenchOptions>& scale_bench_option_table();

}  // namespace attnscope
