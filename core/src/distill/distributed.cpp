// The ranks of a job through c10d (distributed.h). The c10d headers come in only here, and only
// where CMake found them usable: ATTNSCOPE_HAVE_GLOO (ProcessGroupGloo and the gloo headers; Debian:
// libgloo-dev) and ATTNSCOPE_HAVE_NCCL (ProcessGroupNCCL in a CUDA LibTorch, and nccl.h). A build
// without them runs one process and says so when WORLD_SIZE asks for more.
#include "attnscope/distill/distributed.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>

#include "attnscope/base/error.h"

#if defined(ATTNSCOPE_HAVE_GLOO) || defined(ATTNSCOPE_HAVE_NCCL)
#define ATTNSCOPE_HAVE_C10D 1
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#ifdef ATTNSCOPE_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef ATTNSCOPE_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace attnscope {
namespace {

const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// An integer environment variable in [lo, hi]; Error naming it when it is missing or malformed.
int env_int(const char* name, long lo, long hi, const std::string& missing_why) {
  const char* v = env_value(name);
  if (!v) fail(std::string("environment variable ") + name, "is not set (" + missing_why + ")");
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE)
    fail(std::string("environment variable ") + name, std::string("'") + v + "' is not an integer");
  if (n < lo || n > hi)
    fail(std::string("environment variable ") + name,
         std::to_string(n) + " is out of range (" + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return int(n);
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv env;
  if (!env_value("WORLD_SIZE")) return env;
  env.world = env_int("WORLD_SIZE", 1, 1 << 20, "");
  if (env.world == 1) return env;
  const std::string why = "WORLD_SIZE is " + std::to_string(env.world) +
                          ": every rank needs RANK, MASTER_ADDR and MASTER_PORT, as torchrun and Slurm set them";
  env.rank = env_int("RANK", 0, 1 << 20, why);
  if (env.rank >= env.world)
    fail("environment variable RANK", std::to_string(env.rank) + " is not below WORLD_SIZE " + std::to_string(env.world));
  const char* addr = env_value("MASTER_ADDR");
  if (!addr) fail("environment variable MASTER_ADDR", "is not set (" + why + ")");
  env.master_addr = addr;
  env.master_port = env_int("MASTER_PORT", 1, 65535, why);
  env.local_rank = env_value("LOCAL_RANK") ? env_int("LOCAL_RANK", 0, 1 << 20, "") : 0;
  return env;
}

double dist_timeout_s() {
  const char* v = env_value("ATTNSCOPE_DIST_TIMEOUT_S");
  if (!v) return 300;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0))
    fail("environment variable ATTNSCOPE_DIST_TIMEOUT_S", std::string("'") + v + "' is not a positive number of seconds");
  return s;
}

bool dist_available(Device device) {
#ifdef ATTNSCOPE_HAVE_NCCL
  if (device == Device::Cuda) return true;
#endif
#ifdef ATTNSCOPE_HAVE_GLOO
  if (device == Device::Cpu) return true;
#endif
  (void)device;
  return false;
}

#ifdef ATTNSCOPE_HAVE_C10D

struct DistGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
#ifdef ATTNSCOPE_HAVE_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#endif
#ifdef ATTNSCOPE_HAVE_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
  at::Device device = at::kCPU;  // where the collectives' tensors live: CPU for Gloo, the rank's GPU for NCCL
  double timeout_s = 300;

  // Runs a collective on whichever backend this group has; a failure (a rank gone, the timeout)
  // becomes an Error that says what it means.
  template <class F>
  void run(const std::string& what, const F& f) {
    try {
#ifdef ATTNSCOPE_HAVE_NCCL
      if (nccl) return f(*nccl);
#endif
#ifdef ATTNSCOPE_HAVE_GLOO
      if (gloo) return f(*gloo);
#endif
    } catch (const c10::Error& e) {
      lost(what, e.what_without_backtrace());
    } catch (const std::exception& e) {
      lost(what, e.what());
    }
  }
  [[noreturn]] void lost(const std::string& what, const std::string& why) const {
    fail("distributed job", what + " with the other ranks failed: another rank failed, was killed or is more than " +
                                std::to_string(int(timeout_s)) + " s late (ATTNSCOPE_DIST_TIMEOUT_S); see its output. " +
                                "c10d says: " + why);
  }
};

