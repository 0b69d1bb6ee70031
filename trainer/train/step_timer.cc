#include "trainer/train/step_timer.h"

#include <algorithm>
#include <optional>
#include <utility>

#ifdef DFLASH_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "tuner/gpu_runtime.h"

namespace dflash::trainer {

const char* StepPhaseName(StepPhase phase) {
  switch (phase) {
    case StepPhase::kTargetForward: return "target_forward";
    case StepPhase::kDrafterForward: return "drafter_forward";
    case StepPhase::kLoss: return "loss";
    case StepPhase::kBackward: return "backward";
    case StepPhase::kGradSync: return "grad_sync";
    case StepPhase::kOptimizer: return "optimizer";
  }
  return "unknown";
}

nlohmann::json StepPhaseTimes::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (int p = 0; p < kNumStepPhases; ++p) j[StepPhaseName(static_cast<StepPhase>(p))] = ms[p];
  j["host"] = host_ms;
  return j;
}

struct StepTimer::Marks {
  std::optional<gpu::Context> ctx;  // GPU: the device's primary context (LibTorch's), current while recording
  int device_index = -1;
  std::vector<gpu::Event> events;   // GPU: events[0] is Begin's, then one per End (grown, never shrunk)
  std::vector<std::chrono::steady_clock::time_point> clocks;  // CPU: the same marks as host clock readings
  std::vector<int> phases;          // phases[i] ends at mark i + 1 (a StepPhase, or -1 for a Lap)
  std::size_t used = 0;             // marks recorded in this step

  Status Mark() {
    if (!ctx) {
      if (clocks.size() <= used) clocks.resize(used + 1);
      clocks[used++] = std::chrono::steady_clock::now();
      return Status::Ok();
    }
#ifdef DFLASH_TORCH_CUDA
    DFLASH_RETURN_IF_ERROR(ctx->MakeCurrent());
    if (events.size() <= used) {
      DFLASH_ASSIGN_OR_RETURN(gpu::Event e, gpu::Event::Create());
      events.push_back(std::move(e));
    }
    const auto stream = reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(device_index).stream());
    DFLASH_RETURN_IF_ERROR(events[used].Record(stream));
    ++used;
    return Status::Ok();
#else
    return Unsupported("GPU step timing needs LibTorch's CUDA backend");
#endif
  }

  Result<double> Between(std::size_t a, std::size_t b) const {  // ms from mark a to mark b
    if (!ctx) return std::chrono::duration<double, std::milli>(clocks[b] - clocks[a]).count();
    DFLASH_ASSIGN_OR_RETURN(float ms, gpu::Event::Elapsed(events[a], events[b]));
    return static_cast<double>(ms);
  }
};

StepTimer::StepTimer(std::unique_ptr<Marks> marks) : marks_(std::move(marks)) {}
StepTimer::~StepTimer() = default;

Result<std::unique_ptr<StepTimer>> StepTimer::Create(torch::Device device) {
  auto marks = std::make_unique<Marks>();
#ifdef DFLASH_TORCH_CUDA
  if (device.is_cuda()) {
    marks->device_index = device.has_index() ? device.index() : 0;
    DFLASH_ASSIGN_OR_RETURN(gpu::Context ctx, gpu::Context::Primary(marks->device_index));
    marks->ctx.emplace(std::move(ctx));
  }
#else
  if (device.is_cuda()) return Unsupported("GPU step timing needs LibTorch's CUDA backend");
#endif
  return std::unique_ptr<StepTimer>(new StepTimer(std::move(marks)));
}

Status StepTimer::Begin() {
  marks_->used = 0;
  marks_->phases.clear();
  return marks_->Mark();
}

Status StepTimer::End(StepPhase phase) {
  if (marks_->used == 0) return Internal("StepTimer::End before Begin");
  marks_->phases.push_back(static_cast<int>(phase));
  return marks_->Mark();
}

Status StepTimer::Lap() {
  if (marks_->used == 0) return Internal("StepTimer::Lap before Begin");
  marks_->phases.push_back(-1);
  return marks_->Mark();
}

Result<StepPhaseTimes> StepTimer::Collect(double wall_ms) {
  StepPhaseTimes t;
  const Marks& m = *marks_;
  double phases = 0.0;
  for (std::size_t i = 0; i < m.phases.size(); ++i) {
    if (m.phases[i] < 0) continue;
    DFLASH_ASSIGN_OR_RETURN(double ms, m.Between(i, i + 1));
    t.ms[m.phases[i]] += ms;
    phases += ms;
  }
  t.host_ms = std::max(0.0, wall_ms - phases);
  return t;
}

}  // namespace dflash::trainer
