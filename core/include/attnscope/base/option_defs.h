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

// ---- what to work on ----
inline const OptionDef model{"-m,--model", "model",
                             "Hugging Face model directory, cached model name (ORG/NAME), or llama2.c .bin",
                             "model", OptionKind::Text};
inline const OptionDef texts{"-t,--text", "text", "text files (.txt, .jsonl with a \"text\" field), repeatable; - for standard input",
                             "texts", OptionKind::Texts};
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
inline const OptionDef max_windows{"--max-windows", "number of windows", "capture windows of the training text at most",
                                   "max_windows", OptionKind::Whole, whole_range(4, kMaxWindows)};
inline const OptionDef seed{"--seed", "seed", "seed of every random draw (windows, maps, adapters, mini-batches)", "seed",
                            OptionKind::Unsigned};
inline const OptionDef device{"--device", "device", "cpu | cuda", "device", OptionKind::Name};
inline const OptionDef compute_dtype{
    "--dtype", "compute dtype",
    "f32 | bf16 | f16 | f64: the dtype each layer's projections and MLP compute in (default f32 on the CPU, bf16 on "
    "CUDA); weights stay as stored (memory-mapped, converted one layer at a time); attention, norms and logits stay "
    "float32 (float64 with f64)",
    "dtype", OptionKind::Name};

// ---- the feature maps and heads ----
inline const OptionDef feature_map{"--feature-map", "feature map",
                                   "trainable map: learned-prf | hedgehog | t2r | flex-stationary | flex-nonstationary",
                                   "feature_map.name", OptionKind::Name};
inline const OptionDef init{"--init", "initialization",
                            "initialization of the map (learned-prf: gaussian | orthogonal; hedgehog: identity | random)",
                            "feature_map.init", OptionKind::Text};
inline const OptionDef untied{"--untied", "tied", "hedgehog, t2r: separate layers for queries and keys", "feature_map.tied",
                              OptionKind::Flag};
inline const OptionDef activation{"--activation", "activation", "hedgehog: exp | softmax", "feature_map.activation",
                                  OptionKind::Name};
inline const OptionDef window{"--window", "window",
                              "hybrid heads: each query attends its last W keys with softmax weights and older keys through "
                              "the map, with a learned balance per head (0: plain linear attention)",
                              "window", OptionKind::Whole, whole_range(0, kMaxTokens)};
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
inline const OptionDef lambda{"--lambda", "lambda", "DoF tolerance lambda (2^-8, 0.0625, 1e-3)", "lambda", OptionKind::Number,
                              {0, 1e300, true, false}};
inline const OptionDef dof_samples{"-J,--samples", "samples", "vectors sampled per head for the DoF", "dof_samples",
                                   OptionKind::Whole, whole_range(2, kMaxSamples)};

// ---- training ----
inline const OptionDef loss{"--loss", "loss",
                            "kl | softmax | l2 | output (layerwise, on the capture) | direct (next-token loss of the whole "
                            "model with the maps in place, on the text)",
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

}  // namespace attnscope::opt
