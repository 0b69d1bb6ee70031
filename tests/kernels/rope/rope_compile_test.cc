// Every config of the rope buckets the models use (target q / k: 256 dims, 64 rotated; drafter: 128, all rotated)
// and of the extremes compiles with NVRTC for sm_90 and sm_120 without spills and passes the arch's PruneReason.
// CPU only: NVRTC needs no GPU. Configs that differ only in `items` (a launch parameter) share one translation unit.
#include <gtest/gtest.h>

#include <future>
#include <set>
#include <string>
#include <vector>

#include "kernels/rope/rope_family.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::rope {
namespace {

void CompileBuckets(const std::string& arch) {
  const auto limits = tuner::LimitsFor(arch);
  ASSERT_TRUE(limits.has_value()) << arch;
  const std::vector<ProblemSpec> buckets = {{4096, 24, 256, 64}, {4096, 4, 256, 64}, {8192, 32, 128, 128},
                                            {16384, 8, 128, 128}, {1024, 1, 16, 16}, {1024, 2, 1024, 1024}};
  tuner::ThreadPool pool;
  std::vector<std::future<std::string>> futures;
  std::set<std::string> seen;
  for (const ProblemSpec& b : buckets) {
    const tuner::Problem bucket = ToJson(b);
    for (const tuner::Config& config : tuner::EnumerateSpace(Family())) {
      if (!Family().InvalidReason(config, bucket).empty()) continue;
      const tuner::CompileSpec spec = Family().MakeCompileSpec(config, bucket);
      if (!seen.insert(spec.name_expressions.at(0)).second) continue;
      futures.push_back(pool.Submit([&, spec, config, bucket]() -> std::string {
        const std::string label = "rope[" + tuner::ConfigLabel(config) + "] " + bucket.dump();
        Result<tuner::CompiledVariant> c = tuner::CompileVariant(Family().sources(), spec, arch, label);
        if (!c.ok()) return label + ": " + c.status().ToString();
        auto lowered = c->lowered_names.find(spec.name_expressions.at(0));
        if (lowered == c->lowered_names.end()) return label + ": no lowered name";
        auto usage = c->resources.find(lowered->second);
        if (usage == c->resources.end()) return label + ": no ptxas report";
        const std::string pruned = tuner::PruneReason(*limits, usage->second,
                                                      Family().BlockShapeOf(config, bucket).threads, 0, false);
        return pruned.empty() ? std::string() : label + ": " + pruned;
      }));
    }
  }
  for (auto& f : futures) EXPECT_EQ(f.get(), "") << arch;
  EXPECT_GE(futures.size(), 6u * 3u);  // every bucket's dims, vector widths and block sizes
}

TEST(RopeCompile, EveryConfigOfTheUseCaseBucketsCompilesWithoutSpillsForSm90) { CompileBuckets("sm_90"); }
TEST(RopeCompile, EveryConfigOfTheUseCaseBucketsCompilesWithoutSpillsForSm120) { CompileBuckets("sm_120"); }

TEST(RopeCompile, ARotaryDimThatDoesNotSplitIntoVectorsFailsItsStaticAsserts) {
  tuner::CompileSpec spec;
  spec.main_file = "rope.cu";
  spec.name_expressions = {"dflash_rope::rope<64, 8, 8, 256>"};  // a half of 4 dims: not one vector of 8
  Result<tuner::CompiledVariant> r = tuner::CompileVariant(Family().sources(), spec, "sm_90", "rope[bad]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  EXPECT_NE(r.status().message().find("whole vectors"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace dflash::rope
