#include "trainer/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>

#include "trainer/data/anchors.h"
#include "trainer/data/jsonl_dataset.h"
#include "trainer/dist/placement.h"
#include "trainer/train/device_routed_ops.h"
#include "trainer/train/ops_setup.h"
#include "trainer/train/train_checkpoint.h"
#include "trainer/train/train_step.h"

namespace dflash::trainer {
namespace fs = std::filesystem;
namespace {

std::atomic<bool> g_stop_requested{false};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

Result<setup::DrafterConfig> DrafterConfigFor(const TrainOptions& o, const setup::TargetConfig& target) {
  if (!o.drafter_init.empty()) return setup::LoadDrafterConfig(o.drafter_init / "config.json");
  if (o.drafter_config.empty()) return InvalidArgument("give --drafter-config (fresh drafter) or --drafter-init");
  DFLASH_ASSIGN_OR_RETURN(setup::DrafterConfig c, setup::LoadDrafterConfig(o.drafter_config));
  return c;
}

// The options of this rank: the world size recorded, the device of a multi-GPU run made cuda:LOCAL_RANK.
Result<TrainOptions> RankOptions(const TrainOptions& options, const dist::RankEnv& env) {
  TrainOptions o = options;
  o.world_size = env.world_size;
  if (!env.distributed()) return o;
  if (o.device == "cuda" || (o.device == "auto" && torch::cuda::is_available())) {
    const int gpus = static_cast<int>(torch::cuda::device_count());
    if (env.local_rank >= gpus) {
      return InvalidArgument("LOCAL_RANK=" + std::to_string(env.local_rank) + " but this host has " +
                             std::to_string(gpus) + " GPU(s): start at most one rank per GPU");
    }
    o.device = "cuda:" + std::to_string(env.local_rank);
  }
  return o;
}

Status ValidateOptions(const TrainOptions& o) {
  if (o.target_dir.empty() == o.random_target.empty()) {
    return InvalidArgument("give exactly one of --target (a Hugging Face model folder) and --random-target "
                           "(a config.json)");
  }
  if (o.data.empty()) return InvalidArgument("--data is required (a tokenized JSONL file)");
  if (o.output_dir.empty()) return InvalidArgument("--output is required");
  if (o.max_length < 2 || o.num_anchors < 1 || o.batch_size < 1 || o.grad_accum < 1 || o.epochs < 1 ||
      o.max_steps < 0 || o.loss_chunk_rows < 1) {
    return InvalidArgument("--max-length >= 2, --anchors, --batch-size, --grad-accum, --epochs, --loss-chunk-rows "
                           ">= 1 and --max-steps >= 0 are required");
  }
  if (!(o.lr > 0) || o.warmup_fraction < 0 || o.warmup_fraction > 1 || o.max_grad_norm < 0) {
    return InvalidArgument("--lr must be > 0, --warmup in [0, 1], --max-grad-norm >= 0");
  }
  if (o.dist_timeout_s < 1 || o.bucket_mb < 1) return InvalidArgument("--dist-timeout and --bucket-mb must be >= 1");
  if (o.target_device_offset < 0) {
    return InvalidArgument("--target-device-offset must be >= 0 (0: the target on the drafter's GPU)");
  }
  if (o.profile_steps < 0) return InvalidArgument("--profile-steps must be >= 0 (0: no trace)");
  return Status::Ok();
}

// The drafter runs on the target's features, embedding and lm_head: their sizes must agree.
Status CheckDrafterFitsTarget(const setup::DrafterConfig& d, const setup::TargetConfig& t) {
  if (d.vocab_size != 0 && d.vocab_size != t.vocab_size) {
    return InvalidArgument("the drafter's vocab_size " + std::to_string(d.vocab_size) + " differs from the target's " +
                           std::to_string(t.vocab_size));
  }
  if (d.mask_token_id < 0 || d.mask_token_id >= t.vocab_size) {
    return InvalidArgument("mask_token_id " + std::to_string(d.mask_token_id) + " is outside the target's vocabulary");
  }
  if (d.hidden_size != t.hidden_size) {
    return InvalidArgument("the drafter's hidden_size must equal the target's (it uses the target's embedding)");
  }
  return Status::Ok();
}

}  // namespace

void RequestTrainingStop() { g_stop_requested = true; }

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& options, std::ostream& log) {
  DFLASH_ASSIGN_OR_RETURN(dist::RankEnv env, dist::ReadRankEnv());
  return Create(options, log, env);
}

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& given, std::ostream& log,
                                                 const dist::RankEnv& env) {
  DFLASH_ASSIGN_OR_RETURN(TrainOptions options, RankOptions(given, env));
  DFLASH_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<Trainer> t(new Trainer(options, log));
  DFLASH_RETURN_IF_ERROR(t->SetUpDevices(env));
  DFLASH_RETURN_IF_ERROR(t->LoadModels());
  DFLASH_RETURN_IF_ERROR(t->SetUpOps());
  DFLASH_RETURN_IF_ERROR(t->SetUpData());
  DFLASH_RETURN_IF_ERROR(t->ResumeOrStart(env));
  return t;
}

