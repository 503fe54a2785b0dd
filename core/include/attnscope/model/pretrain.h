// `attnscope pretrain`: trains the small GPT-2 model bundled with attnscope (and any other of that
// shape) from plain text: first a byte-level BPE tokenizer, then the model with AdamW.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnscope/base/options.h"
#include "attnscope/base/progress.h"

namespace attnscope {

struct ModelConfig;
struct ModelWeights;

// A GPT-2 model's config of this shape: learned positions, GELU (tanh), d_ff = 4 d_model, tied
// embeddings, biases everywhere; head dimension d_model / n_head.
ModelConfig gpt2_config(int n_layer, int n_head, int d_model, int vocab_size, int n_ctx);

// GPT-2's initialization: N(0, 0.02), residual output projections scaled by 1/sqrt(2 n_layer),
// norms at 1 and 0, drawn from a generator seeded with `seed`. Also the random-weight models of
// `attnscope bench` (speed does not depend on the weights).
ModelWeights init_gpt2_weights(const ModelConfig& c, uint64_t seed);

struct PretrainOptions {
  int vocab_size = 4096;
  int n_layer = 4;
  int n_head = 4;
  int d_model = 128;  // head dim = d_model / n_head
  int n_ctx = 256;
  int steps = 1200;
  int batch = 16;  // sequences of n_ctx tokens per step
  double lr = 3e-3;
  int warmup = 100;
  double weight_decay = 0.1;
  double heldout_fraction = 0.03;  // the corpus tail, never trained on
  int eval_every = 100;
  uint64_t seed = 0;
};

// `attnscope pretrain`: the text and the options. Its table (pretrain_options.cpp): --text, --vocab,
// --layers, --heads, --d-model, --context, --steps, --batch, --lr, --eval-every, --seed.
struct PretrainCommand {
  std::vector<std::string> texts;
  PretrainOptions pretrain;
};
const OptionTable<PretrainCommand>& pretrain_option_table();

struct PretrainReport {
  int64_t train_tokens = 0, heldout_tokens = 0;
  double unigram_heldout_loss = 0;  // baseline: train-set token frequencies (add-one)
  double final_heldout_loss = 0;
  double seconds = 0;
  struct Point {
    int step;
    double train_loss, heldout_loss, lr;
  };
  std::vector<Point> curve;  // every eval_every steps
};

// Trains and writes `out_dir` (config.json, model.safetensors, tokenizer.json, training.json)
// through a temporary directory renamed at the end. `log` receives one line per evaluation.
PretrainReport pretrain_gpt2(const std::string& corpus, const PretrainOptions& opt, const std::string& out_dir,
                             const ProgressFn& progress = nullptr,
                             const std::function<void(const std::string&)>& log = nullptr);

}  // namespace attnscope
