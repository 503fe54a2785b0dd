// AdamW with bias correction and the learning-rate schedule: each takes exactly the numbers it
// uses (as llm.c's adamw.cuh and schedulers.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include <cstdint>

#include <string>
#include <vector>

namespace attnscope {

// The learning-rate schedule over the run's steps.
enum class LrSchedule { Constant, Cosine };
LrSchedule parse_lr_schedule(const std::string& name);  // else Error (quantity "schedule")
const char* lr_schedule_name(LrSchedule s);
std::vector<std::string> lr_schedule_names();  // constant, cosine

constexpr double kAdamBeta1 = 0.9, kAdamBeta2 = 0.999, kAdamEps = 1e-8;

// AdamW's constants as job.json records them: {"name": "adamw", "betas": [b1, b2], "eps"} (a job
// adds its learning rates and weight decay under "optimizer").
nlohmann::ordered_json adamw_json();

// One update of `param` from `grad` at `step` (1-based):
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,  p *= 1 - lr wd,
//   p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
void adamw_update(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, double lr,
                  double weight_decay, int64_t step);

// The learning rate of step `step` (0-based) of `steps`: base (constant), or
// base (1 + cos(pi step / steps)) / 2 (cosine).
double scheduled_lr(LrSchedule schedule, double base, int64_t step, int64_t steps);

}  // namespace attnscope
