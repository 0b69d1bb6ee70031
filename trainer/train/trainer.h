// Trainer: a whole dflash-train run (spec dflash-training.md §4-§7): loads the target (only up to the last tap) and
// the drafter, streams the data, runs optimizer steps (rows x accumulation, loss normalised over the global batch,
// gradient clipping, AdamW over fp32 masters, warmup + cosine), logs metrics, writes checkpoints and resumes from
// them bit-for-bit.
// Ops: the kernel backend is chosen once (ops_setup.h): on a GPU the cached tuned kernels, resolved before the first
// step (a missing key stops the run with the warmup command), on the CPU LibTorch's own operations.
// Who may call: tools/dflash_train and tests. Thread-safety: one thread.
#pragma once

#include <memory>
#include <ostream>

#include "cache/status.h"
#include "cache/kernel_cache.h"
#include "trainer/data/batcher.h"
#include "trainer/models/drafter.h"
#include "trainer/models/target_model.h"
#include "trainer/ops/ops.h"
#include "trainer/train/adamw.h"
#include "trainer/train/lr_schedule.h"
#include "trainer/train/metrics.h"
#include "trainer/train/train_options.h"

namespace dflash::trainer {

// Asks a running Trainer::Run to save a checkpoint after the current step and return (async-signal-safe: the
// SIGINT/SIGTERM handler of dflash-train calls it).
void RequestTrainingStop();

class Trainer {
 public:
  // Validates the options, loads models and data, resumes when asked. `log` receives the start-up report (devices,
  // shapes, the kernel provenance table) and the progress line; it must outlive the Trainer.
  static Result<std::unique_ptr<Trainer>> Create(const TrainOptions& options, std::ostream& log);

  // Trains until the schedule ends (or max_steps), saving checkpoints on the way and at the end.
  Status Run();

  const Drafter& drafter() const { return *drafter_; }
  const TargetModel& target() const { return *target_; }
  std::int64_t step() const { return step_; }
  std::int64_t total_steps() const { return schedule_.total_steps; }
  // The metrics of the last step taken (zero before the first).
  const StepMetrics& last_metrics() const { return last_; }

 private:
  Trainer(const TrainOptions& options, std::ostream& log) : options_(options), log_(log) {}
  Status TakeStep();
  Status Save();

  TrainOptions options_;
  std::ostream& log_;
  torch::Device device_ = torch::kCPU;
  torch::Dtype compute_dtype_ = torch::kFloat;
  std::unique_ptr<TargetModel> target_;
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<cache::KernelCache> kernel_cache_;  // what the cached kernels were loaded from (GPU runs)
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<data::Batcher> batcher_;
  std::unique_ptr<MetricsLog> metrics_log_;
  LrSchedule schedule_;
  std::int64_t step_ = 0;
  std::int64_t rows_done_ = 0;    // rows consumed over the run (seeds the anchors of the next row)
  double elapsed_s_ = 0.0;        // training time over the run (resumed runs continue it)
  std::int64_t epoch_ = 0;
  bool stepped_in_process_ = false;  // a step was taken by this process (start-up time is reported once)
  bool fixed_shapes_ = false;     // rows run at full length (the cached kernels' keys are per shape)
  StepMetrics last_;
};

}  // namespace dflash::trainer
