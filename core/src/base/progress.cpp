#include "attnscope/base/progress.h"

#include "attnscope/base/error.h"

namespace attnscope {

ProgressFn sub_progress(const ProgressFn& inner, double begin, double end, const std::atomic<bool>* cancel) {
  return [inner, begin, end, cancel](double f, const std::string& what) {
    if (cancel && cancel->load()) throw Cancelled();
    if (inner) inner(begin + (end - begin) * f, what);
  };
}

}  // namespace attnscope
