// Communicator: the collectives a data-parallel dflash-train rank needs, over LibTorch's c10d: a TCPStore
// rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 hosts it) and a ProcessGroupNCCL (CUDA) or ProcessGroupGloo (CPU)
// backend (backend.h). Every call is collective: all ranks make the same calls in the same order. Every wait is
// bounded by the timeout: a rank that died makes the others' next call fail with an error naming the operation
// (gloo: at once or at the timeout; NCCL: its watchdog at the timeout), never a silent hang; and should the backend
// not return at all, a CollectiveDeadline (deadline.h) ends the process with exit 2 five seconds after the timeout.
// A world of 1 needs no store or backend: every call is the identity.
// Who may call: the Trainer, GradientSync and tests. Thread-safety: one thread at a time (StartAllReduceSum also from
// the autograd thread of a backward the owning thread waits for).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "trainer/dist/deadline.h"
#include "trainer/dist/rank_env.h"

namespace dflash::trainer::dist {

class Communicator {
 public:
  // Connects to the other ranks of `env` (waits up to `timeout` for all of them). IoError when the rendezvous or the
  // backend fails, Unsupported when the build lacks the backend `device` needs.
  static Result<std::unique_ptr<Communicator>> Create(const RankEnv& env, torch::Device device,
                                                      std::chrono::milliseconds timeout);
  ~Communicator();

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const RankEnv& env() const { return env_; }

  // Sums `values` over all ranks (exact for integers below 2^53).
  Result<std::vector<double>> AllReduceSum(std::vector<double> values);
  // Sums every tensor (on the communicator's device, all of one dtype) over all ranks, in place, through flat
  // buckets of at most `bucket_bytes` (all buckets are in flight at once). Undefined tensors are not allowed.
  Status AllReduceSumInPlace(const std::vector<torch::Tensor>& tensors, std::int64_t bucket_bytes = 25 << 20);
  // Starts summing `flat` (contiguous, on the communicator's device) over all ranks, in place, and returns at once:
  // the asynchronous half of an all-reduce, for overlapping it with the backward (GradientSync). Every rank must
  // start the same sequence of them. Callable from the autograd thread while the calling thread waits in backward().
  // IoError when the backend refuses.
  Result<c10::intrusive_ptr<c10d::Work>> StartAllReduceSum(const torch::Tensor& flat);
  // Waits for started collectives, bounded as every collective (an error names `what`).
  Status Wait(const std::vector<c10::intrusive_ptr<c10d::Work>>& works, const std::string& what);
  // Overwrites every tensor with rank `root`'s values.
  Status Broadcast(const std::vector<torch::Tensor>& tensors, int root = 0);
  // Every rank's `mine`, indexed by rank (through the store: any length, any bytes).
  Result<std::vector<std::string>> AllGatherStrings(const std::string& mine);

 private:
  Communicator(const RankEnv& env, torch::Device device) : env_(env), device_(device) {}
  // Runs `collective` under the deadline (then synchronises the device unless told not to); errors name `what`.
  Status Wrap(const std::string& what, const std::function<void()>& collective, bool sync_device = true);

  RankEnv env_;
  torch::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::int64_t gather_round_ = 0;
  std::unique_ptr<CollectiveDeadline> deadline_;  // several ranks only
};

}  // namespace dflash::trainer::dist
