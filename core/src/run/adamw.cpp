// AdamW and the schedule (adamw.h).
#include "attnscope/run/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <cmath>

#include "attnscope/base/names.h"

namespace attnscope {
namespace {
constexpr Named<LrSchedule> kSchedules[] = {{LrSchedule::Constant, "constant"}, {LrSchedule::Cosine, "cosine"}};
}  // namespace

LrSchedule parse_lr_schedule(const std::string& name) { return parse_name(kSchedules, name, "schedule"); }
const char* lr_schedule_name(LrSchedule s) { return name_of(kSchedules, s); }
std::vector<std::string> lr_schedule_names() { return names_of(kSchedules); }

nlohmann::ordered_json adamw_json() { return {{"name", "adamw"}, {"betas", {kAdamBeta1, kAdamBeta2}}, {"eps", kAdamEps}}; }

void adamw_update(at::Tensor& p, const at::Tensor& grad, at::Tensor& m, at::Tensor& v, double lr, double weight_decay,
                  int64_t step) {
  at::NoGradGuard no_grad;
  const double bc1 = 1.0 - std::pow(kAdamBeta1, double(step)), bc2 = 1.0 - std::pow(kAdamBeta2, double(step));
  m.mul_(kAdamBeta1).add_(grad, 1.0 - kAdamBeta1);
  v.mul_(kAdamBeta2).addcmul_(grad, grad, 1.0 - kAdamBeta2);
  if (weight_decay > 0) p.mul_(1.0 - lr * weight_decay);
  const at::Tensor denom = (v / bc2).sqrt_().add_(kAdamEps);
  p.addcdiv_(m, denom, -lr / bc1);
}

double scheduled_lr(LrSchedule schedule, double base, int64_t step, int64_t steps) {
  if (schedule == LrSchedule::Cosine) return base * 0.5 * (1.0 + std::cos(3.14159265358979323846 * double(step) / double(steps)));
  return base;
}

}  // namespace attnscope