Status Trainer::SetUpDevices(const dist::RankEnv& env) {
  const TrainOptions& o = options_;
  DFLASH_ASSIGN_OR_RETURN(RunDevice device, ResolveDevice(o));
  device_ = device.device;
  compute_dtype_ = device.compute_dtype;
  DFLASH_RETURN_IF_ERROR(PlaceTarget(env));
  DFLASH_ASSIGN_OR_RETURN(comm_, dist::Communicator::Create(env, device_, std::chrono::seconds(o.dist_timeout_s)));
  shard_ = {env.rank, env.world_size, o.batch_size * o.grad_accum};
  if (env.distributed()) {
    log_ << "data parallel: rank " << env.rank << " of " << env.world_size << " (local rank " << env.local_rank
         << ") on " << device_.str() << ", " << (device_.is_cuda() ? "NCCL" : "gloo") << " through "
         << env.master_addr << ":" << env.master_port << ", timeout " << o.dist_timeout_s << " s\n";
  }
  if (target_device_ != device_) {
    log_ << "placement: drafter on " << device_.str() << ", target on " << target_device_.str()
         << " (--target-device-offset " << o.target_device_offset << ": features move GPU to GPU)\n";
  }
  pipelined_ = o.pipeline == PipelineMode::kOn || (o.pipeline == PipelineMode::kAuto && target_device_ != device_);
  if (pipelined_) {
    log_ << "pipeline: the target computes the next row's features on " << target_device_.str()
         << (target_device_ == device_ ? (device_.is_cuda() ? " (a stream of its own)" : " (a thread of its own)")
                                       : std::string())
         << " while the drafter trains on this one (--pipeline off: in series)\n";
  }
  return Status::Ok();
}

Status Trainer::LoadModels() {
  const TrainOptions& o = options_;
  const bool random_target = !o.random_target.empty();
  DFLASH_ASSIGN_OR_RETURN(setup::TargetConfig target_config,
                          setup::LoadTargetConfig(random_target ? o.random_target : o.target_dir / "config.json"));
  DFLASH_ASSIGN_OR_RETURN(setup::DrafterConfig drafter_config, DrafterConfigFor(o, target_config));
  DFLASH_ASSIGN_OR_RETURN(std::vector<std::int64_t> taps, setup::ResolveTappedLayers(drafter_config, target_config));
  drafter_config.target_layer_ids = taps;
  drafter_config.num_target_layers = target_config.num_hidden_layers;
  DFLASH_RETURN_IF_ERROR(CheckDrafterFitsTarget(drafter_config, target_config));
  TargetLoadOptions target_options;
  target_options.device = target_device_;
  target_options.dtype = device_.is_cuda() ? torch::kBFloat16 : compute_dtype_;
  target_options.taps = taps;
  log_ << "target: " << (random_target ? "random, shaped as " + o.random_target.string() : o.target_dir.string())
       << " (" << target_config.model_type << ", " << target_config.num_hidden_layers << " layers, taps";
  for (auto l : taps) log_ << ' ' << l;
  log_ << "; layers after " << taps.back() << " not loaded)\n";
  if (random_target) {
    const auto start = std::chrono::steady_clock::now();
    try {
      target_ = TargetModel::RandomInit(target_config, target_options, o.seed);
    } catch (const c10::Error& e) {
      return InvalidArgument("--random-target " + o.random_target.string() + ": " + e.what_without_backtrace());
    }
    log_ << "target: random weights drawn on " << target_device_.str() << " in " << Seconds(start) << " s\n";
  } else {
    DFLASH_ASSIGN_OR_RETURN(target_, TargetModel::Load(o.target_dir, target_options));
  }
  if (!o.drafter_init.empty()) {
    DFLASH_ASSIGN_OR_RETURN(drafter_, Drafter::Load(o.drafter_init, device_));
  } else {
    try {
      drafter_ = Drafter::Create(drafter_config, device_, o.seed);
    } catch (const c10::Error& e) {
      return InvalidArgument("drafter config " + o.drafter_config.string() + ": " + e.what_without_backtrace());
    }
  }
  std::int64_t num_params = 0;
  for (const auto& [name, p] : drafter_->named_parameters()) num_params += p.numel();
  log_ << "drafter: " << drafter_config.num_hidden_layers << " layers, hidden " << drafter_config.hidden_size << ", "
       << num_params << " trainable parameters (fp32 masters), compute " << torch::toString(compute_dtype_) << " on "
       << device_.str() << "\n";
  return Status::Ok();
}

