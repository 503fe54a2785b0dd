#include "attnscope/base/device.h"

#include <ATen/Context.h>

#include "attnscope/base/error.h"
#include "attnscope/base/names.h"

namespace attnscope {

namespace {
constexpr Named<Device> kDevices[] = {{Device::Cpu, "cpu"}, {Device::Cuda, "cuda"}};
}  // namespace

Device parse_device_name(const std::string& name) { return parse_name(kDevices, name, "device"); }
const char* device_name(Device d) { return name_of(kDevices, d); }
std::vector<std::string> device_names() { return names_of(kDevices); }
at::Device torch_device(Device d) { return parse_device(device_name(d)); }

at::Device parse_device(const std::string& name) {
  if (name == "cpu") return at::Device(at::kCPU);
  if (name != "cuda" && name.rfind("cuda:", 0) != 0)
    fail_value("device", "'" + name + "' is not one of cpu, cuda, cuda:N");
  at::Device device(at::kCPU);
  try {
    device = at::Device(name);
  } catch (const std::exception&) {
    fail_value("device", "'" + name + "' is not a device name (cpu, cuda or cuda:N)");
  }
  // at::hasCUDA() is false both in a CPU-only LibTorch and on a machine without a GPU; the build
  // knows which (ATTNSCOPE_TORCH_CUDA, set by CMake when Torch has CUDA libraries).
#ifndef ATTNSCOPE_TORCH_CUDA
  fail_value("device", name + " is not available: this build has no CUDA (its LibTorch is built without CUDA; build "
                              "against a CUDA LibTorch, or run on the cpu)");
#else
  if (!at::hasCUDA())
    fail_value("device", name + " is not available: no CUDA device (this machine runs without CUDA: check the driver "
                                "and CUDA_VISIBLE_DEVICES, or run on the cpu)");
  return device;
#endif
}

void wait_for_device(const at::Tensor& t) {
  if (t.is_cuda()) (void)t.reshape({-1})[0].item<float>();
}

}  // namespace attnscope
