// Every variant of the rmsnorm_bwd space that is valid for the buckets of the drafter's trained norms (and of the
// extremes of cols) and runs on this GPU, against the float64 reference on fresh random inputs with dx and dw_partial
// poisoned (NaN) before every launch: row counts that are multiples of no rows-per-block, padded rows per tensor,
// both kinds and weight storages, a large eps; then one launch captured in a CUDA graph and replayed, and the
// family's own workload through the tuner interface. Needs a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/rmsnorm/rmsnorm_bwd_family.h"
#include "kernels/rmsnorm/rmsnorm_bwd_workload.h"
#include "tuner/arch_limits.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::rmsnorm {
namespace {

struct Case {
  BwdProblemSpec spec;
  BwdWorkloadOptions options;
  std::string name;
};

std::vector<Case> Cases() {
  BwdWorkloadOptions plain;
  BwdWorkloadOptions padded;
  padded.x_pad = 8;
  padded.dy_pad = 16;
  padded.dx_pad = 24;
  BwdWorkloadOptions big_eps;
  big_eps.eps = 0.25f;
  const WeightDtype bf16 = WeightDtype::kBf16, fp32 = WeightDtype::kFp32;
  const Kind std_ = Kind::kStandard, zc = Kind::kZeroCentred;
  return {
      {{77, 5120, std_, fp32}, plain, "drafter hidden norm"},
      {{1, 5120, std_, fp32}, plain, "drafter hidden norm, 1 row"},
      {{1001, 128, std_, fp32}, big_eps, "drafter q / k norm, eps 0.25"},
      {{2000, 128, std_, fp32}, padded, "drafter q / k norm, padded rows"},
      {{333, 5120, zc, bf16}, padded, "zero-centred bf16 weight, padded rows"},
      {{5, kMaxBwdCols, std_, fp32}, plain, "the widest rows, fp32 weights"},
      {{5, kMaxBwdCols, zc, bf16}, padded, "the widest rows, bf16 weights, padded"},
      {{37, 8, zc, fp32}, padded, "8 cols, zero-centred"},
  };
}

class RmsNormBwdGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the rmsnorm_bwd GPU tests need one";
  }
};

// One compiled translation unit (its module) and the configs that launch it (they differ in row_groups only).
struct Unit {
  gpu::Module module;
  CUfunction function = nullptr;
  std::string expression;
  std::vector<tuner::LoadedVariant> variants;
};

struct Compiled {
  std::string expression, lowered, pruned;
  tuner::CompiledVariant variant;
};

Result<Compiled> Compile(const tuner::Config& config, const tuner::Problem& bucket, const std::string& arch,
                         const tuner::ArchLimits& limits) {
  const tuner::KernelFamily& family = BackwardFamily();
  const tuner::CompileSpec spec = family.MakeCompileSpec(config, bucket);
  Compiled c;
  c.expression = spec.name_expressions.at(0);
  DFLASH_ASSIGN_OR_RETURN(c.variant, tuner::CompileVariant(family.sources(), spec, arch, c.expression));
  c.lowered = c.variant.lowered_names.at(c.expression);
  c.pruned = tuner::PruneReason(limits, c.variant.resources.at(c.lowered),
                                family.BlockShapeOf(config, bucket).threads, 0, false);
  return c;
}

// The valid configs of `bucket`, grouped by translation unit, compiled in parallel and loaded on this thread.
Result<std::vector<std::unique_ptr<Unit>>> LoadBucket(const tuner::Problem& bucket, const gpu::Context& ctx) {
  const std::string arch = ctx.info().arch();
  const auto limits = tuner::LimitsFor(arch);
  if (!limits) return Unsupported("no limits for " + arch);
  std::map<std::string, std::vector<tuner::Config>> by_expression;
  for (const tuner::Config& config : tuner::EnumerateSpace(BackwardFamily())) {
    if (!BackwardFamily().InvalidReason(config, bucket).empty()) continue;
    by_expression[BackwardFamily().MakeCompileSpec(config, bucket).name_expressions.at(0)].push_back(config);
  }
  tuner::ThreadPool pool;
  std::vector<std::future<Result<Compiled>>> compiled;
  for (const auto& [expr, configs] : by_expression) {
    const tuner::Config first = configs.front();
    compiled.push_back(pool.Submit([&, first]() { return Compile(first, bucket, arch, *limits); }));
  }
  std::vector<std::unique_ptr<Unit>> units;
  auto configs = by_expression.begin();
  for (auto& f : compiled) {
    DFLASH_ASSIGN_OR_RETURN(Compiled c, f.get());
    const std::vector<tuner::Config>& group = (configs++)->second;
    if (!c.pruned.empty()) {
      std::printf("%s %s pruned on %s: %s\n", c.expression.c_str(), bucket.dump().c_str(), arch.c_str(),
                  c.pruned.c_str());
      continue;
    }
    auto u = std::make_unique<Unit>();
    u->expression = c.expression;
    DFLASH_ASSIGN_OR_RETURN(u->module, gpu::Module::Load(c.variant.cubin, c.expression));
    DFLASH_ASSIGN_OR_RETURN(u->function, u->module.Function(c.lowered));
    for (const tuner::Config& config : group) {
      tuner::LoadedVariant v;
      v.module = &u->module;
      v.config = config;
      v.functions[c.expression] = u->function;
      v.label = "rmsnorm_bwd[" + tuner::ConfigLabel(config) + "]";
      u->variants.push_back(std::move(v));
    }
    units.push_back(std::move(u));
  }
  if (units.empty()) return Internal("no runnable variant of " + bucket.dump());
  return units;
}

