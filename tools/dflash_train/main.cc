// dflash-train: trains a DFlash drafter for a frozen target (spec dflash-training.md). Without a subcommand it
// trains; `--preset tiny` builds a tiny random Qwen3.5-architecture target and a synthetic dataset sampled from it,
// trains a drafter on it and evaluates it. Exit codes: 0 done; 2 bad input or a failure (one line on stderr);
// 130 stopped by SIGINT/SIGTERM after saving a checkpoint. `dflash-train eval` runs speculative decoding.
// Several ranks: started by torchrun / Slurm (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or by
// `--nproc-per-node N`, which starts N such workers of this executable on this host (trainer/dist/launcher.h) and
// exits with the first failing worker's code. Rank 0 logs; the others print only their errors.
#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <thread>

#include <unistd.h>

#include "base/atomic_file.h"
#include "trainer/dist/launcher.h"
#include "trainer/dist/rank_env.h"
#include "trainer/models/drafter.h"
#include "trainer/ops/reference_ops.h"
#include "trainer/train/evaluate.h"
#include "trainer/train/ops_setup.h"
#include "trainer/train/tiny_preset.h"
#include "trainer/train/train_checkpoint.h"
#include "trainer/train/trainer.h"

namespace {

using dflash::Status;
using namespace dflash::trainer;

constexpr int kExitError = 2;
constexpr int kExitStopped = 130;

dflash::trainer::dist::RankEnv g_rank;  // this process's rank (one process: rank 0 of 1)

std::string Prefix() {
  return g_rank.distributed() ? "dflash-train [rank " + std::to_string(g_rank.rank) + "]: " : "dflash-train: ";
}

int Fail(const Status& status) {
  std::cerr << Prefix() << status.ToString() << "\n";
  return kExitError;
}

// Where the start-up report and progress go: stderr on rank 0, nowhere on the other ranks.
std::ostream& Log() {
  static std::ostream discard(nullptr);
  return g_rank.is_main() ? std::cerr : discard;
}

void OnSignal(int) { RequestTrainingStop(); }

void AddTrainOptions(CLI::App& app, TrainOptions& o, std::string& row_mode, std::string& kernels,
                     std::string& pipeline) {
  app.add_option("--target", o.target_dir, "Target model: Hugging Face folder (config.json + safetensors)");
  app.add_option("--random-target", o.random_target,
                 "Instead of --target: a randomly initialised target shaped by this config.json, drawn on the "
                 "device (benchmarks, smoke tests)");
  app.add_option("--drafter-config", o.drafter_config, "Drafter config.json for a fresh drafter");
  app.add_option("--drafter-init", o.drafter_init, "Start from a saved drafter folder instead");
  app.add_option("--data", o.data, "Tokenized JSONL training data (input_ids, loss_mask per line)");
  app.add_option("--output", o.output_dir, "Run folder: checkpoints/, metrics.jsonl");
  app.add_option("--max-length", o.max_length, "Row length in tokens")->capture_default_str();
  app.add_option("--rows", row_mode, "pad (one sample per row) or pack (several per row)")->capture_default_str();
  app.add_option("--anchors", o.num_anchors, "Anchors (blocks) per row")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Rows per micro-step")->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum, "Micro-steps per optimizer step")->capture_default_str();
  app.add_option("--epochs", o.epochs, "Epochs over the data")->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "Stop after this many optimizer steps (0: the epochs decide)")
      ->capture_default_str();
  app.add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  app.add_option("--warmup", o.warmup_fraction, "Warmup fraction of the steps")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--max-grad-norm", o.max_grad_norm, "Gradient clipping (0: off)")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of init, shuffling and anchors")->capture_default_str();
  app.add_option("--loss-chunk-rows", o.loss_chunk_rows, "Block rows per lm_head chunk of the loss")
      ->capture_default_str();
  app.add_option("--device", o.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", o.compute_dtype, "Compute dtype: auto, bf16, fp32")->capture_default_str();
  app.add_option("--kernels", kernels, "auto (cached on a GPU), cached or reference")->capture_default_str();
  app.add_option("--cache-dir", o.cache_dir, "Kernel cache (default: $DFLASH_CACHE_DIR or ~/.cache/dflash-tune)");
  app.add_flag("--tune-missing", o.tune_missing, "Tune missing kernel keys before the first step");
  app.add_option("--target-device-offset", o.target_device_offset,
                 "Target and drafter in pairs: the target on the GPU this many after the drafter's (features move "
                 "GPU to GPU; with N ranks per host use 0 or >= N)")
      ->capture_default_str();
  app.add_option("--pipeline", pipeline,
                 "auto, on or off: the target's forward of the next row runs while the drafter trains on this one "
                 "(auto: on when the target has its own GPU; on: also on one device, as two streams or threads; "
                 "off: in series). Same results either way")
      ->capture_default_str();
  app.add_option("--save-every", o.save_every, "Checkpoint every N steps (0: at the end only)")->capture_default_str();
  app.add_option("--keep", o.keep_checkpoints, "Checkpoints kept")->capture_default_str();
  app.add_option("--log-every", o.log_every, "Progress line every N steps")->capture_default_str();
  app.add_option("--profile-steps", o.profile_steps,
                 "Trace every operation and kernel of N steps (after the first) into --output as a Chrome trace "
                 "(ui.perfetto.dev, chrome://tracing); 0: off")
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "Continue the run in --output from its latest checkpoint");
  app.add_option("--dist-timeout", o.dist_timeout_s,
                 "Several ranks: seconds any collective (and the rendezvous) may wait before the run fails; "
                 "must exceed the time rank 0 takes to write a checkpoint (the others wait for it)")
      ->capture_default_str();
  app.add_option("--bucket-mb", o.bucket_mb, "Several ranks: gradient all-reduce bucket size in MiB")
      ->capture_default_str();
}

