// Trainer: a whole dflash-train run (spec dflash-training.md §4-§7): loads the target (only up to the last tap) and
// the drafter, streams the data, runs optimizer steps (rows x accumulation, loss normalised over the global batch,
// gradient clipping, AdamW over fp32 masters, warmup + cosine), logs metrics, writes checkpoints and resumes from
// them bit-for-bit.
// Ops: the kernel backend is chosen once (ops_setup.h): on a GPU the cached tuned kernels, resolved before the first
// step (a missing key stops the run with the warmup command), on the CPU LibTorch's own operations.
// Data parallelism (trainer/dist): started as one of several ranks (torchrun environment), each rank trains its
// shard of every step's rows (dist/shard.h) on cuda:LOCAL_RANK, the step's statistics and gradients are summed over
// the ranks before the loss normalisation, clipping and AdamW (identical on every rank), the ranks agree on every
// cached kernel before the first step, and rank 0 alone writes metrics and checkpoints. The gradient all-reduce is
// bucketed and overlapped with the backward of each step's last row (dist/grad_sync.h).
// Placement (dist/placement.h): the target on the drafter's GPU, or with --target-device-offset K on the GPU K
// further (its cached kernels from a second CachedKernelOps on that device, its features moved GPU to GPU).
// Pipeline (--pipeline, feature_pipeline.h; on by default in pairs): the target's forward of the next row runs on a
// worker thread while the drafter trains on this one, with its own Ops backend. The rows are read from the stream
// one step ahead when the next row belongs to the next step; a checkpoint records the stream's position at the step
// boundary, so a resumed run continues bit for bit whatever was read ahead.
// Who may call: tools/dflash_train and tests. Thread-safety: one thread.
#pragma once

#include <deque>
#include <memory>
#include <ostream>
#include <vector>

#include "base/status.h"
#include "cache/kernel_cache.h"
#include "trainer/data/batcher.h"
#include "trainer/dist/communicator.h"
#include "trainer/dist/grad_sync.h"
#include "trainer/dist/rank_env.h"
#include "trainer/dist/shard.h"
#include "trainer/models/drafter.h"
#include "trainer/models/target_model.h"
#include "trainer/ops/ops.h"
#include "trainer/train/adamw.h"
#include "trainer/train/feature_pipeline.h"
#include "trainer/train/lr_schedule.h"
#include "trainer/train/metrics.h"
#include "trainer/train/ops_setup.h"
#include "trainer/train/step_profiler.h"
#include "trainer/train/step_timer.h"
#include "trainer/train/train_options.h"

namespace dflash::trainer {

// Asks a running Trainer::Run to save a checkpoint after the current step and return (async-signal-safe: the
// SIGINT/SIGTERM handler of dflash-train calls it).
void RequestTrainingStop();

class Trainer {
 public:
  // Validates the options, loads models and data, resumes when asked. `log` receives the start-up report (devices,
  // shapes, the kernel provenance table) and the progress line; it must outlive the Trainer.
  // The ranks come from the process environment (dist/rank_env.h; none set: one process); errors name the variable.
  static Result<std::unique_ptr<Trainer>> Create(const TrainOptions& options, std::ostream& log);
  // The same as rank `env` (a default RankEnv: a single process whatever the environment says).
  static Result<std::unique_ptr<Trainer>> Create(const TrainOptions& options, std::ostream& log,
                                                 const dist::RankEnv& env);

  // Trains until the schedule ends (or max_steps), saving checkpoints on the way and at the end.
  Status Run();

  const Drafter& drafter() const { return *drafter_; }
  const TargetModel& target() const { return *target_; }
  std::int64_t step() const { return step_; }
  std::int64_t total_steps() const { return schedule_.total_steps; }
  // The metrics of the last step taken (zero before the first).
  const StepMetrics& last_metrics() const { return last_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }

