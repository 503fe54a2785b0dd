// A resumable job's checkpoint (SPEC 6: RUN/checkpoints/checkpoint.safetensors), one writer and one
// checker for every job that trains (distill, finetune):
//   NAME, NAME.adamw.exp_avg, NAME.adamw.exp_avg_sq   every trainable tensor with its AdamW moments,
//                                                      float32 on the CPU whatever the device
//   metadata: step, seed (the whole random state is (seed, step): draws derive from both),
//             elapsed_s, and what the job adds (distill: each layer's first and last loss)
// Written to a temporary name and renamed (RunDir::write_checkpoint); on resume checked to be this
// job's before anything of it is used.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnscope/run/run_dir.h"

namespace attnscope {

// A tensor that trains, under its checkpoint name, with its AdamW moments (the job's own tensors:
// read_checkpoint copies into them).
struct TrainedTensor {
  std::string name;
  at::Tensor* value;
  at::Tensor* exp_avg;
  at::Tensor* exp_avg_sq;
};

void write_checkpoint(RunDir& run, const std::vector<TrainedTensor>& tensors, uint64_t seed, int64_t step, double elapsed_s,
                      const std::map<std::string, std::string>& extra = {});

struct Checkpoint {
  int64_t step = 0;
  double elapsed_s = 0;
  std::map<std::string, std::string> metadata;  // the whole metadata, the job's own keys included
};
// Checks RUN's checkpoint against the job (its seed, a step within 0..steps, every tensor there,
// float32, of its shape, finite, and nothing else) and copies it into `tensors`. Error naming the
// checkpoint file and the problem.
Checkpoint read_checkpoint(const RunDir& run, const std::vector<TrainedTensor>& tensors, uint64_t seed, int64_t steps);

// A metadata value as a number: Error naming `file` and the key otherwise.
double checkpoint_number(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& file);

// Where a run (re)starts: 0 for a new run; for a resumed one the checkpoint's step (read into
// `tensors`), or 0 when it was killed before its first checkpoint. Metrics lines after that step
// are dropped so the file reads as one uninterrupted run; the log says where it resumed.
Checkpoint start_from_checkpoint(RunDir& run, bool resume, const std::vector<TrainedTensor>& tensors, uint64_t seed,
                                 int64_t steps);

}  // namespace attnscope
