#include "trainer/train/ops_setup.h"

#include <cstdio>

#include "trainer/ops/cached_kernel_ops.h"
#include "trainer/ops/reference_ops.h"

namespace dflash::trainer {

Result<RunDevice> ResolveDevice(const TrainOptions& options) {
  RunDevice out;
  const bool gpu = torch::cuda::is_available();
  if (options.device == "auto") {
    out.device = gpu ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  } else if (options.device == "cpu") {
    out.device = torch::kCPU;
  } else if (options.device.rfind("cuda", 0) == 0) {
    if (!gpu) {
      return Unsupported("--device " + options.device + ": no GPU visible to LibTorch" +
#ifdef DFLASH_TORCH_CUDA
                         std::string("")
#else
                         std::string(" (this build has no CUDA backend: configure with -DDFLASH_TORCH_CUDA=ON)")
#endif
      );
    }
    try {
      out.device = torch::Device(options.device);
    } catch (const c10::Error&) {
      return InvalidArgument("--device " + options.device + ": not a device (cpu, cuda, cuda:N)");
    }
    // "cuda" alone names GPU 0 (every consumer needs an index: the kernel backend, the timers, the placement).
    if (!out.device.has_index()) out.device = torch::Device(torch::kCUDA, 0);
    const auto visible = static_cast<int>(torch::cuda::device_count());
    if (out.device.index() >= visible) {
      return InvalidArgument("--device " + options.device + ": LibTorch sees " + std::to_string(visible) +
                             " GPU(s) (cuda:0 ... cuda:" + std::to_string(visible - 1) + ")");
    }
  } else {
    return InvalidArgument("--device " + options.device + ": not a device (auto, cpu, cuda, cuda:N)");
  }
  if (options.compute_dtype == "auto") {
    out.compute_dtype = out.device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  } else if (options.compute_dtype == "bf16") {
    out.compute_dtype = torch::kBFloat16;
  } else if (options.compute_dtype == "fp32") {
    out.compute_dtype = torch::kFloat;
  } else {
    return InvalidArgument("--dtype " + options.compute_dtype + ": use auto, bf16 or fp32");
  }
  return out;
}

namespace {
void PrintProvenance(std::ostream& log, const std::vector<KernelUse>& uses) {
  log << "kernels: tuned winners from the cache (no JIT, no autotuning at training time)\n";
  char line[320];
  std::snprintf(line, sizeof line, "  %-40s %-14s %-12s %10s  %s\n", "operation", "family", "entry", "tuned ms",
                "variant");
  log << line;
  for (const auto& u : uses) {
    std::snprintf(line, sizeof line, "  %-40s %-14s %-12s %10.4f  %s\n", u.operation.c_str(), u.family.c_str(),
                  u.key_digest.substr(0, 12).c_str(), u.tuned_ms, u.config.c_str());
    log << line;
  }
}
}  // namespace

setup::TrainingSetup RunSetup(const TrainOptions& o, const setup::TargetConfig& target,
                              const setup::DrafterConfig& drafter) {
  setup::TrainingSetup s;
  s.target = target;
  s.drafter = drafter;
  s.max_length = o.max_length;
  s.loss_chunk_rows = o.loss_chunk_rows;
  s.num_anchors = o.num_anchors;
  s.padded_rows = o.row_mode == data::RowMode::kPad;
  s.packed_rows = o.row_mode == data::RowMode::kPack;
  return s;
}

Result<OpsBackend> MakeOps(const TrainOptions& options, const RunDevice& device, const setup::TargetConfig& target,
                           const setup::DrafterConfig& drafter, setup::OpSide side, std::ostream& log) {
  const bool cached = options.kernels == KernelBackend::kCached ||
                      (options.kernels == KernelBackend::kAuto && device.device.is_cuda());
  OpsBackend backend;
  if (!cached) {
    log << "kernels: LibTorch reference operations on " << device.device.str() << "\n";
    backend.ops = MakeReferenceOps();
    return backend;
  }
  if (!device.device.is_cuda()) return InvalidArgument("--kernels cached needs a GPU device (--device cuda)");
  if (device.compute_dtype != torch::kBFloat16) {
    return InvalidArgument("--kernels cached runs bf16 kernels: use --dtype bf16 (or auto)");
  }
  cache::CacheOptions cache_options;
  cache_options.dir = options.cache_dir.empty() ? cache::DefaultCacheDir() : options.cache_dir;
  cache_options.create = options.tune_missing;
  auto opened = cache::KernelCache::Open(cache_options);
  if (!opened.ok()) {
    return opened.status().WithContext("kernel cache " + cache_options.dir.string() +
                                       " (fill it with `dflash-tune warmup`, or pass --tune-missing)");
  }
  backend.cache = std::move(*opened);
  DFLASH_ASSIGN_OR_RETURN(auto ops, CachedKernelOps::Create(*backend.cache, device.device.index()));
  DFLASH_ASSIGN_OR_RETURN(setup::SetupRequests requests,
                          setup::KernelRequestsFor(RunSetup(options, target, drafter), side));
  if (!requests.notes.empty()) {
    std::string why;
    for (const auto& n : requests.notes) why += (why.empty() ? "" : "; ") + n;
    return Unsupported("the cached kernels cannot run this model (" + why + "): train with --kernels reference");
  }
  Result<std::vector<KernelUse>> uses = options.tune_missing
                                            ? ops->TuneMissing(requests.requests, tuner::TuneOptions{}, &log)
                                            : ops->Prepare(requests.requests);
  if (!uses.ok()) return uses.status();
  PrintProvenance(log, *uses);
  backend.uses = std::move(*uses);
  backend.ops = std::move(ops);
  return backend;
}

}  // namespace dflash::trainer