Status Trainer::SetUpOps() {
  const TrainOptions& o = options_;
  const setup::TargetConfig& target_config = target_->config();
  const setup::DrafterConfig& drafter_config = drafter_->config();
  const bool pairs = target_device_ != device_;  // target and drafter on two GPUs: one backend per side
  const bool split = pairs || pipelined_;       // so too when the pipeline's worker runs the target
  const setup::OpSide side = split ? setup::OpSide::kDrafter : setup::OpSide::kBoth;
  DFLASH_ASSIGN_OR_RETURN(OpsBackend backend,
                          MakeOps(o, RunDevice{device_, compute_dtype_}, target_config, drafter_config, side, log_));
  fixed_shapes_ = backend.cache != nullptr;
  kernel_uses_ = std::move(backend.uses);
  kernel_cache_ = std::move(backend.cache);
  ops_ = std::move(backend.ops);
  if (split) {
    log_ << "target ops on " << target_device_.str() << ":\n";
    DFLASH_ASSIGN_OR_RETURN(OpsBackend target_backend, MakeOps(o, RunDevice{target_device_, compute_dtype_},
                                                               target_config, drafter_config,
                                                               setup::OpSide::kTarget, log_));
    kernel_uses_.insert(kernel_uses_.end(), target_backend.uses.begin(), target_backend.uses.end());
    target_kernel_cache_ = std::move(target_backend.cache);
    target_ops_ = std::move(target_backend.ops);
  }
  if (pairs) {
    routed_ops_ = std::make_unique<DeviceRoutedOps>(*ops_, device_, *target_ops_, target_device_);
    torch::NoGradGuard no_grad;
    head_embed_ = target_->embed_tokens().to(device_);
    head_lm_ = target_->lm_head().is_same(target_->embed_tokens()) ? head_embed_ : target_->lm_head().to(device_);
  }
  return AgreeOnKernels();
}

Status Trainer::SetUpData() {
  const TrainOptions& o = options_;
  DFLASH_ASSIGN_OR_RETURN(auto dataset, data::JsonlDataset::Open(o.data));
  auto shared_dataset = std::make_shared<const data::JsonlDataset>(std::move(dataset));
  data::BatcherOptions batcher_options;
  batcher_options.max_length = static_cast<std::size_t>(o.max_length);
  batcher_options.mode = o.row_mode;
  batcher_options.seed = o.seed;
  DFLASH_ASSIGN_OR_RETURN(auto batcher, data::Batcher::Create(shared_dataset, batcher_options));
  batcher_ = std::make_unique<data::Batcher>(std::move(batcher));
  const std::int64_t rows_per_step = shard_.global_rows();
  std::int64_t total_rows = 0;
  for (std::int64_t e = 0; e < o.epochs; ++e) total_rows += static_cast<std::int64_t>(batcher_->RowsInEpoch(e));
  schedule_.peak_lr = o.lr;
  schedule_.warmup_fraction = o.warmup_fraction;
  schedule_.total_steps = o.max_steps > 0 ? o.max_steps : std::max<std::int64_t>(1, total_rows / rows_per_step);
  log_ << "data: " << o.data.string() << " (" << shared_dataset->size() << " samples), " << total_rows
       << " rows over " << o.epochs << " epochs, " << rows_per_step << " rows per step"
       << (shard_.world_size > 1 ? " (" + std::to_string(shard_.rows_per_rank) + " per rank)" : std::string())
       << " -> " << schedule_.total_steps << " steps\n";
  AdamWOptions adam;
  adam.weight_decay = o.weight_decay;
  optimizer_ = std::make_unique<AdamW>(drafter_->named_parameters(), adam);
  return Status::Ok();
}

