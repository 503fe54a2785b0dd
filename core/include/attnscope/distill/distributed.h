// Scale-out across processes through torch.distributed's c10d (SPEC 6): the ranks of a job come from
// the environment as torchrun and Slurm set it (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and
// LOCAL_RANK for the GPU), rank 0 hosts the rendezvous store, and the ranks talk through Gloo (CPU
// tensors) or NCCL (CUDA tensors, where the build's LibTorch has it). A job splits its work so that
// every rank computes its own part and the collectives below combine the parts.
//
// Every collective waits at most dist_timeout_s() for the other ranks (5 minutes, or
// ATTNSCOPE_DIST_TIMEOUT_S): a rank that failed or was killed makes the others fail with an Error
// that says so, instead of hanging forever. The torch/csrc headers stay in distributed.cpp.
#pragma once
#include "attnscope/base/device.h"
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace attnscope {

struct DistEnv {
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr;
  int master_port = 0;
};

// Reads the environment. WORLD_SIZE unset or 1: one process (nothing else is read). Otherwise RANK,
// MASTER_ADDR and MASTER_PORT must be set and well-formed (0 <= RANK < WORLD_SIZE, a port in
// 1..65535); an Error names the variable and the problem.
DistEnv dist_env_from_environment();

// ATTNSCOPE_DIST_TIMEOUT_S when set (a positive number; Error otherwise), else 300.
double dist_timeout_s();

// True when this build can run more than one rank on `device` (cpu: Gloo, cuda: NCCL).
bool dist_available(Device device);

// The ranks of a job. With world 1 every collective returns at once and nothing is opened.
class DistGroup {
 public:
  // Joins the group: rank 0 opens the store on MASTER_PORT, the others connect to it. cpu runs
  // over Gloo, cuda over NCCL; an Error says so when the build has no such backend.
  DistGroup(const DistEnv& env, Device device);
  ~DistGroup();
  DistGroup(const DistGroup&) = delete;
  DistGroup& operator=(const DistGroup&) = delete;

  int rank() const { return env_.rank; }
  int world() const { return env_.world; }
  // Layer (or other unit of work) s belongs to rank s % world.
  bool owns(int unit) const { return unit % env_.world == env_.rank; }

  // Every rank ends with the sum over ranks of `values` (element-wise, float64: a value only one
  // rank contributes, the others 0, arrives exactly).
  void all_reduce_sum(std::vector<double>& values);
  // Every rank ends with `owner`'s values of `tensors` (same shapes and dtype on every rank).
  void broadcast(std::vector<at::Tensor>& tensors, int owner);
  void barrier();

 private:
  struct Impl;
  DistEnv env_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnscope
