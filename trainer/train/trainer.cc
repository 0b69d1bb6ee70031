#include "trainer/train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "trainer/data/anchors.h"
#include "trainer/data/jsonl_dataset.h"
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

Result<DrafterConfig> DrafterConfigFor(const TrainOptions& o, const TargetConfig& target) {
  if (!o.drafter_init.empty()) return LoadDrafterConfig(o.drafter_init / "config.json");
  if (o.drafter_config.empty()) return InvalidArgument("give --drafter-config (fresh drafter) or --drafter-init");
  DFLASH_ASSIGN_OR_RETURN(DrafterConfig c, LoadDrafterConfig(o.drafter_config));
  return c;
}

}  // namespace

void RequestTrainingStop() { g_stop_requested = true; }

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& options, std::ostream& log) {
  const TrainOptions& o = options;
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
  std::unique_ptr<Trainer> t(new Trainer(options, log));
  DFLASH_ASSIGN_OR_RETURN(RunDevice device, ResolveDevice(o));
  t->device_ = device.device;
  t->compute_dtype_ = device.compute_dtype;

  // Models.
  const bool random_target = !o.random_target.empty();
  DFLASH_ASSIGN_OR_RETURN(TargetConfig target_config,
                          LoadTargetConfig(random_target ? o.random_target : o.target_dir / "config.json"));
  DFLASH_ASSIGN_OR_RETURN(DrafterConfig drafter_config, DrafterConfigFor(o, target_config));
  DFLASH_ASSIGN_OR_RETURN(std::vector<std::int64_t> taps, ResolveTappedLayers(drafter_config, target_config));
  drafter_config.target_layer_ids = taps;
  drafter_config.num_target_layers = target_config.num_hidden_layers;
  if (drafter_config.vocab_size != 0 && drafter_config.vocab_size != target_config.vocab_size) {
    return InvalidArgument("the drafter's vocab_size " + std::to_string(drafter_config.vocab_size) +
                           " differs from the target's " + std::to_string(target_config.vocab_size));
  }
  if (drafter_config.mask_token_id < 0 || drafter_config.mask_token_id >= target_config.vocab_size) {
    return InvalidArgument("mask_token_id " + std::to_string(drafter_config.mask_token_id) +
                           " is outside the target's vocabulary");
  }
  if (drafter_config.hidden_size != target_config.hidden_size) {
    return InvalidArgument("the drafter's hidden_size must equal the target's (it uses the target's embedding)");
  }
  TargetLoadOptions target_options;
  target_options.device = t->device_;
  target_options.dtype = device.device.is_cuda() ? torch::kBFloat16 : t->compute_dtype_;
  target_options.taps = taps;
  log << "target: " << (random_target ? "random, shaped as " + o.random_target.string() : o.target_dir.string())
      << " (" << target_config.model_type << ", "
      << target_config.num_hidden_layers << " layers, taps";
  for (auto l : taps) log << ' ' << l;
  log << "; layers after " << taps.back() << " not loaded)\n";
  if (random_target) {
    const auto start = std::chrono::steady_clock::now();
    try {
      t->target_ = TargetModel::RandomInit(target_config, target_options, o.seed);
    } catch (const c10::Error& e) {
      return InvalidArgument("--random-target " + o.random_target.string() + ": " + e.what_without_backtrace());
    }
    log << "target: random weights drawn on " << t->device_.str() << " in " << Seconds(start) << " s\n";
  } else {
    DFLASH_ASSIGN_OR_RETURN(t->target_, TargetModel::Load(o.target_dir, target_options));
  }
  if (!o.drafter_init.empty()) {
    DFLASH_ASSIGN_OR_RETURN(t->drafter_, Drafter::Load(o.drafter_init, t->device_));
  } else {
    try {
      t->drafter_ = Drafter::Create(drafter_config, t->device_, o.seed);
    } catch (const c10::Error& e) {
      return InvalidArgument("drafter config " + o.drafter_config.string() + ": " + e.what_without_backtrace());
    }
  }
  std::int64_t num_params = 0;
  for (const auto& [name, p] : t->drafter_->named_parameters()) num_params += p.numel();
  log << "drafter: " << drafter_config.num_hidden_layers << " layers, hidden " << drafter_config.hidden_size << ", "
      << num_params << " trainable parameters (fp32 masters), compute " << torch::toString(t->compute_dtype_)
      << " on " << t->device_.str() << "\n";
  DFLASH_ASSIGN_OR_RETURN(OpsBackend backend, MakeOps(o, device, target_config, drafter_config, log));
  t->fixed_shapes_ = backend.cache != nullptr;
  t->kernel_cache_ = std::move(backend.cache);
  t->ops_ = std::move(backend.ops);

  // Data and schedule.
  DFLASH_ASSIGN_OR_RETURN(auto dataset, data::JsonlDataset::Open(o.data));
  auto shared_dataset = std::make_shared<const data::JsonlDataset>(std::move(dataset));
  data::BatcherOptions batcher_options;
  batcher_options.max_length = static_cast<std::size_t>(o.max_length);
  batcher_options.mode = o.row_mode;
  batcher_options.seed = o.seed;
  DFLASH_ASSIGN_OR_RETURN(auto batcher, data::Batcher::Create(shared_dataset, batcher_options));
  t->batcher_ = std::make_unique<data::Batcher>(std::move(batcher));
  const std::int64_t rows_per_step = o.batch_size * o.grad_accum;
  std::int64_t total_rows = 0;
  for (std::int64_t e = 0; e < o.epochs; ++e) total_rows += static_cast<std::int64_t>(t->batcher_->RowsInEpoch(e));
  t->schedule_.peak_lr = o.lr;
  t->schedule_.warmup_fraction = o.warmup_fraction;
  t->schedule_.total_steps = o.max_steps > 0 ? o.max_steps : std::max<std::int64_t>(1, total_rows / rows_per_step);
  log << "data: " << o.data.string() << " (" << shared_dataset->size() << " samples), " << total_rows
      << " rows over " << o.epochs << " epochs, " << rows_per_step << " rows per step -> "
      << t->schedule_.total_steps << " steps\n";

  AdamWOptions adam;
  adam.weight_decay = o.weight_decay;
  t->optimizer_ = std::make_unique<AdamW>(t->drafter_->named_parameters(), adam);

  // Resume.
  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  if (ec) return IoError("cannot create --output " + o.output_dir.string() + ": " + ec.message());
  auto latest = LatestCheckpoint(o.output_dir);
  if (o.resume) {
    if (!latest.ok()) return latest.status().WithContext("--resume");
    DFLASH_ASSIGN_OR_RETURN(TrainState state, LoadTrainCheckpoint(*latest, *t->drafter_, *t->optimizer_));
    DFLASH_RETURN_IF_ERROR(o.CheckResumable(state.options));
    DFLASH_RETURN_IF_ERROR(t->batcher_->Restore(state.batcher).WithContext("--resume"));
    t->step_ = state.step;
    t->rows_done_ = state.progress.value("rows_done", std::int64_t{0});
    t->elapsed_s_ = state.progress.value("elapsed_s", 0.0);
    log << "resumed from " << latest->string() << " at step " << t->step_ << "\n";
  } else if (latest.ok()) {
    return InvalidArgument("--output " + o.output_dir.string() + " already holds a run (" + latest->string() +
                           "); pass --resume to continue it or choose another folder");
  }
  DFLASH_ASSIGN_OR_RETURN(auto metrics_log, MetricsLog::Open(o.output_dir / "metrics.jsonl"));
  t->metrics_log_ = std::make_unique<MetricsLog>(std::move(metrics_log));
  return t;
}

Status Trainer::TakeStep() {
  const auto start = std::chrono::steady_clock::now();
  const double lr = schedule_.At(step_);
  RowStepOptions row_options;
  row_options.num_anchors = options_.num_anchors;
  row_options.compute_dtype = compute_dtype_;
  row_options.loss_chunk_rows = options_.loss_chunk_rows;
  row_options.fixed_shapes = fixed_shapes_;
  double weighted_ce = 0, weight_sum = 0;
  std::int64_t tokens = 0, labelled = 0, correct = 0;
  std::vector<int> accepts;
  for (std::int64_t i = 0; i < options_.batch_size * options_.grad_accum; ++i) {
    DFLASH_ASSIGN_OR_RETURN(data::Row row, batcher_->Next());
    epoch_ = row.epoch;
    row_options.anchor_seed = data::StepAnchorSeed(options_.seed, static_cast<std::uint64_t>(rows_done_));
    ++rows_done_;
    if (row.num_tokens < 2) continue;  // nothing to predict; the row still counts (resume stays exact)
    Result<RowResult> row_result = InvalidArgument("unset");
    try {
      row_result = TrainRow(row, *target_, *drafter_, *ops_, row_options);
    } catch (const c10::Error& e) {  // TORCH_CHECKs of the models and ops (a missing kernel key, a shape)
      return Internal(e.what_without_backtrace());
    }
    DFLASH_ASSIGN_OR_RETURN(RowResult r, std::move(row_result));
    weighted_ce += r.weighted_ce;
    weight_sum += r.weight_sum;
    tokens += r.context_tokens;
    labelled += r.labelled;
    correct += r.correct;
    accepts.insert(accepts.end(), r.accept_lengths.begin(), r.accept_lengths.end());
  }
  const auto params = drafter_->named_parameters();
  ScaleGradients(params, weight_sum);
  const double grad_norm = ClipGradNorm(params, options_.max_grad_norm);
  if (weight_sum > 0) optimizer_->Step(lr);
  optimizer_->ZeroGrad();
  ++step_;
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());

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
  elapsed_s_ += m.step_time_s;
  m.tokens = tokens;
  m.tokens_per_s = m.step_time_s > 0 ? double(tokens) / m.step_time_s : 0.0;
  m.eta_s = double(schedule_.total_steps - step_) * m.step_time_s;
  m.peak_memory_bytes = PeakMemoryBytes(device_.is_cuda() ? device_.index() : -1);
  return metrics_log_->Write(m.ToJson());
}

Status Trainer::Save() {
  TrainState state;
  state.step = step_;
  state.batcher = batcher_->State();
  state.options = options_.ToJson();
  state.progress = {{"rows_done", rows_done_}, {"elapsed_s", elapsed_s_}};
  DFLASH_ASSIGN_OR_RETURN(fs::path dir, SaveTrainCheckpoint(options_.output_dir, *drafter_, *optimizer_, state,
                                                            static_cast<int>(options_.keep_checkpoints)));
  log_ << (isatty(2) ? "\n" : "") << "checkpoint: " << dir.string() << "\n";
  return Status::Ok();
}

Status Trainer::Run() {
  const bool terminal = isatty(2) != 0;
  while (step_ < schedule_.total_steps) {
    const bool first_in_process = !stepped_in_process_;
    if (first_in_process) {
      log_ << "start-up: first step begins " << SecondsSinceProcessStart() << " s after process start\n";
    }
    DFLASH_RETURN_IF_ERROR(TakeStep().WithContext("step " + std::to_string(step_ + 1)));
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
    if (g_stop_requested) {
      DFLASH_RETURN_IF_ERROR(Save());
      return Status(ErrorCode::kInternal, "stopped by a signal after step " + std::to_string(step_) +
                                              "; continue with --resume");
    }
  }
  if (terminal) log_ << "\n";
  return Save();
}

}  // namespace dflash::trainer
