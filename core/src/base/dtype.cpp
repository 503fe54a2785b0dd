#include "attnscope/base/dtype.h"

namespace attnscope {

namespace {
struct DTypeInfo {
  DType type;
  const char* name;
  std::size_t size;
};
constexpr DTypeInfo kTypes[] = {
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2}, {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};
}  // namespace

bool dtype_from_name(const std::string& name, DType* out) {
  for (const auto& t : kTypes)
    if (name == t.name) {
      *out = t.type;
      return true;
    }
  return false;
}

const char* dtype_name(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i.name;
  return "?";
}

std::size_t dtype_size(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i.size;
  return 0;
}

}  // namespace attnscope
