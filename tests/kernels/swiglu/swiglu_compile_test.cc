// Every config of the swiglu space (the target MLP's bucket and the narrowest rows) compiles with NVRTC for sm_90
// and sm_120 without spills and passes the arch's PruneReason. CPU only: NVRTC needs no GPU. Configs that differ
// only in `items` (a launch parameter) share one translation unit.
#include <gtest/gtest.h>

#include <future>
#include <set>
#include <string>
#include <vector>

#include "kernels/swiglu/swiglu_family.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::swiglu {
namespace {

void CompileBuckets(const std::string& arch) {
  const auto limits = tuner::LimitsFor(arch);
  ASSERT_TRUE(limits.has_value()) << arch;
  const std::vector<ProblemSpec> buckets = {{4096, 17408}, {1024, 8}};
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
        const std::string label = "swiglu[" + tuner::ConfigLabel(config) + "] " + bucket.dump();
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
  EXPECT_EQ(futures.size(), 6u);  // 2 vector widths x 3 block sizes (the kernel does not depend on the bucket)
}

TEST(SwigluCompile, EveryConfigOfTheUseCaseBucketsCompilesWithoutSpillsForSm90) { CompileBuckets("sm_90"); }
TEST(SwigluCompile, EveryConfigOfTheUseCaseBucketsCompilesWithoutSpillsForSm120) { CompileBuckets("sm_120"); }

}  // namespace
}  // namespace dflash::swiglu
