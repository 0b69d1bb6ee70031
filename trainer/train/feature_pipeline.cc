#include "trainer/train/feature_pipeline.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

// c10's CUDA guards are inline code over the CUDA runtime, which the trainer does not link (LibTorch's own copy
// serves LibTorch); the exported stream functions are used instead.
#ifdef DFLASH_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dflash::trainer {

struct FeaturePipeline::Worker {
  struct Done {
    Status status;
    torch::Tensor features;
    double ms = 0.0;
  };

  Worker(const TargetModel& target, Ops& ops, torch::Device drafter_device)
      : target(target), ops(ops), target_device(target.options().device), drafter_device(drafter_device) {}

  void Run() {
#ifdef DFLASH_TORCH_CUDA
    // This thread's current streams for good: the target's work, and the drafter's GPU side of the copy.
    if (target_stream) c10::cuda::setCurrentCUDAStream(*target_stream);
    if (copy_stream) c10::cuda::setCurrentCUDAStream(*copy_stream);
#endif
    for (;;) {
      TargetInput job;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || !jobs.empty(); });
        if (stop) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      const auto start = std::chrono::steady_clock::now();
      Done done;
      try {
        done.features = Compute(job);
      } catch (const c10::Error& e) {  // as TakeStep reports the serial schedule's (a TORCH_CHECK, a missing key)
        done.status = Internal(e.what_without_backtrace());
      } catch (const std::exception& e) {
        done.status = Internal(e.what());
      }
      done.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      const bool failed = !done.status.ok();
      {
        std::lock_guard lock(mu);
        if (failed) failure = done.status;
        this->done.push_back(std::move(done));
      }
      cv.notify_all();
      if (failed) return;  // later rows are not computed; their Take reports this failure
    }
  }

  // The serial schedule's computation (TargetFeatures), complete when it returns: a copy between GPUs runs on the
  // source's current stream (the target's), so one synchronisation covers the forward and the copy.
  torch::Tensor Compute(const TargetInput& job) {
    torch::Tensor f = TargetFeatures(job, target, ops, drafter_device);
#ifdef DFLASH_TORCH_CUDA
    if (target_stream) target_stream->synchronize();
#endif
    return f;
  }

  const TargetModel& target;
  Ops& ops;
  const torch::Device target_device;
  const torch::Device drafter_device;
#ifdef DFLASH_TORCH_CUDA
  std::optional<c10::cuda::CUDAStream> target_stream;  // the target's work (GPU runs)
  std::optional<c10::cuda::CUDAStream> copy_stream;    // the drafter's GPU side of the copy (pairs only)
#endif
  std::mutex mu;
  std::condition_variable cv;
  std::deque<TargetInput> jobs;  // submitted, not started
  std::deque<Done> done;         // finished, not taken
  int pending = 0;               // submitted, not taken (training thread only)
  Status failure;                // the first row whose forward failed
  bool stop = false;
  std::thread thread;
};

FeaturePipeline::FeaturePipeline(std::unique_ptr<Worker> worker) : worker_(std::move(worker)) {}

Result<std::unique_ptr<FeaturePipeline>> FeaturePipeline::Start(const TargetModel& target, Ops& target_ops,
                                                                torch::Device drafter_device) {
  auto worker = std::make_unique<Worker>(target, target_ops, drafter_device);
  const torch::Device target_device = worker->target_device;
  if (target_device.is_cuda() != drafter_device.is_cuda()) {
    return InvalidArgument("the feature pipeline needs the target and the drafter both on GPUs or both on the CPU (" +
                           target_device.str() + ", " + drafter_device.str() + ")");
  }
  if (target_device.is_cuda()) {
#ifdef DFLASH_TORCH_CUDA
    // Streams of the pool are non-blocking: they never wait for, nor hold up, the legacy default stream. So the
    // work queued there before (the weights drawn or loaded) must be complete first.
    torch::cuda::synchronize(target_device.index());
    if (drafter_device != target_device) torch::cuda::synchronize(drafter_device.index());
    worker->target_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, target_device.index());
    if (drafter_device != target_device) {
      worker->copy_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, drafter_device.index());
    }
#else
    return Unsupported("the feature pipeline on GPUs needs LibTorch's CUDA backend");
#endif
  }
  Worker* w = worker.get();
  w->thread = std::thread([w] { w->Run(); });
  return std::unique_ptr<FeaturePipeline>(new FeaturePipeline(std::move(worker)));
}

FeaturePipeline::~FeaturePipeline() {
  {
    std::lock_guard lock(worker_->mu);
    worker_->stop = true;
  }
  worker_->cv.notify_all();
  worker_->thread.join();
}

void FeaturePipeline::Submit(TargetInput input) {
  {
    std::lock_guard lock(worker_->mu);
    worker_->jobs.push_back(std::move(input));
  }
  ++worker_->pending;
  worker_->cv.notify_all();
}

Result<torch::Tensor> FeaturePipeline::Take() {
  Worker& w = *worker_;
  if (w.pending == 0) return Internal("FeaturePipeline::Take without a submitted row");
  Worker::Done done;
  {
    std::unique_lock lock(w.mu);
    w.cv.wait(lock, [&] { return !w.done.empty() || !w.failure.ok(); });
    if (w.done.empty()) {
      --w.pending;
      return Status(w.failure.code(), "the target's forward of an earlier row failed: " + w.failure.message());
    }
    done = std::move(w.done.front());
    w.done.pop_front();
  }
  --w.pending;
  if (!done.status.ok()) return done.status;
  taken_ms_ += done.ms;
#ifdef DFLASH_TORCH_CUDA
  if (done.features.is_cuda()) {
    // Allocated on the worker's stream, used on the training thread's: the allocator must not hand the memory to
    // the worker's next row before the work queued here on it has run.
    c10::cuda::CUDACachingAllocator::recordStream(
        done.features.storage().data_ptr(), c10::cuda::getCurrentCUDAStream(done.features.device().index()));
  }
#endif
  return std::move(done.features);
}

struct TrainingStreamScope::Saved {
#ifdef DFLASH_TORCH_CUDA
  std::optional<c10::cuda::CUDAStream> before, own;
#endif
};

TrainingStreamScope::TrainingStreamScope(torch::Device device) : saved_(std::make_unique<Saved>()) {
#ifdef DFLASH_TORCH_CUDA
  if (!device.is_cuda()) return;
  const auto index = device.has_index() ? device.index() : 0;
  saved_->before = c10::cuda::getCurrentCUDAStream(index);
  saved_->before->synchronize();
  saved_->own = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
  c10::cuda::setCurrentCUDAStream(*saved_->own);
#else
  (void)device;
#endif
}

TrainingStreamScope::~TrainingStreamScope() {
#ifdef DFLASH_TORCH_CUDA
  if (!saved_->own) return;
  saved_->own->synchronize();
  c10::cuda::setCurrentCUDAStream(*saved_->before);
#endif
}

void SynchronizeStream(torch::Device device) {
#ifdef DFLASH_TORCH_CUDA
  if (device.is_cuda()) c10::cuda::getCurrentCUDAStream(device.has_index() ? device.index() : 0).synchronize();
#else
  (void)device;
#endif
}

double FeaturePipeline::TakeTargetMs() { return std::exchange(taken_ms_, 0.0); }

}  // namespace dflash::trainer
