// Random test checkpoints written without attnscope's own writers: Hugging Face layout
// (config.json + model.safetensors) for GPT-2 / GPT-NeoX / Llama / Mistral / Qwen2 / Qwen3, and llama2.c .bin files. The
// safetensors writer here is deliberately minimal and separate from core's, so a reader test does
// not trust the code it is testing.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "reference_transformer.h"

namespace attnscope::test {

// Random weights for `c` under its architecture's names and shapes, from a seeded std::mt19937:
// matrices and embeddings ~ N(0, 0.2^2), norm weights ~ 1 + N(0, 0.1^2), biases ~ N(0, 0.1^2)
// (nonzero, so a dropped bias shows). Deterministic for a given (c, seed).
RefWeights random_weights(const RefConfig& c, uint32_t seed);

// The config.json a Hugging Face export of `c` carries (not llama2.c).
nlohmann::json hf_config_json(const RefConfig& c);

// safetensors: u64 little-endian header length N, N bytes of JSON {name: {"dtype": "F32",
// "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {"format": "pt"}} padded with
// spaces to a multiple of 8, then the raw little-endian float32 data, tensors back to back.
void write_safetensors_minimal(const std::string& path, const RefWeights& w);

// dir/config.json + dir/model.safetensors.
void write_hf_checkpoint(const std::string& dir, const RefConfig& c, const RefWeights& w);

// llama2.c legacy "version 0": 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
// seq_len; vocab_size negated when the classifier is separate), then float32 token_embedding_table,
// rms_att_weight, wq, wk, wv, wo, rms_ffn_weight, w1, w2, w3, rms_final_weight, freq_cis_real,
// freq_cis_imag, and wcls only when not shared.
void write_llama2c_checkpoint(const std::string& path, const RefConfig& c, const RefWeights& w);

}  // namespace attnscope::test
