// Element types as safetensors names them.
#pragma once
#include <cstddef>
#include <string>

namespace attnscope {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

// "F32" -> DType::F32; returns false for a name attnscope does not know.
bool dtype_from_name(const std::string& name, DType* out);
const char* dtype_name(DType t);
std::size_t dtype_size(DType t);

}  // namespace attnscope
