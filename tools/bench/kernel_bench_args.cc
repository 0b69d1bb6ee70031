#include "kernel_bench_args.h"

#include <cmath>

namespace dflash::bench {

void AddBenchOptions(CLI::App& app, BenchArgs& a) {
  app.add_option("--family", a.family, "Kernel family: attention_fwd, attention_bwd, gdn, conv1d, rmsnorm (see "
                                       "`dflash-tune families`)")
      ->required();
  app.add_option("--problem", a.problem_json,
                 "The problem as JSON, exactly as given to `dflash-tune warmup --problem FAMILY=JSON`")
      ->required();
  app.add_option("--cache-dir", a.cache_dir,
                 "Kernel cache to read the tuned winner from (default: $DFLASH_CACHE_DIR, else "
                 "$XDG_CACHE_HOME/dflash-tune, else ~/.cache/dflash-tune)");
  app.add_option("--arch", a.arch, "Arch of the winner to look up, e.g. sm_90 (default: the GPU's; without a GPU "
                                   "only with --resolve-only)");
  app.add_option("--device", a.device, "GPU ordinal (default 0)");
  app.add_option("--seed", a.seed, "Seed of the random inputs (default 1); the same seed gives the same anchors / "
                                   "sequence lengths as --instance-out reports");
  app.add_option("--warmup", a.warmup, "Untimed launches (or graph replays) before timing (default 3)");
  app.add_option("--reps", a.reps, "Timed launches (or graph replays) per measurement (default 25)");
  app.add_flag("--graph", a.graph, "Capture --graph-launches launches into a CUDA graph and time its replays "
                                   "(host overhead out); median_ms is per launch");
  app.add_option("--graph-launches", a.graph_launches, "Launches per captured graph (default 10)");
  app.add_flag("!--no-flush", a.flush_l2, "Do not flush L2 before each timed launch / replay");
  app.add_option("--max-spread", a.max_spread, "Re-measure while (p90-p10)/median exceeds this (default 0.05)");
  app.add_option("--max-remeasures", a.max_remeasures, "At most this many re-measurements (default 2)");
  app.add_option("--timeout-ms", a.timeout_ms,
                 "Bound on one launch / replay in ms, the first, checked one included (default 30000); past it "
                 "kernel_bench exits with code 2 without waiting for the kernel");
  app.add_flag("--check", a.check, "Check the outputs against the family's float64 reference once before timing "
                                   "(and once more after a graph replay); off by default: the CPU reference of a "
                                   "big problem takes seconds to minutes, and warmup already gated the winner");
  app.add_flag("--resolve-only", a.resolve_only, "Look the winner up and print it without running anything (no GPU "
                                                 "needed with --arch)");
  app.add_flag("--instance-only", a.instance_only, "Write --instance-out and stop (no cache, no GPU)");
  app.add_option("--instance-out", a.instance_out,
                 "Write the random instance's facts as JSON to this file: DFlash anchors and block validity, "
                 "cu_seqlens, attended (q, kv) pairs; what a side-by-side benchmark needs to build the same problem");
  app.add_option("--config", a.config_json,
                 "Time this config (a JSON object of the family's parameters) instead of the cache's winner: also "
                 "one the tuner skips (its reason is reported as skipped_by_tuner), never one the arch cannot run; "
                 "compiled once into the cache's artifacts, as warmup compiles");
}

Status ValidateArgs(const BenchArgs& a) {
  if (a.family.empty()) return InvalidArgument("--family is required");
  if (a.problem_json.empty()) return InvalidArgument("--problem is required");
  if (a.device < 0) return InvalidArgument("--device must be >= 0");
  if (a.warmup < 0) return InvalidArgument("--warmup must be >= 0");
  if (a.reps < 1) return InvalidArgument("--reps must be >= 1");
  if (a.graph_launches < 1) return InvalidArgument("--graph-launches must be >= 1");
  if (a.max_remeasures < 0) return InvalidArgument("--max-remeasures must be >= 0");
  if (!(a.max_spread >= 0.0)) return InvalidArgument("--max-spread must be >= 0");
  if (!(a.timeout_ms > 0.0) || !std::isfinite(a.timeout_ms)) return InvalidArgument("--timeout-ms must be > 0");
  if (a.resolve_only && a.instance_only) return InvalidArgument("--resolve-only and --instance-only exclude each other");
  if (a.instance_only && a.instance_out.empty()) return InvalidArgument("--instance-only needs --instance-out FILE");
  if (!a.config_json.empty() && a.resolve_only) {
    return InvalidArgument("--config and --resolve-only exclude each other (--resolve-only reads the winner)");
  }
  return Status::Ok();
}

Result<tuner::Problem> ParseProblemText(const std::string& text) {
  tuner::Problem p = tuner::Problem::parse(text, nullptr, /*allow_exceptions=*/false);
  if (p.is_discarded()) return InvalidArgument("--problem is not valid JSON: " + text);
  if (!p.is_object()) return InvalidArgument("--problem must be a JSON object, got: " + text);
  return p;
}

}  // namespace dflash::bench
