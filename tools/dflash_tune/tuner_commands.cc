// dflash-tune families and warmup: list the kernel families; tune (or compile-only) the problems of a preset,
// a config file or explicit --problem arguments into the cache, one worker per GPU.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "setup/presets.h"
#include "kernels/registry.h"
#include "cli_common.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/tuner.h"

namespace dflash::cli {
namespace {

using nlohmann::json;

struct WarmupArgs {
  std::string arch, preset, config_file, devices, budget;
  std::vector<std::string> problems;
  bool compile_only = false, allow_spills = false;
  unsigned jobs = 0;
  std::uint64_t seed = 0;
  double timeout_ms = tuner::BenchOptions{}.timeout_ms;
  int final_rounds = tuner::FinalRoundOptions{}.rounds;
};

// "--budget 40" (variants) or "--budget 90s" (seconds).
Status ParseBudget(const std::string& text, tuner::SearchBudget* b) {
  if (text.empty()) return Status::Ok();
  std::string digits = text;
  const bool seconds = text.back() == 's';
  if (seconds) digits.pop_back();
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("--budget wants a number of variants (40) or seconds (90s), got '" + text + "'");
  }
  if (seconds) {
    b->max_seconds = std::stod(digits);
  } else {
    b->max_variants = std::stoi(digits);
  }
  return Status::Ok();
}

Result<std::vector<int>> ParseDevices(const std::string& text, int count) {
  std::vector<int> out;
  if (text.empty()) {
    if (count > 0) out.push_back(0);
    return out;
  }
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) {
      return InvalidArgument("--devices wants a list like 0,1,2; got '" + text + "'");
    }
    int d = std::stoi(part);
    if (d >= count) {
      return InvalidArgument("--devices " + text + ": device " + part + " does not exist (" + std::to_string(count) +
                             " GPU(s) present)");
    }
    out.push_back(d);
  }
  return out;
}

// One line of progress on a terminal (rewritten in place), or plain lines otherwise. Thread-safe.
class Progress {
 public:
  explicit Progress(int total_keys) : total_(total_keys), tty_(::isatty(STDERR_FILENO)) {}
  void Stage(const tuner::ProgressEvent& e, int key_index) {
    if (!tty_) return;  // plain mode prints per key only
    std::lock_guard<std::mutex> g(mu_);
    const int width = 24;
    const int filled = e.total ? width * e.done / e.total : width;
    std::fprintf(stderr, "\r[%d/%d] %-10s %-9s [%s%s] %d/%d   ", key_index + 1, total_, e.family.c_str(),
                 e.stage.c_str(), std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), e.done,
                 e.total);
    std::fflush(stderr);
  }
  void KeyDone(const tuner::KeyReport& r, int key_index) {
    std::lock_guard<std::mutex> g(mu_);
    if (tty_) std::fprintf(stderr, "\r%s\r", std::string(90, ' ').c_str());
    std::fprintf(stderr, "[%d/%d] %s %s: %s (%.1f s)\n", ++finished_, total_, r.family.c_str(),
                 r.signature.c_str(), tuner::KeyStatusName(r.status), r.wall_s);
    (void)key_index;
  }

 private:
  std::mutex mu_;
  int total_;
  int finished_ = 0;
  bool tty_;
};