Status ApplyChoices(TrainOptions& o, const std::string& row_mode, const std::string& kernels,
                    const std::string& pipeline) {
  if (row_mode == "pad") o.row_mode = dflash::trainer::data::RowMode::kPad;
  else if (row_mode == "pack") o.row_mode = dflash::trainer::data::RowMode::kPack;
  else return dflash::InvalidArgument("--rows " + row_mode + ": use pad or pack");
  if (kernels == "auto") o.kernels = KernelBackend::kAuto;
  else if (kernels == "cached") o.kernels = KernelBackend::kCached;
  else if (kernels == "reference") o.kernels = KernelBackend::kReference;
  else return dflash::InvalidArgument("--kernels " + kernels + ": use auto, cached or reference");
  if (pipeline == "auto") o.pipeline = PipelineMode::kAuto;
  else if (pipeline == "on") o.pipeline = PipelineMode::kOn;
  else if (pipeline == "off") o.pipeline = PipelineMode::kOff;
  else return dflash::InvalidArgument("--pipeline " + pipeline + ": use auto, on or off");
  return Status::Ok();
}

int Train(const TrainOptions& options) {
  // A rank whose peer died must see a failed collective (EPIPE from gloo's socket write: an error, exit 2), not die
  // of SIGPIPE (exit 141, no message), which is what a write to the closed connection does by default.
  std::signal(SIGPIPE, SIG_IGN);
  auto trainer = Trainer::Create(options, Log(), g_rank);
  if (!trainer.ok()) return Fail(trainer.status());
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const Status s = (*trainer)->Run();
  if (!s.ok()) {
    if (s.code() == dflash::ErrorCode::kCancelled) {
      Log() << "\n" << Prefix() << s.message() << "\n";
      return kExitStopped;
    }
    return Fail(s);
  }
  return 0;
}