Status Trainer::ResumeOrStart(const dist::RankEnv& env) {
  const TrainOptions& o = options_;
  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  if (ec) return IoError("cannot create --output " + o.output_dir.string() + ": " + ec.message());
  auto latest = LatestCheckpoint(o.output_dir);
  if (o.resume) {
    if (!latest.ok()) return latest.status().WithContext("--resume");
    DFLASH_ASSIGN_OR_RETURN(TrainState state, LoadTrainCheckpoint(*latest, *drafter_, *optimizer_));
    DFLASH_RETURN_IF_ERROR(o.CheckResumable(state.options));
    DFLASH_RETURN_IF_ERROR(batcher_->Restore(state.batcher).WithContext("--resume"));
    step_ = state.step;
    rows_done_ = state.progress.value("rows_done", std::int64_t{0});
    elapsed_s_ = state.progress.value("elapsed_s", 0.0);
    log_ << "resumed from " << latest->string() << " at step " << step_ << "\n";
  } else if (latest.ok()) {
    return InvalidArgument("--output " + o.output_dir.string() + " already holds a run (" + latest->string() +
                           "); pass --resume to continue it or choose another folder");
  }
  // Every rank starts from rank 0's weights (the same seed or checkpoint gives the same ones; this makes it certain).
  std::vector<torch::Tensor> weights;
  for (const auto& [name, p] : drafter_->named_parameters()) weights.push_back(p);
  DFLASH_RETURN_IF_ERROR(comm_->Broadcast(weights, 0));
  if (env.distributed()) {
    grad_sync_ = std::make_unique<dist::GradientSync>(*comm_, std::move(weights), o.bucket_mb << 20);
  }
  if (env.is_main()) {
    DFLASH_ASSIGN_OR_RETURN(auto metrics_log, MetricsLog::Open(o.output_dir / "metrics.jsonl"));
    metrics_log_ = std::make_unique<MetricsLog>(std::move(metrics_log));
  }
  DFLASH_ASSIGN_OR_RETURN(timer_, StepTimer::Create(device_));
  return Status::Ok();
}

Result<Trainer::PlannedStep> Trainer::ReadStep() {
  PlannedStep s;
  s.start = batcher_->State();
  s.rows_done_start = rows_done_;
  s.epoch = epoch_;
  // This rank's last row of the step: its backward overlaps the gradient all-reduce (earlier rows accumulate).
  const std::int64_t last_owned = shard_.global_rows() - shard_.world_size + shard_.rank;
  for (std::int64_t i = 0; i < shard_.global_rows(); ++i) {
    // Every rank reads the whole stream (same Batcher state everywhere) and trains on its shard of it; a row's
    // anchors are seeded by its index in the global stream, so any world size draws the same ones.
    DFLASH_ASSIGN_OR_RETURN(data::Row row, batcher_->Next());
    s.epoch = row.epoch;
    const std::uint64_t anchor_seed = data::StepAnchorSeed(options_.seed, static_cast<std::uint64_t>(rows_done_));
    ++rows_done_;
    if (!shard_.Owns(i)) continue;
    if (row.num_tokens < 2) continue;  // nothing to predict; the row still counts (resume stays exact)
    s.rows.push_back({std::move(row), anchor_seed, i == last_owned});
  }
  return s;
}

