// Every variant of the space that is valid for the buckets of the model's norms (and of the extremes of cols) and
// runs on this GPU, against the float64 reference on fresh random inputs with the outputs poisoned (NaN) before
// every launch: row counts that are multiples of no rows-per-block, strided rows (the target's q view with stride
// 512), sum_out in place over the residual, a residual without sum_out, gates, both weight storages, a large eps;
// then one launch captured in a CUDA graph and replayed, and the family's own workload through the tuner interface.
// Needs a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/rmsnorm/rmsnorm_api.h"
#include "kernels/rmsnorm/rmsnorm_config.h"
#include "kernels/rmsnorm/rmsnorm_family.h"
#include "kernels/rmsnorm/rmsnorm_workload.h"
#include "tuner/arch_limits.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::rmsnorm {
namespace {

struct Case {
  ProblemSpec spec;
  WorkloadOptions options;
  std::string name;
};

std::vector<Case> Cases() {
  WorkloadOptions plain;
  WorkloadOptions gate_strided;
  gate_strided.gate_pad = 8;
  WorkloadOptions q_view;  // the target's q: columns 0..255 of each 512-wide [query | gate] head row
  q_view.x_pad = 256;
  WorkloadOptions in_place;
  in_place.sum_in_place = true;
  WorkloadOptions padded;
  padded.x_pad = 8;
  padded.residual_pad = 16;
  padded.sum_out_pad = 24;
  padded.out_pad = 8;
  WorkloadOptions no_sum;
  no_sum.write_sum = false;
  WorkloadOptions big_eps;
  big_eps.eps = 0.25f;
  WorkloadOptions all_padded = padded;
  all_padded.gate_pad = 32;
  const WeightDtype bf16 = WeightDtype::kBf16, fp32 = WeightDtype::kFp32;
  const Kind std_ = Kind::kStandard, zc = Kind::kZeroCentred;
  return {
      {{1000, 128, std_, false, true, bf16}, gate_strided, "gated delta-net norm, strided gate"},
      {{3, 128, std_, false, true, bf16}, plain, "gated delta-net norm, 3 rows"},
      {{999, 256, zc, false, false, bf16}, q_view, "target q norm on the strided q view"},
      {{333, 5120, zc, true, false, bf16}, in_place, "target layer norm, sum_out in place over the residual"},
      {{333, 5120, zc, true, false, bf16}, padded, "target layer norm, sum_out apart, padded rows"},
      {{1, 5120, zc, true, false, bf16}, in_place, "target layer norm, 1 row, in place"},
      {{70, 5120, zc, true, false, bf16}, no_sum, "target layer norm, residual without sum_out"},
      {{77, 5120, std_, false, false, fp32}, plain, "drafter hidden norm"},
      {{1001, 128, std_, false, false, fp32}, big_eps, "drafter q norm, eps 0.25"},
      {{5, 16384, std_, true, true, fp32}, all_padded, "16384 cols, residual, gate, fp32 weights, padded rows"},
      {{37, 8, zc, true, true, fp32}, in_place, "8 cols, residual in place, gate, fp32 weights"},
  };
}

class RmsNormGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the rmsnorm GPU tests need one";
  }
};

struct Variant {
  gpu::Module module;
  tuner::LoadedVariant loaded;
};

// `config` compiled for `bucket`, with its kernel's lowered name; `pruned` says why the arch cannot run it, if so.
struct Compiled {
  tuner::Config config;
  std::string expression, lowered, pruned;
  tuner::CompiledVariant variant;
};

// Compiling needs no context, so it may run on any thread.
Result<Compiled> Compile(const tuner::Config& config, const tuner::Problem& bucket, const std::string& arch,
                         const tuner::ArchLimits& limits) {
  const tuner::KernelFamily& family = Family();
  const tuner::CompileSpec spec = family.MakeCompileSpec(config, bucket);
  Compiled c;
  c.config = config;
  c.expression = spec.name_expressions.at(0);
  DFLASH_ASSIGN_OR_RETURN(c.variant, tuner::CompileVariant(family.sources(), spec, arch,
                                                           "rmsnorm[" + tuner::ConfigLabel(config) + "]"));
  c.lowered = c.variant.lowered_names.at(c.expression);
  c.pruned = tuner::PruneReason(limits, c.variant.resources.at(c.lowered),
                                family.BlockShapeOf(config, bucket).threads, 0, false);
  return c;
}

// Loads a compiled variant into the calling thread's current context.
Result<std::unique_ptr<Variant>> Load(const Compiled& c) {
  auto v = std::make_unique<Variant>();
  const std::string label = "rmsnorm[" + tuner::ConfigLabel(c.config) + "]";
  DFLASH_ASSIGN_OR_RETURN(v->module, gpu::Module::Load(c.variant.cubin, label));
  DFLASH_ASSIGN_OR_RETURN(CUfunction f, v->module.Function(c.lowered));
  v->loaded.module = &v->module;
  v->loaded.config = c.config;
  v->loaded.functions[c.expression] = f;
  v->loaded.label = label;
  return v;
}

