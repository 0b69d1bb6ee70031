// StepTimer: where one optimizer step's time goes, measured on every step. The step marks the end of each phase as
// it issues it; on a GPU a mark is a CUDA event recorded on torch's current stream of the step's device (a few
// microseconds of host time, nothing on the GPU's critical path), read back once after the step has synchronised;
// on the CPU a mark is the host clock (the work is synchronous there). A phase's time is the sum over the step's rows
// of mark-to-previous-mark, so a phase that waits for the one before it counts from that one's end; Lap() marks the
// end of host work that belongs to no phase (a row's data and anchors).
// Phases: target forward (features), drafter forward, loss (lm_head + cross-entropy forward), backward (loss and
// drafter), gradient sync (several ranks), clip + optimizer; `host` is the rest of the step's wall time (the rows'
// data and anchors, host work after the last phase, and what host synchronisations add).
// Who may call: the Trainer and the row step. Thread-safety: one thread.
#pragma once

#include <torch/torch.h>

#include <array>
#include <chrono>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace dflash::trainer {

enum class StepPhase { kTargetForward, kDrafterForward, kLoss, kBackward, kGradSync, kOptimizer };
constexpr int kNumStepPhases = 6;
const char* StepPhaseName(StepPhase phase);  // "target_forward", ..., "optimizer"

struct StepPhaseTimes {
  std::array<double, kNumStepPhases> ms{};  // per phase
  double host_ms = 0.0;                     // wall time not covered by the phases (see the header comment)
  nlohmann::json ToJson() const;            // {"target_forward": ms, ..., "host": ms}
};

class StepTimer {
 public:
  // Events on `device` when it is a GPU of LibTorch's CUDA backend, else host clocks.
  static Result<std::unique_ptr<StepTimer>> Create(torch::Device device);
  ~StepTimer();

  // The step starts: the first mark.
  Status Begin();
  // `phase` ends here (its time runs from the previous mark).
  Status End(StepPhase phase);
  // Host work of no phase ends here (its time counts as host).
  Status Lap();
  // After the step's work has completed (the caller synchronised the device): the phase times of the marks since
  // Begin, with host_ms = wall_ms - the sum of the phases.
  Result<StepPhaseTimes> Collect(double wall_ms);

  struct Marks;  // the events (GPU) or clock readings (CPU) of one step, reused from step to step

 private:
  explicit StepTimer(std::unique_ptr<Marks> marks);
  std::unique_ptr<Marks> marks_;
};

}  // namespace dflash::trainer
