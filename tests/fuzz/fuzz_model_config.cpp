// libFuzzer entry point for config.json (parse_hf_config): any input must either parse or throw
// attnscope::Error. A parsed config must hold what the model loader and forward pass rely on; a
// GPT-2 config must also survive to_hf_config and back unchanged.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "attnscope/base/error.h"
#include "attnscope/model/model_config.h"

namespace {

using attnscope::Activation;
using attnscope::Arch;
using attnscope::ModelConfig;

void check(const ModelConfig& c) {
  for (int v : {c.n_layer, c.n_head, c.n_kv_head, c.d_model, c.head_dim, c.d_ff, c.vocab_size, c.n_ctx})
    if (v < 1) std::abort();
  if (c.n_head % c.n_kv_head != 0) std::abort();
  if (c.rotary_dim < 0 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) std::abort();
  const bool llama = attnscope::is_llama_family(c.arch);
  if (llama && c.rotary_dim != c.head_dim) std::abort();
  if ((c.arch == Arch::GPT2) != (c.rotary_dim == 0)) std::abort();  // 0: learned positions
  // Without an explicit head_dim (only the Llama family has one) the heads split the hidden size exactly.
  if (!llama && int64_t(c.n_head) * c.head_dim != c.d_model) std::abort();
  if (!std::isfinite(c.norm_eps) || c.norm_eps < 0) std::abort();
  if (c.rotary_dim > 0 && !(std::isfinite(c.rope_theta) && c.rope_theta > 0)) std::abort();
  // SiLU means SwiGLU (a gate projection), which only the Llama family's weights have.
  if ((c.activation == Activation::SiLU) != llama) std::abort();
  if (c.sliding_window < 0 || (c.sliding_window > 0 && c.arch != Arch::Mistral)) std::abort();
  if (c.qk_norm != (c.arch == Arch::Qwen3)) std::abort();
  if (c.n_params() <= 0) std::abort();  // and computing it must not overflow (UBSan)
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ModelConfig c;
  try {
    c = attnscope::parse_hf_config_text(std::string_view(reinterpret_cast<const char*>(data), size),
                                        "config.json");
  } catch (const attnscope::Error&) {
    return 0;  // a clear rejection is the expected outcome for malformed input
  }
  check(c);
  if (c.arch == Arch::GPT2) {
    const ModelConfig back = attnscope::parse_hf_config(attnscope::to_hf_config(c), "round trip");
    if (back.d_model != c.d_model || back.n_layer != c.n_layer || back.n_head != c.n_head ||
        back.n_ctx != c.n_ctx || back.vocab_size != c.vocab_size || back.d_ff != c.d_ff ||
        back.norm_eps != c.norm_eps || back.activation != c.activation ||
        back.tied_embeddings != c.tied_embeddings || back.torch_dtype != c.torch_dtype)
      std::abort();
  }
  return 0;
}
