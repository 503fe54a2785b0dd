// The catalogue: every option of every attnscope command, defined once (options.h). A command's
// option table binds these to its options struct; nothing else spells a flag, its help or its
// range. A quantity has one flag everywhere (tests/test_options.cpp checks every table).
#pragma once
#include <cstdint>

#include "attnscope/base/options.h"

namespace attnscope::opt {

// Limits of the numbers a job takes: far above any useful value, low enough that nothing
// overflows or asks for more memory than a machine has.
inline constexpr int64_t kMaxSteps = 1000000000;
inline constexpr int64_t kMaxBatch = 1 << 16;
inline constexpr int64_t kMaxPairs = 1 << 24;
inline constexpr int64_t kMaxSamples = 1 << 20;
inline constexpr int64_t kMaxTokens = 1 << 20;     // a sequence length, a window
inline constexpr int64_t kMaxWindows = 1 << 20;    // windows of a text
inline constexpr int64_t kMaxFeatures = 16384;     // kMaxFeatureDim (attention/feature_map.h)
inline constexpr int64_t kMaxRank = 4096;
inline constexpr double kMaxLr = 1e3;
inline constexpr int64_t kMaxIndex = 1 << 20;     // a layer or head number
inline constexpr int64_t kMaxVocab = 1 << 24;
inline constexpr double kMaxSeconds = 1e9;

// ---- what to work on ----
inline const OptionDef model{"-m,--model", "model",
                             "Hugging Face model directory, cached model name (ORG/NAME), or llama2.c .bin",
                             "model", OptionKind::Text};
inline const OptionDef tokenizer{"--tokenizer", "tokenizer",
                                 "tokenizer file or directory (llama2.c: default a tokenizer.bin/tok*.bin beside the model)",
                                 "tokenizer", OptionKind::Text};
inline const OptionDef texts{"-t,--text", "text", "text files (.txt, .jsonl with a \"text\" field), repeatable; - for standard input",
                             "texts", OptionKind::Texts};
// logits: the text itself, not a file.
inline const OptionDef input_text{"--text", "input text", "text, tokenized as the model expects (BOS added when it uses one)",
                                  "text", OptionKind::Text};
inline const OptionDef ids{"--ids", "token ids", "comma-separated token ids, used verbatim (no BOS added)", "ids",
                           OptionKind::Text};
inline const OptionDef prompt{"-p,--prompt", "prompt", "prompt text (may be empty)", "prompt", OptionKind::Text};
inline const OptionDef prompts{"--prompts", "prompts file",
                               "a text file of prompts, one per line (empty lines skipped), generated as one batch", "prompts",
                               OptionKind::Text};
inline const OptionDef spectra{"--spectra", "spectra", "spectra saved by `attnscope dof --out` (no recomputation)", "spectra",
                               OptionKind::Text};
inline const OptionDef job{"--job", "job", "a finished distillation run directory: convert with its trained maps", "job",
                           OptionKind::Text};
inline const OptionDef session{"--session", "session", "open a saved session (.attnscope)", "session", OptionKind::Text};
inline const OptionDef capture{"-c,--capture", "capture", "capture directory (attnscope capture)", "capture", OptionKind::Text};
inline const OptionDef val_capture{"--val-capture", "validation capture",
                                   "held-out capture for validation (default: a share of the windows)", "val_capture",
                                   OptionKind::Text};
inline const OptionDef val_share{"--val-share", "validation share", "share of the windows held out for validation", "val_share",
                                 OptionKind::Number, {0, 1, false, true}};
inline const OptionDef heldout_share{"--heldout-share", "held-out share",
                                     "share of the text (its tail) held out for evaluation, never trained on", "heldout_share",
                                     OptionKind::Number, {0, 1, true, true}};
inline const OptionDef seq_len{"-L,--seq-len", "sequence length", "tokens per window", "seq_len", OptionKind::Whole,
                               whole_range(2, kMaxTokens)};
inline const OptionDef no_speed{"--no-speed", "speed measurement",
                                "skip the speed measurement (tokens/s of the original and the converted model in batch and "
                                "generation; on a large model on a CPU it takes minutes)",
                                "speed", OptionKind::Flag};
inline const OptionDef num_seqs{"-T,-n,--num-seqs", "number of windows", "windows of the text to capture", "num_seqs",
                                OptionKind::Whole, whole_range(1, kMaxWindows)};
inline const OptionDef max_windows{"--max-windows", "largest number of windows", "capture windows of the training text at most",
                                   "max_windows", OptionKind::Whole, whole_range(4, kMaxWindows)};
inline const OptionDef seed{"--seed", "seed", "seed of every random draw (windows, maps, adapters, mini-batches)", "seed",
                            OptionKind::Unsigned};
// report: the capture's windows, beside --seed (the DoF's samples and the maps').
inline const OptionDef capture_seed{"--capture-seed", "capture seed", "seed for drawing the windows", "capture_seed",
                                    OptionKind::Unsigned};
inline const OptionDef device{"--device", "device", "cpu | cuda (where a device index is taken: cuda:N)", "device",
                              OptionKind::Name};
inline const OptionDef compute_dtype{
    "--dtype", "compute dtype",
    "f32 | bf16 | f16 | f64: the dtype each layer's projections and MLP compute in (default f32 on the CPU, bf16 on "
    "CUDA); weights stay as stored (memory-mapped, converted one layer at a time); attention, norms and logits stay "
    "float32 (float64 with f64)",
    "dtype", OptionKind::Name};

// ---- capture ----
inline const OptionDef store_dtype{"--store-dtype", "capture dtype",
                                   "the dtype q, k, v are stored in: f32 | f16 (the model computes in --dtype)", "store_dtype",
                                   OptionKind::Name};
inline const OptionDef pre_rope{"--pre-rope", "pre-rope", "store q and k before the rotary embedding", "pre_rope",
                                OptionKind::Flag};

// ---- the DoF spectra and the allocation ----
inline const OptionDef max_samples{"--max-samples", "sample cap",
                                   "cap on J per head: a head whose DoF moves by more than 10% between J/2 and J is computed "
                                   "again at 2J, 4J, ... up to this (<= --samples: no doubling)",
                                   "max_samples", OptionKind::Whole, whole_range(0, kMaxSamples)};
inline const OptionDef normalize{"--normalize", "normalization", "Gram normalizer n in Sigma = G / n: trace | max | samples | none",
                                 "normalize", OptionKind::Name};
inline const OptionDef exact_limit{"--exact-limit", "exact limit",
                                   "largest J with a full eigendecomposition; above, the certified fast path (block Krylov bounds)",
                                   "exact_limit", OptionKind::Whole, whole_range(1, kMaxSamples)};
inline const OptionDef top_k{"--top-k", "subspace size",
                             "the fast path's largest Krylov subspace; a head not within --tolerance by then is solved exactly",
                             "top_k", OptionKind::Whole, whole_range(1, kMaxSamples)};
inline const OptionDef tolerance{"--tolerance", "tolerance",
                                 "relative width (upper - lower) / DoF the fast path must reach at --lambda", "tolerance",
                                 OptionKind::Number, positive_range()};
inline const OptionDef block{"--block", "block size", "Krylov block size: columns added to the subspace per step", "block",
                             OptionKind::Whole, whole_range(1, kMaxSamples)};
inline const OptionDef multiple_of{"--multiple-of", "multiple", "round every dimension to a multiple of this", "multiple",
                                   OptionKind::Whole, whole_range(1, kMaxFeatures)};

// ---- the head analysis ----
inline const OptionDef max_seqs{"--max-seqs", "windows used", "use the first N windows of the capture only (0 = all)",
                                "max_seqs", OptionKind::Whole, whole_range(0, kMaxWindows)};
inline const OptionDef mixer_state{"--mixer-state", "mixer state size", "state size N for structured-mixer distances (0 = skip)",
                                   "mixer_state", OptionKind::Whole, whole_range(0, kMaxFeatures)};
inline const OptionDef sample_rows{"--sample-rows", "sampled rows",
                                   "query positions per window at which the row metrics are estimated, with standard errors (0 "
                                   "= every row, exact); the softmax entropies are always exact",
                                   "sample_rows", OptionKind::Whole, whole_range(0, kMaxTokens)};
inline const OptionDef mixer_tokens{"--mixer-tokens", "mixer tokens",
                                    "structured-mixer distances of the map of the first P tokens of the first window (0 = the "
                                    "whole window)",
                                    "mixer_tokens", OptionKind::Whole, whole_range(0, kMaxTokens)};
inline const OptionDef layer{"-S,--layer", "layer", "layer (from 0)", "layer", OptionKind::Whole, whole_range(0, kMaxIndex)};
inline const OptionDef head{"--head", "head", "head (from 0)", "head", OptionKind::Whole, whole_range(0, kMaxIndex)};
inline const OptionDef seq{"--seq", "text window", "window of the capture (from 0)", "seq", OptionKind::Whole,
                           whole_range(0, kMaxWindows)};

// ---- the feature maps and heads ----
inline const OptionDef feature_map{"--feature-map", "feature map",
                                   "feature map of the linear attention (training: learned-prf | hedgehog | t2r | "
                                   "flex-stationary | flex-nonstationary; measuring: any map, e.g. prf, elu, hedgehog)",
                                   "feature_map.name", OptionKind::Name};
inline const OptionDef init{"--init", "initialization",
                            "initialization of the map (learned-prf: gaussian | orthogonal; hedgehog: identity | random)",
                            "feature_map.init", OptionKind::Text};
inline const OptionDef untied{"--untied", "tied", "hedgehog, t2r: separate layers for queries and keys", "feature_map.tied",
                              OptionKind::Flag};
inline const OptionDef activation{"--activation", "activation", "hedgehog: exp | softmax (convert: also softmax-joint)",
                                  "feature_map.activation", OptionKind::Name};
inline const OptionDef temperature{"--temperature", "temperature", "exp: t in exp(t x)", "feature_map.temperature",
                                   OptionKind::Number, {-1e6, 1e6, false, false}};
inline const OptionDef window{"--window", "window",
                              "hybrid heads: each query attends its last W keys with softmax weights and older keys through "
                              "the map, with a learned balance per head (0: plain linear attention)",
                              "window", OptionKind::Whole, whole_range(0, kMaxTokens)};
inline const OptionDef decay{"--decay", "decay",
                             "decayed heads: none | fixed (the map's weight of key j in row i times a^(i-j), a = "
                             "sigmoid(delta) learned per head: RetNet's decay) | gated (times a_{j+1}...a_i, a_t = "
                             "sigmoid(w.x_t + b) from the layer's input, w and b learned per head: Mamba-2's gate) | "
                             "mixer (each head the one its structured-mixer distances on the capture point at: none, fixed "
                             "or gated, and beside a --window W hybrid or linear, as metrics' student column says at "
                             "--mixer-state 16 --window W)",
                             "decay", OptionKind::Name};
inline const OptionDef decay_init{"--decay-init", "decay initialization",
                                  "where a decayed head starts: fit (the decay that best matches the head's captured "
                                  "attention by lag) | none (delta = 10, a = 1 - 4.5e-5: training hardly moves it)",
                                  "decay_init", OptionKind::Name};
inline const OptionDef features{"-M,--features", "feature dimension", "feature dimension M of every head", "features",
                                OptionKind::Whole, whole_range(1, kMaxFeatures)};
inline const OptionDef allocation{"--allocation", "allocation",
                                  "per-layer or per-head dimensions: `attnscope allocate --json` output", "allocation",
                                  OptionKind::Text};
inline const OptionDef strategy{"--strategy", "strategy",
                                "dimensions from the capture's DoF, as `attnscope allocate`: fix | dof | dof-clip | per-head",
                                "strategy", OptionKind::Name};
inline const OptionDef budget{"-C,--budget", "budget",
                              "with a strategy: cost C, the mean feature dimension (default in linearize: 2 x head dim for "
                              "hedgehog, else head dim)",
                              "budget", OptionKind::Whole, whole_range(1, kMaxFeatures)};
inline const OptionDef state_budget{"--state-budget", "state budget",
                                    "with a strategy: bytes of state per sequence at the context (the capture's window "
                                    "length); the heads with the largest DoF stay softmax while the state fits, the rest "
                                    "are map heads",
                                    "state_budget", OptionKind::Whole, whole_range(0, int64_t(1) << 50)};
inline const OptionDef state_share{"--state-share", "state share",
                                   "with a strategy: the state budget as a share of the original's key-value cache at the "
                                   "context (0.25: a quarter)",
                                   "state_share", OptionKind::Number, {0, 1, false, false}};
inline const OptionDef exact_heads_by{"--exact-heads-by", "exact heads by",
                                      "with a state budget, what picks the heads kept softmax: kl (stage 1's attention KL "
                                      "per head on the training text, after stage 1 trained every head) | dof (the "
                                      "capture's DoF, before stage 1)",
                                      "exact_heads_by", OptionKind::Name};
inline const OptionDef lambda{"--lambda", "lambda", "DoF tolerance lambda (2^-8, 0.0625, 1e-3)", "lambda", OptionKind::Number,
                              {0, 1e300, true, false}};
inline const OptionDef dof_samples{"-J,--samples", "samples", "vectors sampled per head for the DoF", "dof_samples",
                                   OptionKind::Whole, whole_range(2, kMaxSamples)};

// ---- conversion and evaluation ----
inline const OptionDef weights{"--weights", "weights", "copy the original weights, or reference them by path: copy | reference",
                               "weights", OptionKind::Name};
inline const OptionDef original_model{"--original", "original model",
                                      "converted models: the model they were made from, for recall and generation "
                                      "(default: their own weights with softmax attention)",
                                      "original", OptionKind::Text};
inline const OptionDef closeness_windows{"--closeness-windows", "closeness windows",
                                         "converted models: windows of the text for attention KL and output error",
                                         "closeness_windows", OptionKind::Whole, whole_range(1, kMaxWindows)};
inline const OptionDef speed_lengths{"--speed-lengths", "speed length",
                                     "converted models: sequence lengths to time, e.g. 64,128 (default 64, 128, ... up to the "
                                     "context length or 4096)",
                                     "speed_lengths", OptionKind::Wholes, whole_range(2, kMaxTokens)};
inline const OptionDef min_seconds{"--min-seconds", "minimum seconds", "each timing runs at least this long (seconds)",
                                   "min_seconds", OptionKind::Number, {0, kMaxSeconds, false, false}};
inline const OptionDef features_from{"--features-from", "features source", "where the DoF spectra come from: capture",
                                     "features_from", OptionKind::Name};

// ---- generation ----
inline const OptionDef output_tokens{"-n,--steps", "output tokens",
                                     "total tokens in the output, prompt included (as llama2.c -n; default 256)", "steps",
                                     OptionKind::Whole, whole_range(1, kMaxTokens)};
inline const OptionDef new_tokens{"--new-tokens", "new tokens", "tokens to generate after the prompt", "new_tokens",
                                  OptionKind::Whole, whole_range(1, kMaxTokens)};

// ---- pretraining a model ----
inline const OptionDef vocab{"--vocab", "vocabulary size", "vocabulary size (pretrain: of the BPE tokenizer, at least 300)",
                             "vocab", OptionKind::Whole, whole_range(2, kMaxVocab)};
inline const OptionDef layers{"--layers", "layers", "layers", "layers", OptionKind::Whole, whole_range(1, 64)};
inline const OptionDef heads{"--heads", "attention heads", "attention heads", "heads", OptionKind::Whole, whole_range(1, 64)};
inline const OptionDef d_model{"--d-model", "hidden size", "hidden size", "d_model", OptionKind::Whole, whole_range(8, 8192)};
inline const OptionDef context{"--context", "context length", "context length", "context", OptionKind::Whole,
                               whole_range(8, 65536)};
inline const OptionDef eval_every{"--eval-every", "evaluation interval", "steps between held-out evaluations", "eval_every",
                                  OptionKind::Whole, whole_range(1, kMaxSteps)};

// ---- training ----
inline const OptionDef loss{"--loss", "loss",
                            "kl | softmax | l2 | output (layerwise, on the capture) | block (each layer's output after "
                            "attention and MLP, on the capture and the model: paper 003's hidden-state alignment) | "
                            "direct (next-token loss of the whole model with the maps in place, on the text)",
                            "loss", OptionKind::Name};
inline const OptionDef steps{"--steps", "steps", "training steps", "steps", OptionKind::Whole, whole_range(1, kMaxSteps)};
inline const OptionDef lr{"--lr", "learning rate",
                          "learning rate of what trains: the maps' parameters but alpha (distill), the adapters (finetune)",
                          "lr", OptionKind::Number, {0, kMaxLr, true, false}};
inline const OptionDef lr_alpha{"--lr-alpha", "alpha learning rate", "learning rate of alpha (learned-prf)", "lr_alpha",
                                OptionKind::Number, {0, kMaxLr, true, false}};
inline const OptionDef weight_decay{"--weight-decay", "weight decay", "AdamW weight decay", "weight_decay", OptionKind::Number,
                                    {0, 1, false, false}};
inline const OptionDef schedule{"--schedule", "schedule", "constant | cosine", "schedule", OptionKind::Name};
inline const OptionDef batch{"--batch", "batch", "windows per mini-batch", "batch", OptionKind::Whole,
                             whole_range(1, kMaxBatch)};
inline const OptionDef l2_pairs{"--l2-pairs", "l2 pairs", "loss l2: sampled (query, key) pairs per mini-batch", "l2_pairs",
                                OptionKind::Whole, whole_range(1, kMaxPairs)};
inline const OptionDef checkpoint_every{"--checkpoint-every", "checkpoint interval", "steps between checkpoints",
                                        "checkpoint_every", OptionKind::Whole, whole_range(1, kMaxSteps)};

// ---- stage 2: the low-rank finetune ----
inline const OptionDef rank{"-r,--rank", "rank", "rank r of the adapters on q, k, v and o", "rank", OptionKind::Whole,
                            whole_range(1, kMaxRank)};
inline const OptionDef map_lr{"--map-lr", "map learning rate", "learning rate of the feature maps (0: keep them)", "map_lr",
                              OptionKind::Number, {0, kMaxLr, false, false}};
inline const OptionDef kl_weight{"--kl-weight", "KL weight",
                                 "weight of the KL from the original model's next-token distribution (0: none)", "kl_weight",
                                 OptionKind::Number, {0, 1e3, false, false}};
// linearize's stage 2, beside stage 1's --steps and --lr.
inline const OptionDef finetune_steps{"--finetune-steps", "finetune steps", "stage-2 steps (0: no finetune)", "finetune_steps",
                                      OptionKind::Whole, whole_range(0, kMaxSteps)};
inline const OptionDef finetune_lr{"--finetune-lr", "finetune learning rate",
                                   "stage 2: learning rate of the adapters and the maps", "finetune_lr", OptionKind::Number,
                                   {0, kMaxLr, true, false}};

// ---- benchmarks ----
inline const OptionDef contexts{"--contexts", "context", "context lengths, at most 32768", "contexts", OptionKind::Wholes,
                                whole_range(2, kMaxTokens)};
inline const OptionDef tokens{"--tokens", "tokens", "new tokens timed at each context (>= 2)", "tokens", OptionKind::Whole,
                              whole_range(2, kMaxTokens)};
inline const OptionDef no_batch{"--no-batch", "batch forward", "skip the batch forward", "no_batch", OptionKind::Flag};
inline const OptionDef sequences{"--batch", "sequences", "sequences generated at once, comma-separated (e.g. 1,8,32)", "batch",
                                 OptionKind::Wholes, whole_range(1, kMaxBatch)};
inline const OptionDef lengths{"-L,--lengths", "length", "sequence lengths", "lengths", OptionKind::Wholes,
                               whole_range(1, kMaxTokens)};
inline const OptionDef bench_heads{"--heads", "heads per sequence", "heads per sequence", "heads", OptionKind::Whole,
                                   whole_range(1, kMaxBatch)};
inline const OptionDef head_dim{"--head-dim", "head dimension", "head dimension d (of q, k and v)", "head_dim",
                                OptionKind::Whole, whole_range(1, kMaxFeatures)};
inline const OptionDef bench_dtype{"--dtype", "benchmark dtype", "float32 | float64 | bfloat16 (CUDA)", "dtype",
                                   OptionKind::Name};
inline const OptionDef backward{"--backward", "backward", "time forward + backward (gradients of every input)", "backward",
                                OptionKind::Flag};
inline const OptionDef repeats{"--repeats", "repeats", "timed runs per form and length (the best counts)", "repeats",
                               OptionKind::Whole, whole_range(1, 1 << 20)};
inline const OptionDef memory_limit_gb{"--memory-limit-gb", "memory limit", "skip a form whose tensors would pass this (GB)",
                                       "memory_limit_gb", OptionKind::Number, positive_range(1 << 20)};
inline const OptionDef no_eigvalsh{"--no-eigvalsh", "eigvalsh", "skip LibTorch's eigvalsh per head", "no_eigvalsh",
                                   OptionKind::Flag};
inline const OptionDef shape{"--shape", "model shape",
                             "the model's shape: gpt2-small | llama-3.2-1b | llama-3-8b (random weights; Llama shapes rotary, "
                             "grouped-query)", "shape", OptionKind::Name};
inline const OptionDef shapes{"--shapes", "shape", "model shapes: gpt2-small | llama-3.2-1b | llama-3-8b", "shapes",
                              OptionKind::Names};
inline const OptionDef scale_steps{"--steps", "scale steps", "what to run on each: info | capture | spectra | metrics | distill | eval",
                                   "steps", OptionKind::Names};
inline const OptionDef dir{"-d,--dir", "folder", "folder for the checkpoints (several GB; 16 GB for llama-3-8b) and outputs",
                           "dir", OptionKind::Text};
inline const OptionDef eval_chars{"--eval-chars", "eval characters", "characters of the sample text eval reads", "eval_chars",
                                  OptionKind::Whole, whole_range(1, 1 << 30)};
inline const OptionDef reuse{"--reuse", "reuse", "keep a checkpoint already written in the folder instead of writing it again",
                             "reuse", OptionKind::Flag};

// ---- the window and the workspace ----
inline const OptionDef screenshot{"--screenshot", "screenshot",
                                  "wait for the first analysis, save a PNG of the whole window to FILE and exit (works "
                                  "without a display)",
                                  "screenshot", OptionKind::Text};
inline const OptionDef view{"--view", "view", "the view shown (and in the screenshot): heads | metrics | dof | jobs | training",
                            "view", OptionKind::Name};
inline const OptionDef timeout{"--timeout", "timeout", "seconds before giving up (gui --screenshot: on the first analysis; "
                               "bench scale: on a step, which is reported as such)",
                               "timeout", OptionKind::Number, positive_range(kMaxSeconds)};
inline const OptionDef root{"--root", "workspace folder",
                            "the workspace folder (default: $XDG_CACHE_HOME or ~/.cache, /attnscope/workspace)", "root",
                            OptionKind::Text};
inline const OptionDef clean{"--clean", "clean", "remove the folders (all, or those older than --older-than)", "clean",
                             OptionKind::Flag};
inline const OptionDef older_than{"--older-than", "age", "with --clean: only folders last modified more than DAYS days ago",
                                  "older_than", OptionKind::Number, {0, kMaxSeconds, false, false}};

// ---- where a command writes, and what it prints ----
inline const OptionDef out{"-o,--out", "output", "output file or directory", "", OptionKind::Text};
inline const OptionDef resume{"--resume", "resumed run", "continue the killed job in this run directory", "",
                              OptionKind::Text};
inline const OptionDef json{"--json", "JSON", "machine-readable output (JSON)", "", OptionKind::Flag};
inline const OptionDef csv{"--csv", "CSV", "CSV", "", OptionKind::Flag};
inline const OptionDef markdown{"--markdown", "Markdown", "Markdown tables", "", OptionKind::Flag};
inline const OptionDef latex{"--latex", "LaTeX", "LaTeX tables", "", OptionKind::Flag};

}  // namespace attnscope::opt
