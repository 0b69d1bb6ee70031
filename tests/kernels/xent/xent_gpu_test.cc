// Every structurally valid config of the xent space, with and without the gradient, that can run on this GPU against
// the float64 reference, on fresh random inputs with the outputs poisoned before every launch: row counts that are
// multiples of nothing, vocabs from 1 to 2^20 (the trainer's 248320 and 1024 among them), padded rows, and the planted
// rows of every kind (ignored and out-of-range labels, zero weights over NaN and inf, ties, -inf, +inf, huge logits).
// The bucket-dependent pruning is skipped on purpose: a variant must be correct for every problem, also those its
// bucket would not tune it for. Also: the tuner's path through the family, and a launch replayed from a CUDA graph.
// Needs a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "kernels/xent/xent_config.h"
#include "kernels/xent/xent_family.h"
#include "kernels/xent/xent_workload.h"
#include "tuner/arch_limits.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::xent {
namespace {

struct Case {
  std::int64_t rows, vocab;
  WorkloadOptions options;
  std::string name;
};

std::vector<Case> Cases() {
  WorkloadOptions plain;
  WorkloadOptions padded;
  padded.row_pad = 4;
  padded.grad_row_pad = 12;  // the gradient's padding must stay poisoned
  WorkloadOptions wide;
  wide.logit_std = 8.0f;
  return {
      {1, 1, plain, "1 row of 1 word"},
      {3, 5, plain, "3 rows of 5 words"},
      {300, 1024, plain, "300 rows of the tiny model's 1024 words, planted rows"},
      {67, 1001, padded, "67 rows of 1001 words, padded rows"},
      {29, 248320, plain, "29 rows of the target's 248320 words, planted rows"},
      {5, 70001, wide, "5 rows of 70001 words, logits ~ N(0, 64)"},
      {2, 1 << 20, plain, "2 rows of 2^20 words"},
  };
}

struct Variant {
  gpu::Module module;
  tuner::LoadedVariant loaded;
};

class XentGpu : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the xent GPU tests need one";
  }
};

struct Compiled {
  tuner::Config config;
  std::string label, expression;
  Result<tuner::CompiledVariant> variant = Internal("not compiled");
};

Compiled Compile(const tuner::Config& config, const tuner::Problem& bucket, const std::string& arch) {
  Compiled c;
  c.config = config;
  c.label = "xent[" + tuner::ConfigLabel(config) + "]";
  const tuner::CompileSpec spec = Family().MakeCompileSpec(config, bucket);
  c.expression = spec.name_expressions.at(0);
  c.variant = tuner::CompileVariant(Family().sources(), spec, arch, c.label);
  return c;
}

// Loads a compiled variant; nullptr (and a line on stdout) when the arch prunes it.
std::unique_ptr<Variant> Load(const Compiled& c, const tuner::Problem& bucket, const std::string& arch,
                              const tuner::ArchLimits& limits) {
  EXPECT_TRUE(c.variant.ok()) << c.variant.status().ToString();
  if (!c.variant.ok()) return nullptr;
  const std::string& lowered = c.variant->lowered_names.at(c.expression);
  const std::string pruned = tuner::PruneReason(limits, c.variant->resources.at(lowered),
                                                Family().BlockShapeOf(c.config, bucket).threads, 0, false);
  if (!pruned.empty()) {
    std::printf("%s pruned on %s: %s\n", c.label.c_str(), arch.c_str(), pruned.c_str());
    return nullptr;
  }
  auto v = std::make_unique<Variant>();
  Result<gpu::Module> m = gpu::Module::Load(c.variant->cubin, c.label);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return nullptr;
  v->module = std::move(*m);
  Result<CUfunction> f = v->module.Function(lowered);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return nullptr;
  v->loaded.module = &v->module;
  v->loaded.config = c.config;
  v->loaded.functions[c.expression] = *f;
  v->loaded.label = c.label;
  return v;
}

