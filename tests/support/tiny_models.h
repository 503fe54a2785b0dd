// Small models with random weights that tests load through the public API.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/convert/converted_model.h"
#include "attnscope/distill/distill_options.h"

namespace attnscope {
class Model;
struct HeadFeatureMaps;
}  // namespace attnscope

namespace attnscope::test {

// A 2-layer GPT-2 (d_model 16, 2 heads, context 64, vocab 320) with a byte-level BPE tokenizer
// trained on resources/texts, written once per process in Hugging Face layout; returns its dir.
std::string tiny_gpt2_dir();

// A small Llama (RoPE, grouped-query attention: 4 query heads on 2 key/value heads, head dim 8,
// context 64) with random weights drawn from `seed`, in Hugging Face layout with the bundled
// model's tokenizer, written to a fresh folder named after `tag`; returns its dir.
std::string tiny_llama_dir(const std::string& tag, uint32_t seed);

// A capture of the bundled model (resources/models/brown-gpt2-mini) on the sample texts: 6 windows x
// 64 tokens, seed 3, written once per process; returns its dir.
std::string bundled_capture();

// A capture of tiny_gpt2_dir() on the sample texts: num_seqs windows x seq_len tokens drawn with
// `seed`, all in one batch, written to a fresh folder named after `tag`; returns its dir.
std::string tiny_gpt2_capture(const std::string& tag, int seq_len, int num_seqs, uint64_t seed);

// An untrained hedgehog conversion (attnscope convert's output, with attnscope_linear.py) of
// `model` (a directory or llama2.c .bin), M = 8 in every head, map seed 3, in a fresh folder named
// after `tag`; returns its dir.
std::string hedgehog_conversion(const std::string& model, const std::string& tag);

// The bundled model (resources/models/brown-gpt2-mini) converted by the CLI to untrained hedgehog
// maps of 16 features (seed 11), hybrid with window W when W > 0, into DIR (what the decayed-head
// tests decay); returns DIR.
std::string bundled_hedgehog16(const std::string& dir, int64_t window);
// ConvertOptions that write `maps` over a model like `plain` (bundled_hedgehog16's output: its map
// spec), M = 16 in every one of S x H heads, window W, with attnscope_linear.py.
ConvertOptions hedgehog16_convert_options(std::shared_ptr<const HeadFeatureMaps> maps, const std::string& plain, int S, int H,
                                          int64_t window);
// The prompt and n greedy tokens, each from a full forward pass over the sequence so far (no cache,
// no state): the reference generation is checked against.
std::vector<int64_t> greedy_by_forward(const Model& m, std::vector<int64_t> seq, int n);

// Distill `o` with a checkpoint every 5 steps twice: uninterrupted into ROOT/whole5, and killed at
// step 7 then resumed into ROOT/killed; expects the two runs' feature_maps.safetensors to hold the
// same tensors (within 1e-6). o.steps must exceed 7.
void expect_distill_resumes_exactly(DistillOptions o, const std::string& root);

}  // namespace attnscope::test
