// Every variant of the conv1d space that can run on this GPU, for both layouts, against the float64 reference on
// sizes that are multiples of no tile (1, 3, 17, 1000 tokens), packed sequences (some empty), padded rows,
// misaligned pointers and a bias, with the output poisoned (NaN) before every launch. Needs a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/conv1d/conv1d_api.h"
#include "kernels/conv1d/conv1d_config.h"
#include "kernels/conv1d/conv1d_family.h"
#include "kernels/conv1d/conv1d_workload.h"
#include "tuner/arch_limits.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::conv1d {
namespace {

struct Case {
  std::int64_t tokens, channels, num_seqs;
  WorkloadOptions options;
  std::string name;
};

std::vector<Case> Cases() {
  WorkloadOptions plain;
  WorkloadOptions bias;
  bias.bias = true;
  WorkloadOptions misaligned;
  misaligned.bias = true;
  misaligned.row_pad = 3;
  misaligned.x_offset = 1;
  misaligned.y_offset = 5;
  WorkloadOptions padded;
  padded.row_pad = 8;  // aligned rows with a gap: vector path, gaps must stay poisoned
  WorkloadOptions empties;
  empties.allow_empty_seqs = true;
  return {
      {1, 131, 1, plain, "1 token"},
      {3, 264, 2, plain, "3 tokens, 2 sequences"},
      {17, 200, 5, bias, "17 tokens, 5 sequences, bias"},
      {1000, 264, 7, plain, "1000 tokens, 7 sequences"},
      {1000, 264, 1, misaligned, "1000 tokens, misaligned pointers and rows, bias"},
      {1000, 72, 3, padded, "1000 tokens, padded rows"},
      {1000, 72, 40, empties, "1000 tokens, 40 sequences, some empty"},
      {1000, 10240, 4, plain, "1000 tokens, 10240 channels (Qwen3.5 qkv), 4 sequences"},
  };
}

class Conv1dGpu : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the conv1d GPU tests need one";
  }
};

struct Variant {
  gpu::Module module;
  tuner::LoadedVariant loaded;
};

TEST_P(Conv1dGpu, EveryRunnableVariantMatchesTheFloat64Reference) {
  const Layout layout = GetParam();
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const std::string arch = ctx->info().arch();
  const auto limits = tuner::LimitsFor(arch);
  ASSERT_TRUE(limits.has_value()) << "no limits for " << arch;
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();

  // Compile and load every variant that is structurally valid for the layout (the bucket-dependent "never
  // vectorizes" pruning is skipped on purpose: those variants must be correct too).
  const tuner::KernelFamily& family = Family();
  const tuner::Problem bucket = *family.Bucket(MakeProblem(1000, 264, 1, layout));
  std::vector<std::unique_ptr<Variant>> variants;
  for (const tuner::Config& config : tuner::EnumerateSpace(family)) {
    if (!GeometryInvalidReason(config, layout).empty()) continue;
    const std::string label = "conv1d[" + tuner::ConfigLabel(config) + "]";
    const tuner::CompileSpec spec = family.MakeCompileSpec(config, bucket);
    Result<tuner::CompiledVariant> compiled = tuner::CompileVariant(family.sources(), spec, arch, label);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    const std::string& lowered = compiled->lowered_names.at(spec.name_expressions.at(0));
    const std::string pruned = tuner::PruneReason(*limits, compiled->resources.at(lowered),
                                                  family.BlockShapeOf(config, bucket).threads, 0, false);
    if (!pruned.empty()) {
      std::printf("%s pruned on %s: %s\n", label.c_str(), arch.c_str(), pruned.c_str());
      continue;
    }
    auto v = std::make_unique<Variant>();
    Result<gpu::Module> m = gpu::Module::Load(compiled->cubin, label);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    v->module = std::move(*m);
    Result<CUfunction> f = v->module.Function(lowered);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    v->loaded.module = &v->module;
    v->loaded.config = config;
    v->loaded.functions[spec.name_expressions.at(0)] = *f;
    v->loaded.label = label;
    variants.push_back(std::move(v));
  }
  ASSERT_FALSE(variants.empty());
  std::printf("%zu %s variants runnable on %s\n", variants.size(), std::string(LayoutName(layout)).c_str(),
              arch.c_str());

  std::uint64_t seed = 1234 + static_cast<std::uint64_t>(layout);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    ProblemSpec spec{c.tokens, c.channels, c.num_seqs, layout};
    Result<std::unique_ptr<tuner::Workload>> w = MakeConv1dWorkload(*ctx, spec, ++seed, c.options);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    // Without a launch the poisoned output must fail the check: the check can fail.
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    EXPECT_EQ((*w)->Check(stream->get()).code(), ErrorCode::kMismatch);
    for (const auto& v : variants) {
      ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
      const Status launched = (*w)->Launch(v->loaded, stream->get());
      ASSERT_TRUE(launched.ok()) << v->loaded.label << ": " << launched.ToString();
      const Status checked = (*w)->Check(stream->get());
      EXPECT_TRUE(checked.ok()) << v->loaded.label << ": " << checked.ToString();
    }
  }
}

TEST_P(Conv1dGpu, FamilyWorkloadRunsThroughTheTunerInterface) {
  const Layout layout = GetParam();
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const tuner::KernelFamily& family = Family();
  const tuner::Problem problem = MakeProblem(777, 10240, 3, layout);
  const tuner::Problem bucket = *family.Bucket(problem);
  const tuner::Config config = layout == Layout::kTokenMajor
                                   ? tuner::Config{{"block_c", 256}, {"threads", 256}, {"tpt", 8}, {"vec", 8}}
                                   : tuner::Config{{"block_c", 1}, {"threads", 128}, {"tpt", 8}, {"vec", 8}};
  ASSERT_EQ(family.InvalidReason(config, bucket), "");
  const tuner::CompileSpec spec = family.MakeCompileSpec(config, bucket);
  Result<tuner::CompiledVariant> compiled = tuner::CompileVariant(family.sources(), spec, ctx->info().arch(), "t");
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  Result<gpu::Module> m = gpu::Module::Load(compiled->cubin, "conv1d test");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  tuner::LoadedVariant v;
  v.module = &*m;
  v.config = config;
  v.label = "conv1d test";
  Result<CUfunction> f = m->Function(compiled->lowered_names.at(spec.name_expressions.at(0)));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  v.functions[spec.name_expressions.at(0)] = *f;

  Result<std::unique_ptr<tuner::Workload>> w = family.MakeWorkload(*ctx, problem, 99);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->BytesTouched(), std::size_t{777} * 10240 * 4 + 10240 * 8 + 4 * 4);
  ASSERT_TRUE((*w)->PoisonOutputs(nullptr).ok());
  ASSERT_TRUE((*w)->Launch(v, nullptr).ok());
  const Status s = (*w)->Check(nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(family.MakeWorkload(*ctx, tuner::Problem{{"tokens", 0}}, 1).status().code(),
            ErrorCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Conv1dGpu, ::testing::Values(Layout::kTokenMajor, Layout::kChannelMajor),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

}  // namespace
}  // namespace dflash::conv1d
