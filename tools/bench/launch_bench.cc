// launch_bench: host time per cached-kernel launch through the trainer's ops (CachedKernelOps), against the family's
// own launch call on the same winner and prebuilt arguments (its parameter packing + the driver's cuLaunchKernel).
// The difference is what the trainer adds per launch (resolving the winner, checks, output allocation); the goal
// is under 5 us. A third column times the per-launch key resolution the ops did before they kept each shape's
// winner (the shape's kernel requests, the family's bucket, the tuning key's SHA-256 over the family's sources and
// a map lookup: what every launch paid then), plus the family's launch call. Shapes: the tiny preset's (setup::Preset("tiny"); their keys come from
// `dflash-tune warmup --preset tiny`, or --tune-missing). Host time only: launches are issued in batches well below
// the driver's queue depth and the device is synchronised between batches, outside the timed loops.
// Prints a table and, last, one JSON line. Exit codes: 0 measured; 2 could not run (no GPU, a missing key: the
// message names the warmup command).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#ifdef DFLASH_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "kernels/attention/attention_api.h"
#include "kernels/attention/attention_family.h"
#include "kernels/conv1d/conv1d_api.h"
#include "kernels/conv1d/conv1d_family.h"
#include "setup/presets.h"
#include "trainer/ops/cached_kernel_ops.h"
#include "tuner/kernel_provider.h"
#include "tuner/tuning_key.h"

namespace {

using dflash::Status;
namespace setup = dflash::setup;
namespace trainer = dflash::trainer;

struct Options {
  std::string cache_dir;
  int device = 0;
  int launches = 256;  // per timed batch (below the driver's queue depth of about a thousand launches)
  int batches = 20;
  bool tune_missing = false;
};

#ifdef DFLASH_TORCH_CUDA
// Median over batches of the host microseconds per call of `fn`, the device synchronised between batches.
double HostMicrosPerCall(const std::function<void()>& fn, const Options& o, int device) {
  for (int i = 0; i < 16; ++i) fn();  // warm: first-launch costs, allocator blocks
  torch::cuda::synchronize(device);
  std::vector<double> per_call;
  for (int b = 0; b < o.batches; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.launches; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / o.launches);
    torch::cuda::synchronize(device);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

CUdeviceptr Ptr(const torch::Tensor& t) { return reinterpret_cast<CUdeviceptr>(t.data_ptr()); }

int Run(const Options& o) {
  if (!torch::cuda::is_available()) {
    std::cerr << "launch_bench: no GPU visible to LibTorch\n";
    return 2;
  }
  auto preset = setup::Preset("tiny");
  if (!preset.ok()) return std::cerr << "launch_bench: " << preset.status().ToString() << "\n", 2;
  dflash::cache::CacheOptions cache_options;
  cache_options.dir = o.cache_dir.empty() ? dflash::cache::DefaultCacheDir() : std::filesystem::path(o.cache_dir);
  cache_options.create = o.tune_missing;
  auto cache = dflash::cache::KernelCache::Open(cache_options);
  if (!cache.ok()) return std::cerr << "launch_bench: " << cache.status().ToString() << "\n", 2;
  auto ops = trainer::CachedKernelOps::Create(**cache, o.device);
  if (!ops.ok()) return std::cerr << "launch_bench: " << ops.status().ToString() << "\n", 2;
  auto requests = setup::KernelRequestsFor(*preset);
  if (!requests.ok()) return std::cerr << "launch_bench: " << requests.status().ToString() << "\n", 2;
  auto prepared = o.tune_missing ? (*ops)->TuneMissing(requests->requests, dflash::tuner::TuneOptions{})
                                 : (*ops)->Prepare(requests->requests);
  if (!prepared.ok()) return std::cerr << "launch_bench: " << prepared.status().ToString() << "\n", 2;

  auto ctx = dflash::gpu::Context::Primary(o.device);
  if (!ctx.ok()) return std::cerr << "launch_bench: " << ctx.status().ToString() << "\n", 2;
  dflash::tuner::KernelProvider provider(**cache, *ctx);
  const auto stream = reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(o.device).stream());
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA, o.device);

  const setup::TargetConfig& t = preset->target;
  const std::int64_t tokens = preset->max_length;
  const std::int64_t channels = 2 * t.linear_num_key_heads * t.linear_key_head_dim +
                                t.linear_num_value_heads * t.linear_value_head_dim;
  struct Row {
    std::string op;
    double ops_us, api_us, per_launch_key_us;
  };
  const std::string arch = (*ctx).info().arch();
  // What a launch cost when the ops resolved its key every time (see the header comment).
  auto resolve_key = [&](const setup::OpShape& shape) {
    const auto request = setup::KernelRequestsFor(shape).front();
    auto bucket = request.family->Bucket(request.problem);
    if (bucket.ok()) (void)dflash::tuner::MakeTuningKey(*request.family, *bucket, arch).Digest();
  };
  std::vector<Row> rows;