#ifdef ATTNSCOPE_HAVE_GLOO
namespace {
bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}
// The network interface Gloo binds to: GLOO_SOCKET_IFNAME as torch.distributed reads it; the
// loopback when the master is on it (all ranks on this machine); else this host's name's address.
std::shared_ptr<::gloo::transport::Device> gloo_device(const DistEnv& env) {
  if (const char* ifname = env_value("GLOO_SOCKET_IFNAME")) return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (is_loopback(env.master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname(env.master_addr);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
}  // namespace
#endif

DistGroup::DistGroup(const DistEnv& env, Device device) : env_(env) {
  if (env_.world <= 1) return;
  if (!dist_available(device))
    fail("distributed job", "WORLD_SIZE is " + std::to_string(env_.world) + " but this build has no c10d backend for " +
                                device_name(device) + (device == Device::Cuda ? " (its LibTorch has no NCCL); run the ranks on the cpu (Gloo)"
                                                           : " (Gloo: install libgloo-dev and reconfigure)"));
  impl_ = std::make_unique<Impl>();
  impl_->timeout_s = dist_timeout_s();
  const auto timeout = std::chrono::milliseconds(int64_t(impl_->timeout_s * 1000));
  const std::string where = env_.master_addr + ":" + std::to_string(env_.master_port);
  try {
    // Under torchrun the agent already hosts the store on MASTER_PORT and says so; every rank then
    // connects to it, under the prefix of this attempt, as torch.distributed does.
    const char* agent = env_value("TORCHELASTIC_USE_AGENT_STORE");
    const bool agent_store = agent && std::string(agent) == "True";
    c10d::TCPStoreOptions so;
    so.port = uint16_t(env_.master_port);
    so.isServer = env_.rank == 0 && !agent_store;
    so.numWorkers = size_t(env_.world);
    so.waitWorkers = !agent_store;
    so.timeout = timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, so);
    if (agent_store) {
      const char* attempt = env_value("TORCHELASTIC_RESTART_COUNT");
      impl_->store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::string(attempt ? attempt : "0"),
                                                            impl_->store);
    }
  } catch (const c10::Error& e) {
    fail("MASTER_ADDR:MASTER_PORT " + where, std::string("rendezvous of ") + std::to_string(env_.world) +
                                                 " ranks failed (port taken, or a rank missing after " +
                                                 std::to_string(int(impl_->timeout_s)) + " s): " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail("MASTER_ADDR:MASTER_PORT " + where, std::string("rendezvous failed: ") + e.what());
  }
  try {
#ifdef ATTNSCOPE_HAVE_NCCL
    if (device == Device::Cuda) {
      // NCCL honours the timeout only in blocking-wait mode (torch's own switch for it).
      setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
      setenv("NCCL_BLOCKING_WAIT", "1", 0);
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      impl_->device = at::Device(at::kCUDA, c10::DeviceIndex(env_.local_rank));
      impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, env_.rank, env_.world, options);
    }
#endif
#ifdef ATTNSCOPE_HAVE_GLOO
    if (device == Device::Cpu) {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(gloo_device(env_));
      impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env_.rank, env_.world, options);
    }
#endif
  } catch (const c10::Error& e) {
    impl_->lost("joining the process group", e.what_without_backtrace());
  } catch (const std::exception& e) {
    impl_->lost("joining the process group", e.what());
  }
}

DistGroup::~DistGroup() = default;

void DistGroup::all_reduce_sum(std::vector<double>& values) {
  if (!impl_ || values.empty()) return;
  std::vector<at::Tensor> t = {at::tensor(values, at::kDouble).to(impl_->device)};
  impl_->run("an all-reduce", [&](auto& pg) { pg.allreduce(t)->wait(); });
  const at::Tensor c = t[0].to(at::kCPU).contiguous();
  std::copy(c.data_ptr<double>(), c.data_ptr<double>() + c.numel(), values.begin());
}

void DistGroup::broadcast(std::vector<at::Tensor>& tensors, int owner) {
  if (!impl_ || tensors.empty()) return;
  at::NoGradGuard no_grad;
  // One flat buffer: one message, not one per tensor.
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) flat.push_back(t.detach().reshape({-1}).to(impl_->device, at::kFloat));
  std::vector<at::Tensor> buffer = {at::cat(flat)};
  c10d::BroadcastOptions options;
  options.rootRank = owner;
  impl_->run("a broadcast", [&](auto& pg) { pg.broadcast(buffer, options)->wait(); });
  int64_t offset = 0;
  for (at::Tensor& t : tensors) {
    t.copy_(buffer[0].narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// An all-reduce of nothing in particular: the same on every backend.
void DistGroup::barrier() {
  std::vector<double> zero = {0.0};
  all_reduce_sum(zero);
}

#else  // no c10d in this build: one process only

struct DistGroup::Impl {};

DistGroup::DistGroup(const DistEnv& env, Device device) : env_(env) {
  if (env_.world > 1)
    fail("distributed job", "WORLD_SIZE is " + std::to_string(env_.world) + " but this build has no c10d backend for " +
                                device_name(device) + " (Gloo: install libgloo-dev and reconfigure)");
}
DistGroup::~DistGroup() = default;
void DistGroup::all_reduce_sum(std::vector<double>&) {}
void DistGroup::broadcast(std::vector<at::Tensor>&, int) {}
void DistGroup::barrier() {}

#endif

}  // namespace attnscope