Status Trainer::SubmitAhead(std::size_t k) {
  auto submit = [&](PlannedStep& s, std::size_t through) {
    for (; s.submitted <= through && s.submitted < s.rows.size(); ++s.submitted) {
      pipeline_->Submit(TargetInputOf(s.rows[s.submitted].row, fixed_shapes_));
    }
  };
  PlannedStep& now = planned_.front();
  submit(now, k + 1);
  if (k + 1 < now.rows.size() || step_ + 1 >= schedule_.total_steps) return Status::Ok();
  if (planned_.size() < 2) {
    DFLASH_ASSIGN_OR_RETURN(PlannedStep next, ReadStep());
    planned_.push_back(std::move(next));
  }
  submit(planned_[1], 0);
  return Status::Ok();
}

Status Trainer::TakeStep() {
  const auto start = std::chrono::steady_clock::now();
  DFLASH_RETURN_IF_ERROR(timer_->Begin());
  const double lr = schedule_.At(step_);
  RowStepOptions row_options;
  row_options.timer = timer_.get();
  row_options.num_anchors = options_.num_anchors;
  row_options.compute_dtype = compute_dtype_;
  row_options.loss_chunk_rows = options_.loss_chunk_rows;
  row_options.fixed_shapes = fixed_shapes_;
  if (target_device_ != device_) {
    row_options.drafter_device = device_;
    row_options.embed_tokens = head_embed_;
    row_options.lm_head = head_lm_;
  }
  double weighted_ce = 0, weight_sum = 0;
  std::int64_t tokens = 0, labelled = 0, correct = 0;
  const int block_size = static_cast<int>(drafter_->config().block_size);
  std::vector<double> accept_histogram(static_cast<std::size_t>(block_size) + 1, 0.0);  // [accepted length]
  if (planned_.empty()) {
    DFLASH_ASSIGN_OR_RETURN(PlannedStep s, ReadStep());
    planned_.push_back(std::move(s));
  }
  if (pipeline_) row_options.features = [this] { return pipeline_->Take(); };
  for (std::size_t k = 0; k < planned_.front().rows.size(); ++k) {
    if (pipeline_) DFLASH_RETURN_IF_ERROR(SubmitAhead(k));  // may read the next step: planned_ grows at the back
    const PlannedRow& p = planned_.front().rows[k];
    row_options.anchor_seed = p.anchor_seed;
    if (grad_sync_ && p.last_owned) grad_sync_->Arm();
    Result<RowResult> row_result = InvalidArgument("unset");
    try {
      row_result = TrainRow(p.row, *target_, *drafter_, RowOps(), row_options);
    } catch (const c10::Error& e) {  // TORCH_CHECKs of the models and ops (a missing kernel key, a shape)
      return Internal(e.what_without_backtrace());
    }
    DFLASH_ASSIGN_OR_RETURN(RowResult r, std::move(row_result));
    weighted_ce += r.weighted_ce;
    weight_sum += r.weight_sum;
    tokens += r.context_tokens;
    labelled += r.labelled;
    correct += r.correct;
    for (int a : r.accept_lengths) accept_histogram[static_cast<std::size_t>(std::clamp(a, 0, block_size))] += 1;
  }
  epoch_ = planned_.front().epoch;
  planned_.pop_front();
  // The gradients summed over the ranks (the buckets the last backward did not start start now, in order).
  if (grad_sync_) {
    DFLASH_RETURN_IF_ERROR(grad_sync_->Finish());
    if (!stepped_in_process_ && comm_->env().is_main()) {
      log_ << "data parallel: gradient all-reduce in " << grad_sync_->num_buckets() << " bucket(s) of <= "
           << options_.bucket_mb << " MiB, " << grad_sync_->started_in_backward()
           << " started during the backward of the first step\n";
    }
  }
  DFLASH_RETURN_IF_ERROR(timer_->End(StepPhase::kGradSync));
  // The global batch: sums over the ranks (the stop request too, so that all ranks stop after the same step).
  std::vector<double> sums = {weighted_ce, weight_sum, double(tokens), double(labelled), double(correct),
                              g_stop_requested ? 1.0 : 0.0};
  sums.insert(sums.end(), accept_histogram.begin(), accept_histogram.end());
  DFLASH_ASSIGN_OR_RETURN(sums, comm_->AllReduceSum(std::move(sums)));
  weighted_ce = sums[0];
  weight_sum = sums[1];
  tokens = static_cast<std::int64_t>(sums[2]);
  labelled = static_cast<std::int64_t>(sums[3]);
  correct = static_cast<std::int64_t>(sums[4]);
  stop_agreed_ = sums[5] > 0;
  std::vector<int> accepts;
  for (int a = 0; a <= block_size; ++a) accepts.insert(accepts.end(), static_cast<std::size_t>(sums[6 + a]), a);
  const double grad_norm = optimizer_->Update(lr, weight_sum, options_.max_grad_norm);
  optimizer_->ZeroGrad();
  DFLASH_RETURN_IF_ERROR(timer_->End(StepPhase::kOptimizer));
  ++step_;
  SynchronizeStream(device_);

  StepMetrics& m = last_;
  m.step = step_;
  m.total_steps = schedule_.total_steps;
  m.epoch = epoch_;
  m.loss = weight_sum > 0 ? weighted_ce / weight_sum : 0.0;
  m.accuracy = labelled > 0 ? double(correct) / double(labelled) : 0.0;
  double accept_sum = 0;
  for (int a : accepts) accept_sum += a;
  m.accept_length = accepts.empty() ? 0.0 : accept_sum / double(accepts.size());
  m.position_acceptance = PositionAcceptance(accepts, static_cast<int>(drafter_->config().block_size));
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.step_time_s = Seconds(start);
  DFLASH_ASSIGN_OR_RETURN(m.phases, timer_->Collect(1e3 * m.step_time_s));
  m.target_ms = pipeline_ ? pipeline_->TakeTargetMs() : m.phases.ms[static_cast<int>(StepPhase::kTargetForward)];
  elapsed_s_ += m.step_time_s;
  m.tokens = tokens;
  m.tokens_per_s = m.step_time_s > 0 ? double(tokens) / m.step_time_s : 0.0;
  m.eta_s = double(schedule_.total_steps - step_) * m.step_time_s;
  m.peak_memory_bytes = PeakMemoryBytes(device_.is_cuda() ? device_.index() : -1);
  return metrics_log_ ? metrics_log_->Write(m.ToJson()) : Status::Ok();
}

