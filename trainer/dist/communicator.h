// Communicator: the collectives a data-parallel dflash-train rank needs, over LibTorch's c10d: a TCPStore
// rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 hosts it) and a ProcessGroupNCCL (CUDA) or ProcessGroupGloo (CPU)
// backend (backend.h). Every call is collective: all ranks make the same calls in the same order. Every wait is
// bounded by the timeout: a rank that died makes the others' next call fail with an error naming the operation
// (gloo: at once or at the timeout; NCCL: its watchdog at the timeout), never a silent hang; and should the backend
// not return at all, a CollectiveDeadline (deadline.h) ends the process with exit 2 five seconds after the timeout.
// A world of 1 needs no store or backend: every call is the identity.
// Who may call: the Trainer and tests. Thread-safety: one thread.
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

#include "cache/status.h"
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
  // Overwrites every tensor with rank `root`'s values.
  Status Broadcast(const std::vector<torch::Tensor>& tensors, int root = 0);
  // Every rank's `mine`, indexed by rank (through the store: any length, any bytes).
  Result<std::vector<std::string>> AllGatherStrings(const std::string& mine);

 private:
  Communicator(const RankEnv& env, torch::Device device) : env_(env), device_(device) {}
  Status Wrap(const std::string& what, const std::function<void()>& collective);

  RankEnv env_;
  torch::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::int64_t gather_round_ = 0;
  std::unique_ptr<CollectiveDeadline> deadline_;  // several ranks only
};

}  // namespace dflash::trainer::dist
