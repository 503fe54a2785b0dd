// "[2, 3, 4]": how error messages show a tensor's shape (private to core/).
#pragma once
#include <c10/util/ArrayRef.h>

#include <string>

namespace attnscope {

inline std::string shape_str(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace attnscope