Status Trainer::PlaceTarget(const dist::RankEnv& env) {
  target_device_ = device_;
  if (options_.target_device_offset == 0) return Status::Ok();
  if (!device_.is_cuda()) {
    return InvalidArgument("--target-device-offset " + std::to_string(options_.target_device_offset) +
                           " places the target on another GPU: it needs a GPU run (--device cuda)");
  }
  DFLASH_ASSIGN_OR_RETURN(dist::Placement placement,
                          dist::PlaceModels(device_.has_index() ? device_.index() : 0, env.local_world_size,
                                            static_cast<int>(options_.target_device_offset),
                                            static_cast<int>(torch::cuda::device_count())));
  device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement.drafter_device));
  target_device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement.target_device));
  return Status::Ok();
}

Status Trainer::AgreeOnKernels() {
  if (comm_->world_size() == 1) return Status::Ok();
  // This rank's kernels: every cached entry its backends resolved (digest and cubin checksum), or the reference.
  std::string mine = kernel_uses_.empty() ? "reference operations" : "";
  for (const auto& u : kernel_uses_) {
    mine += u.operation + ": " + u.family + " entry " + u.key_digest + " cubin " + u.cubin_sha256 + "\n";
  }
  DFLASH_ASSIGN_OR_RETURN(std::vector<std::string> all, comm_->AllGatherStrings(mine));
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    return Status(ErrorCode::kMismatch,
                  "rank " + std::to_string(r) + " would run other kernels than rank 0 (their caches differ: use one "
                  "cache for all ranks, or warm each up identically):\n rank 0:\n" + all[0] + " rank " +
                  std::to_string(r) + ":\n" + all[r]);
  }
  log_ << "data parallel: all " << all.size() << " ranks run the same kernels\n";
  return Status::Ok();
}