TEST_P(XentGpu, EveryRunnableVariantMatchesTheFloat64Reference) {
  const bool grad = GetParam();
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const std::string arch = ctx->info().arch();
  const auto limits = tuner::LimitsFor(arch);
  ASSERT_TRUE(limits.has_value()) << "no limits for " << arch;
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();

  const tuner::Problem bucket = *Family().Bucket(MakeProblem(256, 1024, grad));
  std::vector<std::future<Compiled>> compiles;
  {
    tuner::ThreadPool pool;
    for (const tuner::Config& config : tuner::EnumerateSpace(Family()))
      if (GeometryInvalidReason(config).empty())
        compiles.push_back(pool.Submit([config, &bucket, &arch] { return Compile(config, bucket, arch); }));
  }
  std::vector<std::unique_ptr<Variant>> variants;
  for (auto& c : compiles)
    if (auto v = Load(c.get(), bucket, arch, *limits)) variants.push_back(std::move(v));
  ASSERT_FALSE(variants.empty());
  std::printf("%zu variants (grad=%d) runnable on %s\n", variants.size(), grad, arch.c_str());

  std::uint64_t seed = grad ? 4321 : 8765;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Result<std::unique_ptr<tuner::Workload>> w =
        MakeXentWorkload(*ctx, ProblemSpec{c.rows, c.vocab, grad}, ++seed, c.options);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    // Without a launch the poisoned outputs must fail the check: the check can fail.
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    EXPECT_EQ((*w)->Check(stream->get()).code(), ErrorCode::kMismatch);
    for (const auto& v : variants) {
      ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
      const Status launched = (*w)->Launch(v->loaded, stream->get());
      // A cluster that cannot be placed on this GPU is a launch failure the tuner records; it must not be silent.
      ASSERT_TRUE(launched.ok()) << v->loaded.label << ": " << launched.ToString();
      const Status checked = (*w)->Check(stream->get());
      EXPECT_TRUE(checked.ok()) << v->loaded.label << ": " << checked.ToString();
    }
  }
}

TEST_P(XentGpu, FamilyWorkloadRunsThroughTheTunerInterfaceAndFromAGraph) {
  const bool grad = GetParam();
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const auto limits = tuner::LimitsFor(ctx->info().arch());
  ASSERT_TRUE(limits.has_value());
  const tuner::KernelFamily& family = Family();
  const tuner::Problem problem = MakeProblem(777, 248320, grad);
  const tuner::Problem bucket = *family.Bucket(problem);
  const tuner::Config config{{"threads", 1024}, {"vec", 4}, {"unroll", 8}, {"split", 8}};
  ASSERT_EQ(family.InvalidReason(config, bucket), "");
  std::unique_ptr<Variant> v = Load(Compile(config, bucket, ctx->info().arch()), bucket, ctx->info().arch(), *limits);
  ASSERT_NE(v, nullptr);

  Result<std::unique_ptr<tuner::Workload>> w = family.MakeWorkload(*ctx, problem, 99);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->BytesTouched(), std::size_t{777} * 248320 * (grad ? 6 : 4) + 777 * 24);
  ASSERT_TRUE((*w)->PoisonOutputs(nullptr).ok());
  ASSERT_TRUE((*w)->Launch(v->loaded, nullptr).ok());
  Status s = (*w)->Check(nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();

  // Captured into a graph (no host synchronisation, no allocation in LaunchXent), replayed on poisoned outputs.
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  Result<gpu::GraphExec> graph = gpu::GraphExec::Capture(
      stream->get(), [&](CUstream st) { return (*w)->Launch(v->loaded, st); }, "xent graph");
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
  ASSERT_TRUE(graph->Launch(stream->get()).ok());
  s = (*w)->Check(stream->get());
  EXPECT_TRUE(s.ok()) << s.ToString();

  EXPECT_EQ(family.MakeWorkload(*ctx, tuner::Problem{{"rows", 0}, {"vocab", 8}}, 1).status().code(),
            ErrorCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Grad, XentGpu, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "WithGradient" : "WithoutGradient"); });

}  // namespace
}  // namespace dflash::xent