int Warmup(const GlobalOptions& g, const WarmupArgs& a) {
  const auto started = std::chrono::steady_clock::now();
  // Problem set.
  std::vector<setup::KernelRequest> items;
  std::vector<std::string> notes;
  if (!a.problems.empty()) {
    for (const auto& p : a.problems) {
      auto item = setup::ParseProblemArg(p);
      if (!item.ok()) return Fail(item.status().message());
      items.push_back(*item);
    }
  }
  if (!a.config_file.empty() || !a.preset.empty() || a.problems.empty()) {
    auto training = !a.config_file.empty() ? setup::SetupFromConfigFile(a.config_file)
                                           : setup::Preset(a.preset.empty() ? "dflash-27b" : a.preset);
    if (!training.ok()) return Fail(training.status().message());
    auto derived = setup::KernelRequestsFor(*training);
    if (!derived.ok()) return Fail(derived.status().message());
    items.insert(items.end(), derived->requests.begin(), derived->requests.end());
    notes.insert(notes.end(), derived->notes.begin(), derived->notes.end());
  }
  for (const auto& it : items) {
    if (auto b = it.family->Bucket(it.problem); !b.ok()) {
      return Fail("problem for " + std::string(it.family->name()) + " (" + it.operation + ")", b.status());
    }
  }
  // Devices and arch.
  const int gpus = gpu::DeviceCount();
  auto devices = ParseDevices(a.devices, gpus);
  if (!devices.ok()) return Fail(devices.status().message());
  std::vector<std::unique_ptr<gpu::Context>> contexts;
  for (int d : *devices) {
    auto ctx = gpu::Context::Primary(d);
    if (!ctx.ok()) return Fail("cannot use GPU " + std::to_string(d), ctx.status());
    contexts.push_back(std::make_unique<gpu::Context>(std::move(*ctx)));
  }
  std::string arch = a.arch;
  if (arch.empty()) {
    if (contexts.empty()) {
      return Fail("no GPU present: pass --arch (e.g. --arch sm_120) to compile and prune without timing");
    }
    arch = contexts.front()->info().arch();
  }
  if (!tuner::IsValidArch(arch)) {
    std::string valid;
    for (const auto& v : tuner::ValidArchs()) valid += (valid.empty() ? "" : ", ") + v;
    return Fail("unsupported --arch '" + arch + "' (supported: " + valid + ")");
  }
  bool any_matching = false;
  for (const auto& c : contexts) any_matching |= tuner::RunsOn(arch, c->info().cc());
  if (!a.compile_only && !any_matching) {
    notes.push_back("no GPU of arch " + arch + " here" +
                    (contexts.empty() ? "" : " (GPU 0 is " + contexts.front()->info().arch() + ")") +
                    ": variants are compiled and pruned, and timing needs a GPU of that arch");
  }
  tuner::TuneOptions opts;
  opts.arch = arch;
  opts.compile_only = a.compile_only;
  opts.allow_spills = a.allow_spills;
  opts.seed = a.seed;
  if (Status st = ParseBudget(a.budget, &opts.budget); !st.ok()) return Fail(st.message());
  opts.bench.timeout_ms = a.timeout_ms;
  if (Status st = tuner::ValidateOptions(opts.bench); !st.ok()) return Fail("--timeout-ms: " + st.message());
  opts.final_round.rounds = a.final_rounds;
  if (Status st = tuner::ValidateFinalRoundOptions(opts.final_round); !st.ok()) {
    return Fail("--final-rounds: " + st.message());
  }
  auto cache = OpenCache(g, /*create=*/true);
  if (!cache.ok()) return FailCache(g, "open the cache", cache.status());
  if ((*cache)->read_only()) return Fail("cannot warm up into " + (*cache)->dir().string() + ": " + (*cache)->open_note());
  tuner::ThreadPool pool(a.jobs);

  // One worker per GPU (or one compile-only worker); keys handed out in order; the cache's single flight keeps a
  // key from being done twice, here or by another process.
  Progress progress(static_cast<int>(items.size()));
  std::vector<std::optional<Result<tuner::KeyReport>>> reports(items.size());
  std::vector<int> key_device(items.size(), -1);  // the GPU that took each key (-1: compile-only worker)
  std::atomic<std::size_t> next{0};
  std::atomic<int> busy_gpus{0};  // GPUs left running a kernel that timed out (no more timings on them)
  auto worker = [&](const gpu::Context* ctx) {
    tuner::Tuner tuner(**cache, (ctx && tuner::RunsOn(arch, ctx->info().cc())) ? ctx : nullptr, pool);
    if (ctx) ctx->MakeCurrent().ok();
    for (std::size_t i; (i = next++) < items.size();) {
      auto r = tuner.Tune(*items[i].family, items[i].problem, opts,
                          [&](const tuner::ProgressEvent& e) { progress.Stage(e, static_cast<int>(i)); });
      if (r.ok()) progress.KeyDone(*r, static_cast<int>(i));
      const bool gpu_busy = !r.ok() && r.status().code() == ErrorCode::kTimeout;
      reports[i] = std::move(r);
      key_device[i] = ctx ? ctx->info().ordinal : -1;
      if (gpu_busy) {  // its kernel may never end: timings beside it would be wrong, so this GPU takes no more keys
        ++busy_gpus;
        break;
      }
    }
  };
  std::vector<std::thread> threads;
  if (contexts.empty()) {
    threads.emplace_back(worker, nullptr);
  } else {
    for (const auto& c : contexts) threads.emplace_back(worker, c.get());
  }
  for (auto& t : threads) t.join();
  for (std::string& healed : (*cache)->TakeHealNotes()) notes.push_back(std::move(healed));

  // Summary.
  tuner::TuneCounts total;
  int errors = 0, no_variant = 0;
  json keys = json::array();
  std::vector<std::vector<std::string>> table = {
      {"family", "problem", "status", "winner", "ms", "compiled", "reused", "bench", "pruned", "failed", "s"}};
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!reports[i]) {  // every GPU that could time it was left busy by a timed-out kernel
      ++errors;
      const std::string why = "not tuned: the GPUs were left running a kernel that timed out (run warmup again)";
      std::cerr << "dflash-tune: warmup of " << items[i].family->name() << " " << items[i].problem.dump() << " "
                << why << "\n";
      keys.push_back({{"family", items[i].family->name()}, {"problem", items[i].problem}, {"status", "error"},
                      {"error", why}});
      continue;
    }
    const auto& r = *reports[i];
    if (!r.ok()) {
      ++errors;
      std::cerr << "dflash-tune: warmup of " << items[i].family->name() << " " << items[i].problem.dump()
                << " failed: " << r.status().message() << "\n";
      keys.push_back({{"family", items[i].family->name()}, {"problem", items[i].problem}, {"status", "error"},
                      {"error", r.status().message()}});
      continue;
    }
    total += r->counts;
    if (r->status == tuner::KeyStatus::kNoValidVariant) ++no_variant;
    char ms[32] = "-";
    if (r->winner_ms > 0) std::snprintf(ms, sizeof ms, "%.4f", r->winner_ms);
    const auto& c = r->counts;
    table.push_back({r->family, r->signature, tuner::KeyStatusName(r->status),
                     r->winner_config.empty() ? "-" : r->winner_config, ms, std::to_string(c.compiled),
                     std::to_string(c.reused), std::to_string(c.benchmarked), std::to_string(c.pruned),
                     std::to_string(c.failed), std::to_string(r->wall_s).substr(0, 5)});
    keys.push_back({{"family", r->family}, {"problem", json::parse(r->signature)}, {"key", r->key_digest},
                    {"status", tuner::KeyStatusName(r->status)}, {"device", key_device[i]},
                    {"winner", r->winner_config},
                    {"median_ms", r->winner_ms}, {"variants", r->variants}, {"note", r->note},
                    {"compiled", c.compiled}, {"reused", c.reused}, {"benchmarked", c.benchmarked},
                    {"pruned", c.pruned}, {"invalid", c.invalid}, {"failed", c.failed}, {"wall_s", r->wall_s}});
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (g.json) {
    json out = {{"arch", arch},
                {"cache_dir", (*cache)->dir().string()},
                {"compile_only", a.compile_only || !any_matching},
                {"devices", *devices},
                {"compiled", total.compiled},
                {"reused", total.reused},
                {"benchmarked", total.benchmarked},
                {"pruned", total.pruned},
                {"failed", total.failed},
                {"winners_new", total.winners_new},
                {"winners_cached", total.winners_cached},
                {"errors", errors},
                {"wall_s", wall},
                {"notes", notes},
                {"keys", keys}};
    std::cout << out.dump(2) << "\n";
  } else {
    PrintTable(table);
    std::printf("arch %s: %d compiled, %d reused, %d benchmarked, %d pruned, %d failed; %d new winners, %d cached; "
                "%.2f s\n",
                arch.c_str(), total.compiled, total.reused, total.benchmarked, total.pruned, total.failed,
                total.winners_new, total.winners_cached, wall);
    for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
  }
  if (busy_gpus > 0) {
    // A kernel that did not finish is still running, and releasing the GPU's buffers, modules or context would wait
    // for it: the process ends here and the driver reclaims the GPU. The variant is recorded as timed out, so the
    // next warmup skips it.
    std::cerr << "dflash-tune: " << busy_gpus.load() << " GPU(s) still run a kernel that timed out; exiting without "
              << "waiting for it (its variant is recorded as timed out and skipped from now on)\n";
    cache->reset();  // its counters are flushed; no other thread uses it after the join
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(kExitError);
  }
  if (errors) return kExitError;
  return no_variant ? kExitProblems : kExitOk;
}