TEST_F(RmsNormBwdGpu, EveryValidVariantMatchesTheFloat64Reference) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  std::map<std::string, std::vector<std::unique_ptr<Unit>>> by_bucket;
  std::uint64_t seed = 9876;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const tuner::Problem bucket = ToJson(BucketOf(c.spec));
    if (!by_bucket.count(bucket.dump())) {
      Result<std::vector<std::unique_ptr<Unit>>> units = LoadBucket(bucket, *ctx);
      ASSERT_TRUE(units.ok()) << units.status().ToString();
      std::size_t n = 0;
      for (const auto& u : *units) n += u->variants.size();
      std::printf("%zu variants (%zu translation units) of %s runnable on %s\n", n, units->size(),
                  bucket.dump().c_str(), ctx->info().arch().c_str());
      by_bucket[bucket.dump()] = std::move(*units);
    }
    Result<std::unique_ptr<tuner::Workload>> w = MakeRmsNormBwdWorkload(*ctx, c.spec, ++seed, c.options);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    // Without a launch the poisoned outputs must fail the check: the check can fail.
    const tuner::LoadedVariant& first = by_bucket.at(bucket.dump()).front()->variants.front();
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    ASSERT_TRUE((*w)->Launch(first, stream->get()).ok());
    ASSERT_TRUE((*w)->Check(stream->get()).ok());
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    EXPECT_EQ((*w)->Check(stream->get()).code(), ErrorCode::kMismatch);
    for (const auto& u : by_bucket.at(bucket.dump())) {
      for (const tuner::LoadedVariant& v : u->variants) {
        ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
        const Status launched = (*w)->Launch(v, stream->get());
        ASSERT_TRUE(launched.ok()) << v.label << ": " << launched.ToString();
        const Status checked = (*w)->Check(stream->get());
        EXPECT_TRUE(checked.ok()) << v.label << ": " << checked.ToString();
      }
    }
  }
}

TEST_F(RmsNormBwdGpu, ALaunchCapturedInAGraphGivesTheSameResultWhenReplayed) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const BwdProblemSpec spec{3000, 5120, Kind::kStandard, WeightDtype::kFp32};
  Result<std::vector<std::unique_ptr<Unit>>> units = LoadBucket(ToJson(BucketOf(spec)), *ctx);
  ASSERT_TRUE(units.ok()) << units.status().ToString();
  const tuner::LoadedVariant& v = units->front()->variants.front();
  Result<std::unique_ptr<tuner::Workload>> w = MakeRmsNormBwdWorkload(*ctx, spec, 78);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Result<gpu::GraphExec> graph = gpu::GraphExec::Capture(
      stream->get(), [&](CUstream s) { return (*w)->Launch(v, s); }, "rmsnorm_bwd graph");
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    ASSERT_TRUE(graph->Launch(stream->get()).ok());
    const Status s = (*w)->Check(stream->get());
    EXPECT_TRUE(s.ok()) << "replay " << replay << ": " << s.ToString();
  }
}

TEST_F(RmsNormBwdGpu, TheFamilysWorkloadChecksThroughTheTunerInterface) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const tuner::Problem problem = MakeBwdProblem(4096, 128, Kind::kStandard, WeightDtype::kFp32);
  Result<std::vector<std::unique_ptr<Unit>>> units = LoadBucket(*BackwardFamily().Bucket(problem), *ctx);
  ASSERT_TRUE(units.ok()) << units.status().ToString();
  Result<std::unique_ptr<tuner::Workload>> w = BackwardFamily().MakeWorkload(*ctx, problem, 5);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->BytesTouched(), std::size_t{4096} * 128 * 2 * 3 + 128 * 4);
  ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
  ASSERT_TRUE((*w)->Launch(units->back()->variants.back(), stream->get()).ok());
  EXPECT_TRUE((*w)->Check(stream->get()).ok());
  EXPECT_EQ(BackwardFamily().MakeWorkload(*ctx, {{"rows", 4}}, 5).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::rmsnorm
