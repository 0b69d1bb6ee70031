// Every config of the xent space that is valid for the trainer's buckets (vocab 1024 and 248320, with and without
// the gradient) compiles with NVRTC for sm_90 and sm_120 and passes the arch's pruning without spills; an invalid
// config fails the kernel's static_asserts; before sm_90 only the variants without a cluster compile. CPU only: NVRTC
// needs no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "kernels/xent/xent_family.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::xent {
namespace {

struct Outcome {
  std::string label;
  Status status;
  std::string prune_reason;
  tuner::ResourceUsage usage;
};

Outcome CompileOne(const tuner::KernelFamily& family, const tuner::Config& config, const tuner::Problem& bucket,
                   const std::string& arch, const tuner::ArchLimits& limits) {
  Outcome o;
  o.label = "xent[" + tuner::ConfigLabel(config) + "] " + bucket.dump();
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
  o.prune_reason = tuner::PruneReason(limits, o.usage, shape.threads, shape.dynamic_shared_bytes,
                                      /*allow_spills=*/false);
  return o;
}

// The code does not depend on the vocab, only on (config, grad): each distinct compile spec of the buckets' valid
// configs is compiled once and stands for every bucket that has it.
void CompileTheTrainersBuckets(const std::string& arch) {
  const tuner::KernelFamily& family = Family();
  const auto limits = tuner::LimitsFor(arch);
  ASSERT_TRUE(limits.has_value()) << arch;
  std::map<std::string, std::pair<tuner::Config, tuner::Problem>> specs;  // name expression -> one (config, bucket)
  std::size_t valid = 0;
  for (std::int64_t vocab : {1024, 248320}) {
    for (bool grad : {true, false}) {
      const tuner::Problem bucket = *family.Bucket(MakeProblem(2048, vocab, grad));
      for (const tuner::Config& config : tuner::EnumerateSpace(family)) {
        if (!family.InvalidReason(config, bucket).empty()) continue;
        ++valid;
        specs.emplace(family.MakeCompileSpec(config, bucket).name_expressions.at(0), std::make_pair(config, bucket));
      }
    }
  }
  tuner::ThreadPool pool;
  std::vector<std::future<Outcome>> futures;
  for (const auto& [expr, cb] : specs)
    futures.push_back(
        pool.Submit([&family, cb, &arch, &limits] { return CompileOne(family, cb.first, cb.second, arch, *limits); }));
  int max_registers = 0;
  for (auto& f : futures) {
    const Outcome o = f.get();
    EXPECT_TRUE(o.status.ok()) << arch << " " << o.label << ": " << o.status.ToString();
    if (!o.status.ok()) continue;
    EXPECT_EQ(o.prune_reason, "") << arch << " " << o.label;
    max_registers = std::max(max_registers, o.usage.registers);
  }
  std::printf("%s: %zu valid (config, bucket) pairs, %zu distinct kernels compiled, at most %d registers\n",
              arch.c_str(), valid, specs.size(), max_registers);
  EXPECT_EQ(specs.size(), 120u) << "60 configs with and without the gradient";
}

TEST(XentCompile, EveryConfigOfTheTrainersBucketsCompilesForSm90WithoutSpills) { CompileTheTrainersBuckets("sm_90"); }
TEST(XentCompile, EveryConfigOfTheTrainersBucketsCompilesForSm120WithoutSpills) { CompileTheTrainersBuckets("sm_120"); }

TEST(XentCompile, AnInvalidConfigFailsItsStaticAsserts) {
  // MakeCompileSpec still emits an expression for a config the family calls invalid: the kernel's static_asserts
  // must then refuse it rather than build a wrong kernel.
  const tuner::Config bad{{"threads", 256}, {"vec", 4}, {"unroll", 2}, {"split", 3}};
  const tuner::Problem bucket = *Family().Bucket(MakeProblem(2048, 248320, true));
  ASSERT_NE(Family().InvalidReason(bad, bucket), "");
  Result<tuner::CompiledVariant> r =
      tuner::CompileVariant(Family().sources(), Family().MakeCompileSpec(bad, bucket), "sm_90", "xent[bad]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  EXPECT_NE(r.status().message().find("blocks per row"), std::string::npos) << r.status().message();
}

TEST(XentCompile, BeforeSm90TheUnsplitVariantsCompileAndTheClustersSayWhyNot) {
  const tuner::Problem bucket = *Family().Bucket(MakeProblem(2048, 248320, true));
  const tuner::Config unsplit{{"threads", 512}, {"vec", 4}, {"unroll", 4}, {"split", 1}};
  const tuner::Config split{{"threads", 512}, {"vec", 4}, {"unroll", 4}, {"split", 4}};
  Result<tuner::CompiledVariant> ok =
      tuner::CompileVariant(Family().sources(), Family().MakeCompileSpec(unsplit, bucket), "sm_80", "xent[sm_80]");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  Result<tuner::CompiledVariant> r =
      tuner::CompileVariant(Family().sources(), Family().MakeCompileSpec(split, bucket), "sm_80", "xent[sm_80 split]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  EXPECT_NE(r.status().message().find("thread block clusters"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace dflash::xent
