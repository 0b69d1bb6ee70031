// FeaturePipeline: the frozen target's forward run ahead of the drafter (dflash-train --pipeline). A worker thread
// computes the features of the rows the Trainer submits, in submission order, while the training thread trains the
// drafter on the rows before them: with the target on its own GPU (--target-device-offset) the target's GPU works on
// row i+1 while the drafter's GPU trains on row i, so a pair's step takes the larger of the two sides, not their sum.
// The results are those of the serial schedule bit for bit: each row's features are computed by the same operations
// on the same inputs, only earlier.
// GPU: the worker runs the target on a stream of its own on the target's device and, when the drafter sits on another
// GPU, copies the features there through a second stream of its own on the drafter's device (the copy overlaps the
// drafter's work too); it waits on the host until a row's forward and copy are complete before handing the features
// over, so no stream of the drafter's GPU ever waits on the target's work (a device-wide synchronisation there, by
// NCCL or the allocator, stays short) and at most one row is computed ahead of the one being trained (double
// buffering: the features being trained on and the next row's). CPU: the same worker thread, LibTorch's operations
// running beside the drafter's.
// Errors: an exception of the target's forward (a c10::Error from a TORCH_CHECK, a missing kernel) is the error of
// that row's Take, as Internal with the message the serial schedule reports; later rows are not computed.
// Who may call: the Trainer. Thread-safety: Submit and Take on one thread (the training thread); the target and its
// Ops are used by the worker alone while the pipeline lives (TargetModel's const methods may run beside other
// threads; the Ops object must be the target's own, not the drafter's).
#pragma once

#include <torch/torch.h>

#include <memory>

#include "base/status.h"
#include "trainer/models/target_model.h"
#include "trainer/ops/ops.h"
#include "trainer/train/train_step.h"

namespace dflash::trainer {

class FeaturePipeline {
 public:
  // Starts the worker. `target` and `target_ops` must outlive the pipeline; the features come out on
  // `drafter_device` (the target's own device when the two share one).
  static Result<std::unique_ptr<FeaturePipeline>> Start(const TargetModel& target, Ops& target_ops,
                                                        torch::Device drafter_device);
  // Stops the worker after the row it is computing (rows submitted and not taken are dropped) and joins it.
  ~FeaturePipeline();
  FeaturePipeline(const FeaturePipeline&) = delete;
  FeaturePipeline& operator=(const FeaturePipeline&) = delete;

  // Queues the target's forward of a row (its input as TargetInputOf makes it). Returns at once.
  void Submit(TargetInput input);
  // The features of the oldest submitted row not taken yet, on the drafter's device: waits until they are complete.
  // Internal when nothing was submitted; the row's error when its forward failed.
  Result<torch::Tensor> Take();
  // The target's own time (host clock, ms) for the rows taken since the last call: from the start of each row's
  // forward to its features being complete on the drafter's device. Overlapped with the drafter's work.
  double TakeTargetMs();

  struct Worker;  // the thread, its queue and its streams

 private:
  explicit FeaturePipeline(std::unique_ptr<Worker> worker);
  std::unique_ptr<Worker> worker_;
  double taken_ms_ = 0.0;
};

// The training thread's current stream on `device` replaced, for the scope's life, by a non-blocking stream of
// LibTorch's pool (the GPU synchronised first, and the stream at the end, so work on either side of the scope stays
// ordered). With the pipeline's worker on the same GPU, the training thread's queued work then never holds up the
// worker's synchronous copies on the legacy default stream (gdn's plan upload, one per gated-delta-net layer), and
// the two sides overlap. CPU: nothing.
class TrainingStreamScope {
 public:
  explicit TrainingStreamScope(torch::Device device);
  ~TrainingStreamScope();
  TrainingStreamScope(const TrainingStreamScope&) = delete;
  TrainingStreamScope& operator=(const TrainingStreamScope&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

// Waits for the work queued on the calling thread's current stream of `device` (CPU: nothing). Unlike a device
// synchronisation it does not wait for the pipeline's worker when the target shares the GPU.
void SynchronizeStream(torch::Device device);

}  // namespace dflash::trainer
