// Every config of the swiglu space against the float64 reference on fresh random inputs with the output poisoned
// before every launch (the target MLP's width, padded rows, row counts that fill no block, the narrowest rows), a
// graph replay, and the family's workload through the tuner interface. Needs a GPU.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/swiglu/swiglu_family.h"
#include "kernels/swiglu/swiglu_workload.h"
#include "tuner/arch_limits.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::swiglu {
namespace {

class SwigluGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the swiglu GPU tests need one";
  }
};

struct Unit {
  gpu::Module module;
  std::vector<tuner::LoadedVariant> variants;
};

// Every config, one module per translation unit (configs that differ only in `items` share it).
Result<std::vector<std::unique_ptr<Unit>>> LoadAll(const tuner::Problem& bucket, const gpu::Context& ctx) {
  const auto limits = tuner::LimitsFor(ctx.info().arch());
  if (!limits) return Unsupported("no limits for " + ctx.info().arch());
  std::map<std::string, std::vector<tuner::Config>> by_expression;
  for (const tuner::Config& c : tuner::EnumerateSpace(Family()))
    by_expression[Family().MakeCompileSpec(c, bucket).name_expressions.at(0)].push_back(c);
  std::vector<std::unique_ptr<Unit>> units;
  for (const auto& [expr, configs] : by_expression) {
    const tuner::CompileSpec spec = Family().MakeCompileSpec(configs.front(), bucket);
    DFLASH_ASSIGN_OR_RETURN(tuner::CompiledVariant c,
                            tuner::CompileVariant(Family().sources(), spec, ctx.info().arch(), expr));
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
      v.label = "swiglu[" + tuner::ConfigLabel(config) + "]";
      u->variants.push_back(std::move(v));
    }
    units.push_back(std::move(u));
  }
  return units;
}

TEST_F(SwigluGpu, EveryVariantMatchesTheFloat64Reference) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  WorkloadOptions plain, padded;
  padded.gate_pad = 8;
  padded.up_pad = 24;
  struct Case {
    ProblemSpec spec;
    WorkloadOptions options;
    const char* name;
  };
  const std::vector<Case> cases = {{{333, 17408}, plain, "the target MLP's width"},
                                   {{77, 512}, padded, "padded rows"},
                                   {{3, 8}, plain, "8 cols, 3 rows"}};
  Result<std::vector<std::unique_ptr<Unit>>> units = LoadAll(ToJson(ProblemSpec{1024, 8}), *ctx);
  ASSERT_TRUE(units.ok()) << units.status().ToString();
  std::uint64_t seed = 77;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<std::unique_ptr<tuner::Workload>> w = MakeSwigluWorkload(*ctx, c.spec, ++seed, c.options);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    EXPECT_EQ((*w)->Check(stream->get()).code(), ErrorCode::kMismatch) << "the poisoned output must fail the check";
    for (const auto& u : *units) {
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

TEST_F(SwigluGpu, ALaunchCapturedInAGraphGivesTheSameResultWhenReplayed) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const ProblemSpec spec{500, 4096};
  Result<std::vector<std::unique_ptr<Unit>>> units = LoadAll(ToJson(BucketOf(spec)), *ctx);
  ASSERT_TRUE(units.ok()) << units.status().ToString();
  Result<std::unique_ptr<tuner::Workload>> w = Family().MakeWorkload(*ctx, ToJson(spec), 3);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->BytesTouched(), std::size_t{500} * 4096 * 2 * 3);
  const tuner::LoadedVariant& v = units->back()->variants.back();
  Result<gpu::GraphExec> graph =
      gpu::GraphExec::Capture(stream->get(), [&](CUstream s) { return (*w)->Launch(v, s); }, "swiglu graph");
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    ASSERT_TRUE(graph->Launch(stream->get()).ok());
    EXPECT_TRUE((*w)->Check(stream->get()).ok()) << "replay " << replay;
  }
}

}  // namespace
}  // namespace dflash::swiglu
