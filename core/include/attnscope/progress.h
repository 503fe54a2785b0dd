// Progress reporting from long core operations to whoever drives them (CLI bar, GUI, job log).
#pragma once
#include <functional>
#include <string>

namespace attnscope {

// fraction in [0, 1]; `what` says which step is running ("layer 3/12").
using ProgressFn = std::function<void(double fraction, const std::string& what)>;

}  // namespace attnscope