// The seed config of `bucket`, compiled and loaded (it must run on this arch).
Result<std::unique_ptr<Variant>> SeedVariant(const tuner::Problem& bucket, const gpu::Context& ctx) {
  const auto limits = tuner::LimitsFor(ctx.info().arch());
  if (!limits) return Unsupported("no limits for " + ctx.info().arch());
  DFLASH_ASSIGN_OR_RETURN(Compiled c, Compile(Family().SeedConfigs(bucket).at(0), bucket, ctx.info().arch(), *limits));
  if (!c.pruned.empty()) return Internal("the seed config is pruned: " + c.pruned);
  return Load(c);
}

TEST_F(RmsNormGpu, EveryValidVariantMatchesTheFloat64Reference) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const std::string arch = ctx->info().arch();
  const auto limits = tuner::LimitsFor(arch);
  ASSERT_TRUE(limits.has_value()) << "no limits for " << arch;
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();

  // The variants of every bucket the cases meet, compiled in parallel, loaded on this thread.
  std::map<std::string, std::vector<std::unique_ptr<Variant>>> by_bucket;
  for (const Case& c : Cases()) {
    const tuner::Problem bucket = ToJson(BucketOf(c.spec));
    if (by_bucket.count(bucket.dump())) continue;
    auto& variants = by_bucket[bucket.dump()];
    tuner::ThreadPool pool;
    std::vector<std::future<Result<Compiled>>> compiled;
    for (const tuner::Config& config : tuner::EnumerateSpace(Family())) {
      if (!Family().InvalidReason(config, bucket).empty()) continue;
      compiled.push_back(pool.Submit([&, bucket, config]() { return Compile(config, bucket, arch, *limits); }));
    }
    for (auto& f : compiled) {
      Result<Compiled> c = f.get();
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      if (!c->pruned.empty()) {
        std::printf("rmsnorm[%s] %s pruned on %s: %s\n", tuner::ConfigLabel(c->config).c_str(), bucket.dump().c_str(),
                    arch.c_str(), c->pruned.c_str());
        continue;
      }
      Result<std::unique_ptr<Variant>> v = Load(*c);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      variants.push_back(std::move(*v));
    }
    ASSERT_FALSE(variants.empty()) << bucket.dump();
    std::printf("%zu variants of %s runnable on %s\n", variants.size(), bucket.dump().c_str(), arch.c_str());
  }

  std::uint64_t seed = 4321;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Result<std::unique_ptr<tuner::Workload>> w = MakeRmsNormWorkload(*ctx, c.spec, ++seed, c.options);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    // Without a launch the poisoned output must fail the check: the check can fail.
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    EXPECT_EQ((*w)->Check(stream->get()).code(), ErrorCode::kMismatch);
    for (const auto& v : by_bucket.at(ToJson(BucketOf(c.spec)).dump())) {
      ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
      const Status launched = (*w)->Launch(v->loaded, stream->get());
      ASSERT_TRUE(launched.ok()) << v->loaded.label << ": " << launched.ToString();
      const Status checked = (*w)->Check(stream->get());
      EXPECT_TRUE(checked.ok()) << v->loaded.label << ": " << checked.ToString();
    }
  }
}

TEST_F(RmsNormGpu, ALaunchCapturedInAGraphGivesTheSameResultWhenReplayed) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const ProblemSpec spec{2000, 5120, Kind::kZeroCentred, true, false, WeightDtype::kBf16};
  Result<std::unique_ptr<Variant>> v = SeedVariant(ToJson(BucketOf(spec)), *ctx);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  WorkloadOptions in_place;
  in_place.sum_in_place = true;
  Result<std::unique_ptr<tuner::Workload>> w = MakeRmsNormWorkload(*ctx, spec, 77, in_place);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Result<gpu::GraphExec> graph = gpu::GraphExec::Capture(
      stream->get(), [&](CUstream s) { return (*w)->Launch((*v)->loaded, s); }, "rmsnorm graph");
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    ASSERT_TRUE(graph->Launch(stream->get()).ok());
    const Status s = (*w)->Check(stream->get());
    EXPECT_TRUE(s.ok()) << "replay " << replay << ": " << s.ToString();
  }
}

TEST_F(RmsNormGpu, FamilyWorkloadRunsThroughTheTunerInterface) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const tuner::KernelFamily& family = Family();
  const tuner::Problem problem = MakeProblem(777, 5120, Kind::kZeroCentred, true);
  Result<std::unique_ptr<Variant>> v = SeedVariant(*family.Bucket(problem), *ctx);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  Result<std::unique_ptr<tuner::Workload>> w = family.MakeWorkload(*ctx, problem, 99);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  // x and the residual read, sum_out and out written, the weight read once.
  EXPECT_EQ((*w)->BytesTouched(), std::size_t{777} * 5120 * 2 * 4 + 5120 * 2);
  ASSERT_TRUE((*w)->PoisonOutputs(nullptr).ok());
  ASSERT_TRUE((*w)->Launch((*v)->loaded, nullptr).ok());
  const Status s = (*w)->Check(nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(family.MakeWorkload(*ctx, tuner::Problem{{"rows", 0}}, 1).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::rmsnorm
