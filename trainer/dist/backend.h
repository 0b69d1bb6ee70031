// MakeBackend: the c10d collective backend of a rank: NCCL (ProcessGroupNCCL) for a CUDA device, gloo
// (ProcessGroupGloo) for the CPU, both rendezvousing through the given store. Which backends exist depends on the
// build: gloo needs its headers at build time (Debian's libgloo-dev; the library itself is inside libtorch_cpu),
// NCCL a CUDA LibTorch (-DDFLASH_TORCH_CUDA=ON) and nccl.h. A missing one is Unsupported with what to install.
// This file alone includes the backends' headers (they need USE_C10D_* defines, CUDA and gloo include paths).
// Who may call: Communicator. Thread-safety: one thread.
#pragma once

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "base/status.h"

namespace dflash::trainer::dist {

struct BackendOptions {
  int rank = 0;
  int world_size = 1;
  c10::Device device = c10::kCPU;
  std::string host = "127.0.0.1";  // gloo: the address to reach this rank at (its interface towards rank 0)
  std::chrono::milliseconds timeout{600000};
};

Result<c10::intrusive_ptr<c10d::Backend>> MakeBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const BackendOptions& options);

}  // namespace dflash::trainer::dist
