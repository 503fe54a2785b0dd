// Where tensors live: the device of `distill`, `bench` and the DoF spectra.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace attnscope {

// The devices a job runs on (distill, the workbench's Train form): one name table.
enum class Device { Cpu, Cuda };
Device parse_device_name(const std::string& name);  // one of device_names(); else Error (quantity "device")
const char* device_name(Device d);
std::vector<std::string> device_names();  // cpu, cuda
// parse_device(device_name(d)): Error when this build or machine cannot use it.
at::Device torch_device(Device d);

// "cpu", "cuda" or "cuda:N" as an at::Device. Error (quantity "device") for any other name, and for
// CUDA where it cannot run, saying why: this build's LibTorch has no CUDA, or this machine shows no
// CUDA device.
at::Device parse_device(const std::string& name);

// Returns once every kernel queued on t's device has finished, so that a clock read next times the
// work (CUDA runs asynchronously; reading one value back waits for everything queued before it).
// Nothing to wait for on the CPU.
void wait_for_device(const at::Tensor& t);

}  // namespace attnscope