 private:
  Trainer(const TrainOptions& options, std::ostream& log) : options_(options), log_(log) {}
  // The stages of Create, in order: the devices and ranks; the target and drafter; their op backends (the cached
  // kernels resolved, the ranks agreeing on them); the data and schedule; a resumed checkpoint or a fresh start.
  Status SetUpDevices(const dist::RankEnv& env);
  Status LoadModels();
  Status SetUpOps();
  Status SetUpData();
  Status ResumeOrStart(const dist::RankEnv& env);
  // The rows of one optimizer step as this rank trains them (rows of other ranks and rows with fewer than 2 tokens
  // are read and counted, not kept) and where the stream stood before the step.
  struct PlannedRow {
    data::Row row;
    std::uint64_t anchor_seed = 0;
    bool last_owned = false;  // this rank's last row of the step (its backward overlaps the gradient all-reduce)
  };
  struct PlannedStep {
    data::BatcherState start;        // the stream's position before the step: what a checkpoint after the
    std::int64_t rows_done_start = 0;  // step before it records
    std::vector<PlannedRow> rows;
    std::int64_t epoch = 0;          // the epoch of the step's last row
    std::size_t submitted = 0;       // rows handed to the pipeline
  };
  Result<PlannedStep> ReadStep();
  // Pipeline: hands it the current step's rows up to k + 1, or the next step's first row (read ahead) when k is
  // the last; nothing past the schedule's last step.
  Status SubmitAhead(std::size_t k);
  Status TakeStep();
  Status Save();
  // --profile-steps: starts the trace after the process's first step, stops and saves it N steps later.
  Status ProfileAround(std::int64_t steps_in_process);
  // Data parallelism: every rank must run the same kernels (entry digests and cubin checksums all-gathered).
  Status AgreeOnKernels();
  // Places the target on its own GPU when --target-device-offset asks (sets target_device_).
  Status PlaceTarget(const dist::RankEnv& env);
  // The Ops a row runs on: the drafter's, or the pair routed by device.
  Ops& RowOps() { return routed_ops_ ? *routed_ops_ : *ops_; }

  TrainOptions options_;
  std::ostream& log_;
  torch::Device device_ = torch::kCPU;
  torch::Dtype compute_dtype_ = torch::kFloat;
  torch::Device target_device_ = torch::kCPU;  // device_ unless in pairs
  std::unique_ptr<TargetModel> target_;
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<cache::KernelCache> kernel_cache_;  // what the cached kernels were loaded from (GPU runs)
  std::unique_ptr<Ops> ops_;                          // the drafter's device (and the target's, unless in pairs)
  std::unique_ptr<cache::KernelCache> target_kernel_cache_;  // in pairs: the target's device's backend
  std::unique_ptr<Ops> target_ops_;
  std::unique_ptr<Ops> routed_ops_;
  bool pipelined_ = false;                      // --pipeline (resolved against the placement)
  std::unique_ptr<FeaturePipeline> pipeline_;   // while Run() runs; uses target_ and target_ops_
  std::vector<KernelUse> kernel_uses_;  // the cached kernels of both backends (rank agreement); empty: reference
  torch::Tensor head_embed_, head_lm_;                // in pairs: the target's embedding and lm_head on device_
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<data::Batcher> batcher_;
  std::unique_ptr<MetricsLog> metrics_log_;   // rank 0 only
  std::unique_ptr<StepTimer> timer_;          // the phases of every step (on the drafter's device)
  std::unique_ptr<StepProfiler> profiler_;    // while --profile-steps records
  std::int64_t profile_first_step_ = 0;       // the first step the running profile holds
  std::unique_ptr<dist::Communicator> comm_;  // world of 1: every collective is the identity
  std::unique_ptr<dist::GradientSync> grad_sync_;  // several ranks only
  dist::StepShard shard_;
  bool stop_agreed_ = false;      // some rank was asked to stop during the last step: all ranks stop after it
  LrSchedule schedule_;
  std::int64_t step_ = 0;
  std::int64_t rows_done_ = 0;    // rows read from the stream over the run (seeds the anchors of the next row)
  std::deque<PlannedStep> planned_;  // the step being trained and, with the pipeline, the next one read ahead
  double elapsed_s_ = 0.0;        // training time over the run (resumed runs continue it)
  std::int64_t epoch_ = 0;
  bool stepped_in_process_ = false;  // a step was taken by this process (start-up time is reported once)
  bool fixed_shapes_ = false;     // rows run at full length (the cached kernels' keys are per shape)
  StepMetrics last_;
};

}  // namespace dflash::trainer
