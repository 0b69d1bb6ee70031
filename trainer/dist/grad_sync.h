// GradientSync: the data-parallel gradient all-reduce of a model's parameters, bucketed (buckets.h) and overlapped
// with the backward of the step's last row. Each parameter gets a post-accumulate-grad hook (LibTorch's
// PostAccumulateGradHook, called once its .grad holds the backward's sum); while armed, a bucket starts its
// asynchronous all-reduce as soon as every gradient in it is final AND every lower-numbered bucket has started, so
// every rank starts the same buckets in the same order whatever order its backward finishes them in (a rank whose
// last row had no backward starts them all in Finish). Buckets run over the parameters in reverse order (a backward
// finishes the last layers first). Only the last backward of a step may overlap: earlier rows (accumulation) still
// add to the gradients. The sums are bit for bit those of Communicator::AllReduceSumInPlace over the same buckets
// (with 2 ranks over any buckets: a + b is exact in either order; with more, a backend may associate a sum
// differently for another buffer layout).
// Who may call: the Trainer (one per run of several ranks) and tests. Thread-safety: Arm/Finish on the training
// thread; the hooks run on the autograd thread while the training thread waits in backward() (a mutex guards the
// state they share).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "trainer/dist/buckets.h"
#include "trainer/dist/communicator.h"

namespace dflash::trainer::dist {

class GradientSync {
 public:
  // `params` (leaves with requires_grad, on the communicator's device) must outlive the object; so must `comm`.
  GradientSync(Communicator& comm, std::vector<torch::Tensor> params, std::int64_t bucket_bytes);
  ~GradientSync();  // removes the hooks
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // The next backward is this rank's last of the step: from now on buckets start as their gradients become final.
  // Until Finish returns, nothing may read or write the gradients (a bucket of one gradient sums it in place).
  void Arm();
  // Starts the buckets not started yet (an undefined gradient counts as zeros, and is made a zero tensor), waits for
  // every bucket (bounded by the communicator's deadline), writes the sums into the gradients and disarms. Must be
  // called once per step on every rank (armed or not). The first error of a hook or of the wait.
  Status Finish();

  std::size_t num_buckets() const { return buckets_.size(); }
  // Buckets the last Finish found already started by the backward (the overlap achieved).
  std::size_t started_in_backward() const { return started_in_backward_; }

 private:
  class Hook;
  void OnGradReady(std::size_t param);        // hook: the autograd thread
  void StartReady(std::unique_lock<std::mutex>& lock);
  void Start(std::size_t bucket);             // with mu_ held

  Communicator& comm_;
  std::vector<torch::Tensor> params_;         // reversed: bucket order
  std::vector<BucketRange> buckets_;
  std::vector<std::size_t> bucket_of_;        // param (reversed index) -> bucket
  std::mutex mu_;
  bool armed_ = false;
  std::vector<std::size_t> pending_;          // gradients of each bucket not final yet (armed)
  std::vector<bool> ready_;                   // per param (armed)
  std::size_t next_ = 0;                      // the next bucket to start
  std::vector<torch::Tensor> flats_;          // per started bucket
  std::vector<torch::Tensor> grads_;          // the gradients the flats were made of, in params_ order
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  Status error_;
  std::size_t started_in_backward_ = 0;
};

}  // namespace dflash::trainer::dist