int Families(const GlobalOptions& g) {
  json out = json::array();
  std::vector<std::vector<std::string>> table = {{"family", "variants", "parameters", "summary"}};
  for (const tuner::KernelFamily* f : kernels::AllFamilies()) {
    const auto space = tuner::EnumerateSpace(*f);
    std::string params;
    json pj = json::object();
    for (const auto& p : f->params()) {
      params += (params.empty() ? "" : " ") + p.name + "{";
      for (std::size_t i = 0; i < p.values.size(); ++i) params += (i ? "," : "") + std::to_string(p.values[i]);
      params += "}";
      pj[p.name] = p.values;
    }
    table.push_back({std::string(f->name()), std::to_string(space.size()), params, std::string(f->summary())});
    out.push_back({{"family", f->name()}, {"variants", space.size()}, {"parameters", pj}, {"summary", f->summary()}});
  }
  if (g.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    PrintTable(table);
  }
  return kExitOk;
}

}  // namespace

void AddTunerCommands(CLI::App& app, GlobalOptions& g, Action* run) {
  app.add_subcommand("families", "List the registered kernel families and the size of their tuning spaces")
      ->callback([&g, run] { *run = [&g] { return Families(g); }; });

  auto* w = app.add_subcommand("warmup", "Compile, check and benchmark kernel variants; store the winners in the "
                                         "cache (compile-only without a GPU of the arch)");
  auto a = std::make_shared<WarmupArgs>();
  w->add_option("--arch", a->arch, "Target arch, e.g. sm_120 (default: the GPU present)");
  w->add_option("--preset", a->preset, "Problem set: dflash-27b (default) or tiny");
  w->add_option("--config", a->config_file,
                "JSON naming target_config / drafter_config (HF config.json) and max_length, batch_size, "
                "num_anchors");
  w->add_option("--problem", a->problems, "One problem as FAMILY=JSON (repeatable), e.g. "
                                           "conv1d='{\"tokens\":4096,\"channels\":10240}'");
  w->add_option("--devices", a->devices, "GPUs to benchmark on, e.g. 0,1 (one worker each; default 0)");
  w->add_flag("--compile-only", a->compile_only, "Compile and prune only, even with a GPU present");
  w->add_option("--jobs", a->jobs, "Parallel compiles (default: all cores)");
  w->add_option("--budget", a->budget, "Benchmark at most N variants per problem (40) or for N seconds (90s)");
  w->add_flag("--allow-spills", a->allow_spills, "Keep variants that spill registers");
  w->add_option("--seed", a->seed, "Seed for random inputs and sampling (default: random)");
  const tuner::FinalRoundOptions final_round;
  w->add_option("--final-rounds", a->final_rounds,
                "Rounds in which each key's fastest variants (within " +
                    std::to_string(static_cast<int>(final_round.margin * 100 + 0.5)) + " % of the sweep's best, at most " +
                    std::to_string(final_round.max_finalists) + ") are measured again in turns; the lowest median wins "
                    "(default " + std::to_string(final_round.rounds) + "; 0: the sweep's best wins)");
  w->add_option("--timeout-ms", a->timeout_ms,
                "Bound on one launch of a candidate in ms (default 10000); past it the variant is recorded as timed "
                "out, its GPU takes no more keys and the warmup exits with code 2 after its summary");
  w->callback([&g, run, a] { *run = [&g, a] { return Warmup(g, *a); }; });
}

}  // namespace dflash::cli
