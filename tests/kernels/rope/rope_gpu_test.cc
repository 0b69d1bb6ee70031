// Every config of the rope space for the buckets the models use (and the extremes), forward and backward sign,
// against the float64 reference on fresh random inputs with the output poisoned before every launch: the target's
// strided q view, a gap after each token, token counts that fill no block; then a graph replay and the family's
// workload through the tuner interface. Needs a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/rope/rope_family.h"
#include "kernels/rope/rope_workload.h"
#include "tuner/arch_limits.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::rope {
namespace {

class RopeGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the rope GPU tests need one";
  }
};

struct Unit {
  gpu::Module module;
  std::vector<tuner::LoadedVariant> variants;
};

// Every valid config of `bucket`, one module per translation unit (configs that differ only in `items` share it).
Result<std::vector<std::unique_ptr<Unit>>> LoadBucket(const tuner::Problem& bucket, const gpu::Context& ctx) {
  const auto limits = tuner::LimitsFor(ctx.info().arch());
  if (!limits) return Unsupported("no limits for " + ctx.info().arch());
  std::map<std::string, std::vector<tuner::Config>> by_expression;
  for (const tuner::Config& c : tuner::EnumerateSpace(Family())) {
    if (Family().InvalidReason(c, bucket).empty())
      by_expression[Family().MakeCompileSpec(c, bucket).name_expressions.at(0)].push_back(c);
  }
  std::vector<std::unique_ptr<Unit>> units;
  for (const auto& [expr, configs] : by_expression) {
    const tuner::CompileSpec spec = Family().MakeCompileSpec(configs.front(), bucket);
    DFLASH_ASSIGN_OR_RETURN(tuner::CompiledVariant c, tuner::CompileVariant(Family().sources(), spec,
                                                                           ctx.info().arch(), expr));
    const std::string& lowered = c.lowered_names.at(expr);
    const std::string pruned = tuner::PruneReason(*limits, c.resources.at(lowered),
                                                  Family().BlockShapeOf(configs.front(), bucket).threads, 0, false);
    if (!pruned.empty()) return Internal(expr + " pruned: " + pruned);
    auto u = std::make_unique<Unit>();
    DFLASH_ASSIGN_OR_RETURN(u->module, gpu::Module::Load(c.cubin, expr));
    DFLASH_ASSIGN_OR_RETURN(CUfunction f, u->module.Function(lowered));
    for (const tuner::Config& config : configs) {
      tuner::LoadedVariant v;
      v.module = &u->module;
      v.config = config;
      v.functions[expr] = f;
      v.label = "rope[" + tuner::ConfigLabel(config) + "]";
      u->variants.push_back(std::move(v));
    }
    units.push_back(std::move(u));
  }
  return units;
}

TEST_F(RopeGpu, EveryVariantMatchesTheFloat64ReferenceForwardAndBackward) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  WorkloadOptions plain, q_view, gapped, backward;
  q_view.head_pad = 256;  // the target's q: the first 256 of each [query | gate] head of 512
  gapped.token_pad = 8;
  gapped.head_pad = 8;
  backward.sign = -1.0f;
  struct Case {
    ProblemSpec spec;
    WorkloadOptions options;
    const char* name;
  };
  const std::vector<Case> cases = {
      {{333, 24, 256, 64}, q_view, "target q on the strided view"},
      {{333, 4, 256, 64}, plain, "target k"},
      {{777, 32, 128, 128}, plain, "drafter q"},
      {{777, 32, 128, 128}, backward, "drafter q, backward"},
      {{1001, 8, 128, 128}, gapped, "drafter k, gaps after heads and tokens"},
      {{3, 1, 16, 16}, backward, "16 dims, 3 tokens, backward"},
      {{5, 2, 1024, 1024}, plain, "1024 dims"},
  };
  std::map<std::string, std::vector<std::unique_ptr<Unit>>> by_bucket;
  std::uint64_t seed = 2024;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const tuner::Problem bucket = ToJson(BucketOf(c.spec));
    if (!by_bucket.count(bucket.dump())) {
      Result<std::vector<std::unique_ptr<Unit>>> units = LoadBucket(bucket, *ctx);
      ASSERT_TRUE(units.ok()) << units.status().ToString();
      by_bucket[bucket.dump()] = std::move(*units);
    }
    Result<std::unique_ptr<tuner::Workload>> w = MakeRopeWorkload(*ctx, c.spec, ++seed, c.options);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    EXPECT_EQ((*w)->Check(stream->get()).code(), ErrorCode::kMismatch) << "the poisoned output must fail the check";
    std::size_t ran = 0;
    for (const auto& u : by_bucket.at(bucket.dump())) {
      for (const tuner::LoadedVariant& v : u->variants) {
        ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
        const Status launched = (*w)->Launch(v, stream->get());
        ASSERT_TRUE(launched.ok()) << v.label << ": " << launched.ToString();
        const Status checked = (*w)->Check(stream->get());
        EXPECT_TRUE(checked.ok()) << v.label << ": " << checked.ToString();
        ++ran;
      }
    }
    EXPECT_EQ(ran, tuner::EnumerateSpace(Family()).size());
  }
}

TEST_F(RopeGpu, ALaunchCapturedInAGraphGivesTheSameResultWhenReplayed) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const ProblemSpec spec{2000, 8, 128, 128};
  Result<std::vector<std::unique_ptr<Unit>>> units = LoadBucket(ToJson(BucketOf(spec)), *ctx);
  ASSERT_TRUE(units.ok()) << units.status().ToString();
  const tuner::LoadedVariant& v = units->front()->variants.front();
  Result<std::unique_ptr<tuner::Workload>> w = MakeRopeWorkload(*ctx, spec, 9);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Result<gpu::GraphExec> graph =
      gpu::GraphExec::Capture(stream->get(), [&](CUstream s) { return (*w)->Launch(v, s); }, "rope graph");
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    ASSERT_TRUE(graph->Launch(stream->get()).ok());
    EXPECT_TRUE((*w)->Check(stream->get()).ok()) << "replay " << replay;
  }
}

TEST_F(RopeGpu, TheFamilysWorkloadChecksThroughTheTunerInterface) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const tuner::Problem problem = MakeProblem(4096, 4, 256, 64);
  Result<std::vector<std::unique_ptr<Unit>>> units = LoadBucket(*Family().Bucket(problem), *ctx);
  ASSERT_TRUE(units.ok()) << units.status().ToString();
  Result<std::unique_ptr<tuner::Workload>> w = Family().MakeWorkload(*ctx, problem, 5);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->BytesTouched(), std::size_t{4096} * 4 * 256 * 2 * 2 + std::size_t{4096} * 64 * 4 * 2);
  ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
  ASSERT_TRUE((*w)->Launch(units->back()->variants.back(), stream->get()).ok());
  EXPECT_TRUE((*w)->Check(stream->get()).ok());
}

}  // namespace
}  // namespace dflash::rope