// Rank > 0 of a tiny-preset run: waits until rank 0 marked the preset of this launch `launch_id` ready.
Status WaitForPreset(const std::filesystem::path& ready, const std::string& launch_id, std::int64_t timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    std::ifstream in(ready);
    std::string id;
    std::getline(in, id);
    if (id == launch_id) return Status::Ok();
    if (std::chrono::steady_clock::now() > deadline) {
      return dflash::IoError("rank 0 did not prepare the tiny preset within --dist-timeout");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The tiny preset: prepare the target and data, measure tau of the untrained drafter, train, measure it again.
// Several ranks: rank 0 prepares the preset and measures tau, then marks this launch (parent process and port
// identify it) as ready; the other ranks wait for the mark, then all train.
int TinyPreset(TrainOptions options, const CLI::App& app, const dflash::trainer::TinyPresetSize& size) {
  if (options.output_dir.empty()) options.output_dir = "dflash-tiny-run";
  const std::filesystem::path preset_dir = options.output_dir / "preset";
  const std::filesystem::path ready = options.output_dir / "preset-ready";
  const std::string launch_id = std::to_string(getppid()) + ":" + std::to_string(g_rank.master_port);
  if (g_rank.is_main()) {
    std::filesystem::remove(ready);
    if (Status s = PrepareTinyPreset(preset_dir, size, std::cerr); !s.ok()) return Fail(s);
  } else if (Status s = WaitForPreset(ready, launch_id, options.dist_timeout_s); !s.ok()) {
    return Fail(s);
  }
  // Preset values for everything the command line did not set.
  TrainOptions preset = TinyPresetOptions(preset_dir, options.output_dir);
  auto given = [&](const char* name) { return app.get_option(name)->count() > 0; };
  if (!given("--target")) options.target_dir = preset.target_dir;
  if (!given("--drafter-config") && !given("--drafter-init")) options.drafter_config = preset.drafter_config;
  if (!given("--data")) options.data = preset.data;
  if (!given("--max-length")) options.max_length = preset.max_length;
  if (!given("--rows")) options.row_mode = preset.row_mode;
  if (!given("--anchors")) options.num_anchors = preset.num_anchors;
  if (!given("--epochs")) options.epochs = preset.epochs;
  if (!given("--lr")) options.lr = preset.lr;
  if (!given("--save-every")) options.save_every = preset.save_every;
  if (!g_rank.is_main()) return Train(options);

  EvalOptions eval;
  eval.target_dir = options.target_dir;
  eval.prompts = preset_dir / "data" / "eval_prompts.jsonl";
  eval.max_new_tokens = 96;
  eval.device = options.device;
  eval.compute_dtype = options.compute_dtype;
  if (!options.resume) {
    // tau of the freshly initialised drafter (the same seed the run starts from), for comparison (this process
    // alone: the other ranks wait).
    auto trainer = Trainer::Create(options, std::cerr, dflash::trainer::dist::RankEnv{});
    if (!trainer.ok()) return Fail(trainer.status());
    eval.drafter_dir = options.output_dir / "initial-drafter";
    if (Status s = (*trainer)->drafter().Save(eval.drafter_dir); !s.ok()) return Fail(s);
    eval.report = options.output_dir / "eval-initial.json";
    if (auto r = RunEval(eval, std::cerr); !r.ok()) return Fail(r.status());
    std::filesystem::remove_all(options.output_dir / "checkpoints");
    std::filesystem::remove(options.output_dir / "metrics.jsonl");
  }
  if (g_rank.distributed()) {
    if (Status s = dflash::AtomicWriteText(ready, launch_id + "\n"); !s.ok()) return Fail(s);
  }
  if (int rc = Train(options); rc != 0) return rc;
  auto latest = LatestCheckpoint(options.output_dir);
  if (!latest.ok()) return Fail(latest.status());
  eval.drafter_dir = *latest / "drafter";
  eval.report = options.output_dir / "eval-trained.json";
  if (auto r = RunEval(eval, std::cerr); !r.ok()) return Fail(r.status());
  std::cerr << "tiny preset done: metrics in " << (options.output_dir / "metrics.jsonl").string()
            << ", tau before/after in eval-initial.json / eval-trained.json\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dflash-train: trains a DFlash block-diffusion drafter for a frozen target model"};
  app.require_subcommand(0, 1);
  TrainOptions options;
  std::string row_mode = "pad", kernels = "auto", pipeline = "auto", preset;
  AddTrainOptions(app, options, row_mode, kernels, pipeline);
  app.add_option("--preset", preset, "tiny: a tiny random Qwen3.5-architecture target and synthetic data, "
                                     "trained and evaluated end to end (fills every unset option)");
  TinyPresetSize tiny;
  app.add_option("--preset-samples", tiny.samples, "tiny preset: training samples")->capture_default_str();
  int nproc_per_node = 1;
  app.add_option("--nproc-per-node", nproc_per_node,
                 "Start this many ranks on this host (one per GPU: cuda:LOCAL_RANK), as torchrun would")
      ->capture_default_str();
  int threads = 0;
  app.add_option("--threads", threads,
                 "CPU threads of LibTorch (0: its default; the tiny preset uses 1: its many small ops run slower "
                 "with more, spinning OpenMP threads)");

  CLI::App* eval_cmd = app.add_subcommand("eval", "Speculative decoding with a saved drafter: tau and speedup");
  EvalOptions eval;
  eval_cmd->add_option("--target", eval.target_dir, "Target model folder")->required();
  eval_cmd->add_option("--drafter", eval.drafter_dir, "Saved drafter folder (checkpoints/step-N/drafter)")
      ->required();
  eval_cmd->add_option("--prompts", eval.prompts, "JSONL of prompts (input_ids)")->required();
  eval_cmd->add_option("--max-prompts", eval.max_prompts, "0: all")->capture_default_str();
  eval_cmd->add_option("--max-new-tokens", eval.max_new_tokens, "Tokens generated per prompt")->capture_default_str();
  eval_cmd->add_option("--device", eval.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  eval_cmd->add_option("--dtype", eval.compute_dtype, "auto, bf16, fp32")->capture_default_str();
  eval_cmd->add_option("--report", eval.report, "Also write the report as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitError;
  }
  if (nproc_per_node != 1) {
    if (std::getenv("RANK") != nullptr) {
      return Fail(dflash::InvalidArgument("--nproc-per-node inside a launched rank (RANK is set): use one "
                                          "launcher, this one or torchrun"));
    }
    dflash::trainer::dist::LaunchOptions launch;
    launch.nproc = nproc_per_node;
    launch.arguments = dflash::trainer::dist::WorkerArguments(argc, argv);
    auto rc = dflash::trainer::dist::LaunchWorkers(launch);
    if (!rc.ok()) return Fail(rc.status());
    if (*rc != 0 && *rc != kExitStopped) {
      std::cerr << "dflash-train: a worker failed (exit " << *rc << "); the others were stopped\n";
    }
    return *rc;
  }
  auto rank = dflash::trainer::dist::ReadRankEnv();
  if (!rank.ok()) return Fail(rank.status());
  g_rank = *rank;
  try {
    if (eval_cmd->parsed()) {
      auto r = RunEval(eval, std::cout);
      return r.ok() ? 0 : Fail(r.status());
    }
    if (Status s = ApplyChoices(options, row_mode, kernels, pipeline); !s.ok()) return Fail(s);
    if (threads == 0 && !preset.empty()) threads = 1;
    if (threads > 0) torch::set_num_threads(threads);
    if (!preset.empty()) {
      if (preset != "tiny") return Fail(dflash::InvalidArgument("--preset " + preset + ": the only preset is tiny"));
      return TinyPreset(options, app, tiny);
    }
    return Train(options);
  } catch (const std::exception& e) {
    std::cerr << "dflash-train: internal error: " << e.what() << "\n";
    return kExitError;
  }
}