  {  // conv1d + SiLU: one kernel
    auto x = torch::randn({tokens, channels}, bf16), w = torch::randn({channels, 4}, bf16);
    auto y = torch::empty_like(x);
    const auto shape = setup::OpShape::Conv1d(tokens, channels, 1);
    const auto request = setup::KernelRequestsFor(shape).front();
    auto winner = provider.Get(*request.family, request.problem);
    if (!winner.ok()) return std::cerr << "launch_bench: " << winner.status().ToString() << "\n", 2;
    const auto args = dflash::conv1d::Conv1dArgs::Contiguous(dflash::conv1d::Layout::kTokenMajor, Ptr(x), Ptr(w),
                                                             Ptr(y), tokens, channels);
    const double ops_us =
        HostMicrosPerCall([&] { (void)(*ops)->CausalConv1dSilu(x, w, torch::Tensor()); }, o, o.device);
    const double api_us = HostMicrosPerCall(
        [&] { (void)dflash::conv1d::LaunchConv1d(*winner->variant, args, stream); }, o, o.device);
    const double old_us = HostMicrosPerCall(
        [&] {
          resolve_key(shape);
          (void)dflash::conv1d::LaunchConv1d(*winner->variant, args, stream);
        },
        o, o.device);
    rows.push_back({"conv1d", ops_us, api_us, old_us});
  }
  {  // target causal attention, forward: one kernel
    const std::int64_t hq = t.num_attention_heads, hkv = t.num_key_value_heads, d = t.head_dim;
    auto q = torch::randn({tokens, hq, d}, bf16), k = torch::randn({tokens, hkv, d}, bf16),
         v = torch::randn({tokens, hkv, d}, bf16);
    auto out = torch::empty_like(q);
    auto lse = torch::empty({1, hq, tokens}, bf16.dtype(torch::kFloat));
    const auto shape = setup::OpShape::CausalAttention(tokens, 1, hq, hkv, d);
    const auto request = setup::KernelRequestsFor(shape).front();
    auto winner = provider.Get(*request.family, request.problem);
    if (!winner.ok()) return std::cerr << "launch_bench: " << winner.status().ToString() << "\n", 2;
    dflash::attention::AttentionArgs a;
    a.problem = shape.attention;
    a.q = dflash::attention::TensorRef::Bshd(Ptr(q), tokens, hq, d);
    a.k = dflash::attention::TensorRef::Bshd(Ptr(k), tokens, hkv, d);
    a.v = dflash::attention::TensorRef::Bshd(Ptr(v), tokens, hkv, d);
    a.o = dflash::attention::TensorRef::Bshd(Ptr(out), tokens, hq, d);
    a.lse = Ptr(lse);
    a.scale = 0.125f;
    const double ops_us =
        HostMicrosPerCall([&] { (void)(*ops)->CausalAttention(q, k, v, torch::Tensor(), 0.125); }, o, o.device);
    const double api_us =
        HostMicrosPerCall([&] { (void)dflash::attention::LaunchForward(*winner->variant, a, stream); }, o, o.device);
    const double old_us = HostMicrosPerCall(
        [&] {
          resolve_key(shape);
          (void)dflash::attention::LaunchForward(*winner->variant, a, stream);
        },
        o, o.device);
    rows.push_back({"causal_attention forward", ops_us, api_us, old_us});
  }

  std::printf("%-26s %13s %16s %12s %22s\n", "operation (1 kernel each)", "ops us/launch", "family us/launch",
              "overhead us", "key per launch us/launch");
  nlohmann::json j = {{"device", (*ctx).info().name}, {"launches", o.launches}, {"batches", o.batches}};
  for (const Row& r : rows) {
    std::printf("%-26s %13.2f %16.2f %12.2f %22.2f\n", r.op.c_str(), r.ops_us, r.api_us, r.ops_us - r.api_us,
                r.per_launch_key_us);
    j["ops"][r.op] = {{"ops_us", r.ops_us},
                      {"family_launch_us", r.api_us},
                      {"overhead_us", r.ops_us - r.api_us},
                      {"per_launch_key_us", r.per_launch_key_us}};
  }
  std::cout << j.dump() << std::endl;
  return 0;
}
#else
int Run(const Options&) {
  std::cerr << "launch_bench: needs LibTorch's CUDA backend (configure with -DDFLASH_TORCH_CUDA=ON)\n";
  return 2;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"launch_bench: host microseconds per cached-kernel launch through the trainer's ops, against the "
               "family's own launch call (tiny preset shapes)"};
  Options o;
  app.add_option("--cache-dir", o.cache_dir, "Kernel cache (default: $DFLASH_CACHE_DIR or ~/.cache/dflash-tune)");
  app.add_option("--device", o.device, "CUDA device")->capture_default_str();
  app.add_option("--launches", o.launches, "Launches per timed batch")->capture_default_str();
  app.add_option("--batches", o.batches, "Timed batches (the median is reported)")->capture_default_str();
  app.add_flag("--tune-missing", o.tune_missing, "Tune the tiny preset's missing keys first");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return Run(o);
  } catch (const std::exception& e) {
    std::cerr << "launch_bench: " << e.what() << "\n";
    return 2;
  }
}
