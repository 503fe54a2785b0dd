// --dtype, one definition (option_defs.h) for every command that runs a model: the row of its option
// table (compute_dtype_option; model_options.h's for the commands that nest ModelOptions). The
// names are model.h's one table.
#pragma once
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "attnscope/base/option_defs.h"
#include "attnscope/base/device.h"
#include "attnscope/model/model.h"

namespace attnscope {

inline const char* const kComputeDtypeFlag = "--dtype";
inline const char* const kComputeDtypeQuantity = opt::compute_dtype.quantity;
inline const char* const kComputeDtypeHelp = opt::compute_dtype.help;

// SPEC 3: f32 on the CPU, bf16 on CUDA.
inline at::ScalarType default_compute_dtype(Device device) { return device == Device::Cuda ? at::kBFloat16 : at::kFloat; }

// The compute dtype of a job on `device`: the one given, else the device's default.
inline at::ScalarType compute_dtype_of(const std::optional<at::ScalarType>& given, Device device) {
  return given ? *given : default_compute_dtype(device);
}

// The row of an option table whose options hold `std::optional<at::ScalarType> compute` (unset: the
// device's default, and left out of the command line).
template <class O>
Option<O> compute_dtype_option() {
  return bind(opt::compute_dtype, &O::compute, parse_compute_dtype, compute_dtype_name, compute_dtype_names());
}

}  // namespace attnscope