Status Trainer::Save() {
  if (!comm_->env().is_main()) return Status::Ok();  // rank 0 writes the checkpoints
  // The stream's position after the last step taken: before the step read ahead, if any.
  const bool ahead = !planned_.empty();
  TrainState state;
  state.step = step_;
  state.batcher = ahead ? planned_.front().start : batcher_->State();
  state.options = options_.ToJson();
  state.progress = {{"rows_done", ahead ? planned_.front().rows_done_start : rows_done_}, {"elapsed_s", elapsed_s_}};
  DFLASH_ASSIGN_OR_RETURN(fs::path dir, SaveTrainCheckpoint(options_.output_dir, *drafter_, *optimizer_, state,
                                                            static_cast<int>(options_.keep_checkpoints)));
  log_ << (isatty(2) ? "\n" : "") << "checkpoint: " << dir.string() << "\n";
  return Status::Ok();
}

Status Trainer::ProfileAround(std::int64_t steps_in_process) {
  const std::int64_t n = options_.profile_steps;
  if (n <= 0) return Status::Ok();
  if (steps_in_process == 1 && !profiler_) {  // after the first step: start-up and first-touch costs stay out
    DFLASH_ASSIGN_OR_RETURN(profiler_, StepProfiler::Start(device_.is_cuda()));
    profile_first_step_ = step_ + 1;
    return Status::Ok();
  }
  if (profiler_ && (steps_in_process == 1 + n || step_ >= schedule_.total_steps || stop_agreed_)) {
    SynchronizeStream(device_);
    const std::string name = "profile-steps-" + std::to_string(profile_first_step_) + "-" + std::to_string(step_) +
                             (comm_->world_size() > 1 ? "-rank" + std::to_string(comm_->rank()) : "") + ".json";
    const fs::path path = options_.output_dir / name;
    const Status saved = profiler_->StopAndSave(path);
    profiler_.reset();
    DFLASH_RETURN_IF_ERROR(saved);
    log_ << (isatty(2) ? "\n" : "") << "profile: steps " << profile_first_step_ << "-" << step_ << " traced into "
         << path.string() << " (open it in ui.perfetto.dev or chrome://tracing)\n";
  }
  return Status::Ok();
}

Status Trainer::Run() {
  const bool terminal = isatty(2) != 0;
  std::int64_t steps_in_process = 0;
  std::optional<TrainingStreamScope> training_stream;
  if (pipelined_) {
    training_stream.emplace(device_);
    DFLASH_ASSIGN_OR_RETURN(pipeline_, FeaturePipeline::Start(*target_, *target_ops_, device_));
  }
  struct StopPipeline {  // joins the worker however Run ends (it may be computing a row read ahead)
    std::unique_ptr<FeaturePipeline>& p;
    ~StopPipeline() { p.reset(); }
  } stop_pipeline{pipeline_};
  while (step_ < schedule_.total_steps) {
    const bool first_in_process = !stepped_in_process_;
    if (first_in_process) {
      log_ << "start-up: first step begins " << SecondsSinceProcessStart() << " s after process start\n";
    }
    DFLASH_RETURN_IF_ERROR(TakeStep().WithContext("step " + std::to_string(step_ + 1)));
    DFLASH_RETURN_IF_ERROR(ProfileAround(++steps_in_process));
    if (first_in_process) {
      stepped_in_process_ = true;
      log_ << (terminal ? "\n" : "") << "start-up: first step done " << SecondsSinceProcessStart()
           << " s after process start (step " << last_.step_time_s << " s)\n";
    }
    if (options_.log_every > 0 && (step_ % options_.log_every == 0 || step_ == schedule_.total_steps)) {
      PrintProgress(log_, last_, terminal);
    }
    const bool periodic = options_.save_every > 0 && step_ % options_.save_every == 0;
    if (periodic && step_ < schedule_.total_steps) DFLASH_RETURN_IF_ERROR(Save());
    if (stop_agreed_) {
      DFLASH_RETURN_IF_ERROR(Save());
      return Cancelled("stopped by a signal after step " + std::to_string(step_) + "; continue with --resume");
    }
  }
  if (terminal) log_ << "\n";
  return Save();
}

}  // namespace dflash::trainer
