// Every valid config of the buckets of the model's norms (and of the extremes of cols), forward and backward,
// compiles with NVRTC for sm_90 and sm_120 without spills and passes the arch's PruneReason: the space's validity rules (the register
// budget in particular) leave nothing for ptxas to prune. CPU only: NVRTC needs no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <set>
#include <string>
#include <vector>

#include "kernels/rmsnorm/rmsnorm_bwd_family.h"
#include "kernels/rmsnorm/rmsnorm_config.h"
#include "kernels/rmsnorm/rmsnorm_family.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::rmsnorm {
namespace {

struct Outcome {
  std::string label;
  int register_cap = 0;
  Status status;
  std::string prune_reason;
  tuner::ResourceUsage usage;
};

// The buckets of kernels/rmsnorm/NOTES.md's use cases, plus cols 8 and the register-heaviest 16384 ones.
std::vector<ProblemSpec> Buckets() {
  return {
      {4096, 5120, Kind::kZeroCentred, true, false, WeightDtype::kBf16},    // target input / post-attention norms
      {98304, 256, Kind::kZeroCentred, false, false, WeightDtype::kBf16},   // target q / k norms
      {262144, 128, Kind::kStandard, false, false, WeightDtype::kFp32},     // drafter q / k norms
      {8192, 5120, Kind::kStandard, false, false, WeightDtype::kFp32},      // drafter hidden norms
      {196608, 128, Kind::kStandard, false, true, WeightDtype::kBf16},      // gated delta-net norm
      {1024, 8, Kind::kZeroCentred, true, true, WeightDtype::kFp32},
      {1024, 16384, Kind::kStandard, true, true, WeightDtype::kFp32},
      {1024, 16384, Kind::kZeroCentred, true, true, WeightDtype::kBf16},
  };
}

void CompileBuckets(const std::string& arch) {
  const tuner::KernelFamily& family = Family();
  const auto limits = tuner::LimitsFor(arch);
  ASSERT_TRUE(limits.has_value()) << arch;
  tuner::ThreadPool pool;
  std::vector<std::future<Outcome>> futures;
  for (const ProblemSpec& spec : Buckets()) {
    const tuner::Problem bucket = *family.Bucket(ToJson(spec));
    for (const tuner::Config& config : tuner::EnumerateSpace(family)) {
      if (!family.InvalidReason(config, bucket).empty()) continue;
      futures.push_back(pool.Submit([&family, bucket, &arch, &limits, config]() {
        Outcome o;
        o.label = "rmsnorm[" + tuner::ConfigLabel(config) + "] " + bucket.dump();
        const Geometry g = *GeometryOf(config);
        o.register_cap = std::min(255, 65536 / (g.threads * MinBlocksPerSm(g, *ParseProblem(bucket))));
        const tuner::CompileSpec spec = family.MakeCompileSpec(config, bucket);
        Result<tuner::CompiledVariant> compiled = tuner::CompileVariant(family.sources(), spec, arch, o.label);
        if (!compiled.ok()) {
          o.status = compiled.status();
          return o;
        }
        auto lowered = compiled->lowered_names.find(spec.name_expressions.at(0));
        if (compiled->cubin.empty() || lowered == compiled->lowered_names.end()) {
          o.status = Internal("no cubin or no lowered name for " + spec.name_expressions.at(0));
          return o;
        }
        auto usage = compiled->resources.find(lowered->second);
        if (usage == compiled->resources.end()) {
          o.status = Internal("no ptxas report for " + lowered->second + "\n" + compiled->log);
          return o;
        }
        o.usage = usage->second;
        const auto shape = family.BlockShapeOf(config, bucket);
        o.prune_reason = tuner::PruneReason(*limits, o.usage, shape.threads, shape.dynamic_shared_bytes,
                                            /*allow_spills=*/false);
        return o;
      }));
    }
  }
  // The variant closest to its register cap (65536 / (threads * MinBlocksPerSm), at most 255), to show how much the
  // validity rule's estimate leaves.
  int least_headroom = 1 << 30;
  std::string tightest;
  for (auto& f : futures) {
    const Outcome o = f.get();
    EXPECT_TRUE(o.status.ok()) << arch << " " << o.label << ": " << o.status.ToString();
    if (!o.status.ok()) continue;
    EXPECT_EQ(o.prune_reason, "") << arch << " " << o.label;
    const int headroom = o.register_cap - o.usage.registers;
    if (headroom < least_headroom) {
      least_headroom = headroom;
      tightest = o.label + ": " + std::to_string(o.usage.registers) + " registers";
    }
  }
  std::printf("%s: %zu variants over %zu buckets compiled; least register headroom %d (%s)\n", arch.c_str(),
              futures.size(), Buckets().size(), least_headroom, tightest.c_str());
  EXPECT_GT(futures.size(), 0u);
}

TEST(RmsNormCompile, EveryValidConfigOfTheUseCaseBucketsCompilesWithoutSpillsForSm90) { CompileBuckets("sm_90"); }
TEST(RmsNormCompile, EveryValidConfigOfTheUseCaseBucketsCompilesWithoutSpillsForSm120) {
  CompileBuckets("sm_120");
}

TEST(RmsNormCompile, AnInvalidConfigFailsItsStaticAsserts) {
  // MakeCompileSpec still emits an expression for a config the family calls invalid: the kernel's static_asserts
  // must then refuse it rather than build a wrong kernel.
  const tuner::Config bad{{"row_threads", 8}, {"threads", 256}, {"vec", 8}};  // 5120 / 8 = 640 elements a thread
  const tuner::Problem bucket = ToJson(ProblemSpec{4096, 5120, Kind::kStandard, false, false, WeightDtype::kBf16});
  ASSERT_NE(Family().InvalidReason(bad, bucket), "");
  Result<tuner::CompiledVariant> r =
      tuner::CompileVariant(Family().sources(), Family().MakeCompileSpec(bad, bucket), "sm_90", "rmsnorm[bad]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  EXPECT_NE(r.status().message().find("at most 64 elements"), std::string::npos) << r.status().message();
}

// The backward family's buckets: the drafter's trained norms (standard kind, fp32 weights: hidden 5120, q / k heads
// 128), the zero-centred bf16 case and the extremes of cols. Configs that differ only in row_groups (a launch
// parameter) share one translation unit, compiled once.
std::vector<BwdProblemSpec> BwdBuckets() {
  return {
      {8192, 5120, Kind::kStandard, WeightDtype::kFp32},      // drafter hidden norms
      {262144, 128, Kind::kStandard, WeightDtype::kFp32},     // drafter q / k norms
      {4096, 5120, Kind::kZeroCentred, WeightDtype::kBf16},
      {1024, kMaxBwdCols, Kind::kStandard, WeightDtype::kFp32},
      {1024, kMaxBwdCols, Kind::kZeroCentred, WeightDtype::kBf16},
      {1024, 8, Kind::kZeroCentred, WeightDtype::kBf16},
  };
}

void CompileBwdBuckets(const std::string& arch) {
  const tuner::KernelFamily& family = BackwardFamily();
  const auto limits = tuner::LimitsFor(arch);
  ASSERT_TRUE(limits.has_value()) << arch;
  tuner::ThreadPool pool;
  std::vector<std::future<Outcome>> futures;
  std::set<std::string> seen;
  for (const BwdProblemSpec& spec : BwdBuckets()) {
    const tuner::Problem bucket = *family.Bucket(ToJson(spec));
    std::size_t valid = 0;
    for (const tuner::Config& config : tuner::EnumerateSpace(family)) valid += family.InvalidReason(config, bucket).empty();
    EXPECT_GT(valid, 0u) << "no valid config for " << bucket.dump();
    for (const tuner::Config& config : tuner::EnumerateSpace(family)) {
      if (!family.InvalidReason(config, bucket).empty()) continue;
      const tuner::CompileSpec compile = family.MakeCompileSpec(config, bucket);
      if (!seen.insert(compile.name_expressions.at(0)).second) continue;
      futures.push_back(pool.Submit([&family, bucket, &arch, &limits, config, compile]() {
        Outcome o;
        o.label = "rmsnorm_bwd[" + tuner::ConfigLabel(config) + "] " + bucket.dump();
        Result<tuner::CompiledVariant> compiled = tuner::CompileVariant(family.sources(), compile, arch, o.label);
        if (!compiled.ok()) {
          o.status = compiled.status();
          return o;
        }
        auto lowered = compiled->lowered_names.find(compile.name_expressions.at(0));
        auto usage = lowered == compiled->lowered_names.end() ? compiled->resources.end()
                                                              : compiled->resources.find(lowered->second);
        if (usage == compiled->resources.end()) {
          o.status = Internal("no lowered name or ptxas report for " + compile.name_expressions.at(0));
          return o;
        }
        o.usage = usage->second;
        const auto shape = family.BlockShapeOf(config, bucket);
        o.prune_reason = tuner::PruneReason(*limits, o.usage, shape.threads, shape.dynamic_shared_bytes,
                                            /*allow_spills=*/false);
        return o;
      }));
    }
  }
  for (auto& f : futures) {
    const Outcome o = f.get();
    EXPECT_TRUE(o.status.ok()) << arch << " " << o.label << ": " << o.status.ToString();
    if (!o.status.ok()) continue;
    EXPECT_EQ(o.prune_reason, "") << arch << " " << o.label;
    EXPECT_EQ(o.usage.spill_stores + o.usage.spill_loads, 0) << arch << " " << o.label;
  }
  std::printf("%s: %zu backward translation units over %zu buckets compiled\n", arch.c_str(), futures.size(),
              BwdBuckets().size());
  EXPECT_GT(futures.size(), 0u);
}

TEST(RmsNormBwdCompile, EveryValidConfigOfTheBackwardBucketsCompilesWithoutSpillsForSm90) {
  CompileBwdBuckets("sm_90");
}
TEST(RmsNormBwdCompile, EveryValidConfigOfTheBackwardBucketsCompilesWithoutSpillsForSm120) {
  CompileBwdBuckets("sm_120");
}

TEST(RmsNormBwdCompile, AnInvalidConfigFailsItsStaticAsserts) {
  // 5120 / (8 * 128) = 5 vectors = 40 elements a thread: over the backward's 32.
  const tuner::Config bad{{"row_groups", 8}, {"row_threads", 128}, {"threads", 128}, {"vec", 8}};
  const tuner::Problem bucket = ToJson(BwdProblemSpec{8192, 5120, Kind::kStandard, WeightDtype::kFp32});
  ASSERT_NE(BackwardFamily().InvalidReason(bad, bucket), "");
  Result<tuner::CompiledVariant> r = tuner::CompileVariant(
      BackwardFamily().sources(), BackwardFamily().MakeCompileSpec(bad, bucket), "sm_90", "rmsnorm_bwd[bad]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  EXPECT_NE(r.status().message().find("at most 32 elements"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace dflash::rmsnorm
