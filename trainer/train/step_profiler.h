// StepProfiler: a trace of every host operation and GPU kernel of a few training steps (dflash-train
// --profile-steps N), through LibTorch's profiler (Kineto; CUPTI on a GPU, so the cached kernels launched through
// the driver API appear beside LibTorch's own), saved as a Chrome trace JSON that Perfetto (ui.perfetto.dev) and
// chrome://tracing load. At most one profiler runs in a process.
// Who may call: the Trainer. Thread-safety: one thread (the one that trains).
#pragma once

#include <filesystem>
#include <memory>

#include "base/status.h"

namespace dflash::trainer {

class StepProfiler {
 public:
  // Starts recording host operations, and the GPU's kernels and copies when `cuda`. Internal when another profiler
  // already runs or LibTorch's profiler cannot start (a LibTorch built without Kineto).
  static Result<std::unique_ptr<StepProfiler>> Start(bool cuda);
  ~StepProfiler();  // stops without saving if still running

  // Stops recording and writes the trace to `path` (a .json file; its folder must exist).
  Status StopAndSave(const std::filesystem::path& path);

 private:
  StepProfiler() = default;
  bool running_ = false;
};

}  // namespace dflash::trainer
