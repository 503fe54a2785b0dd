// Where tensors live: the --device of `distill` and `bench`.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

namespace attnscope {

// "cpu", "cuda" or "cuda:N" as an at::Device. Error (quantity "device") for any other name, and for
// CUDA where it cannot run, saying why: this build's LibTorch has no CUDA, or this machine shows no
// CUDA device.
at::Device parse_device(const std::string& name);

// Returns once every kernel queued on t's device has finished, so that a clock read next times the
// work (CUDA runs asynchronously; reading one value back waits for everything queued before it).
// Nothing to wait for on the CPU.
void wait_for_device(const at::Tensor& t);

}  // namespace attnscope
