// Progress reporting from long core operations to whoever drives them (CLI bar, GUI, job log), and
// cancellation: a driver that wants the work to stop throws attnscope::Cancelled (error.h) from its
// ProgressFn. Core calls the function between steps (a layer, a head, a batch of windows), never
// inside one, so the work stops at the next step boundary and unwinds: outputs written through
// OutputDir or write_text_file are removed, earlier results stay untouched.
#pragma once
#include <atomic>
#include <functional>
#include <string>

namespace attnscope {

// fraction in [0, 1]; `what` says which step is running ("layer 3/12").
using ProgressFn = std::function<void(double fraction, const std::string& what)>;

// Calls `progress` when set.
inline void report_progress(const ProgressFn& progress, double fraction, const std::string& what) {
  if (progress) progress(fraction, what);
}

// `inner` (may be empty) mapped onto [begin, end] of an outer task, and throwing Cancelled once
// `cancel` (may be null) is set: the stages of a pipeline each see their own 0..1.
ProgressFn sub_progress(const ProgressFn& inner, double begin, double end, const std::atomic<bool>* cancel = nullptr);

}  // namespace attnscope
