// Every distinct variant of the gdn space compiles with NVRTC for sm_90 and sm_120 and then passes the arch's
// PruneReason or is pruned for a stated reason; the Hopper tier's variants (fused 3) compile for sm_90a without
// spills, within the arch's limits, with HGMMA in their SASS and no wgmma serialised by ptxas (CPU only: NVRTC
// needs no GPU).
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "kernels/gdn/gdn_config.h"
#include "kernels/gdn/gdn_family.h"
#include "kernels/gdn/gdn_layout.h"
#include "kernels/gdn/gdn_problem.h"
#include "tests/kernels/sass_check.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::gdn {
namespace {

struct Outcome {
  std::string label;
  Status status;
  std::string prune_reason;
  int spill_stores = 0;
  int hgmma = -1;  // HGMMA instructions in the SASS (counted for sm_90a only)
  std::string serialized;  // ptxas's advisory when it serialised the wgmma pipeline
  std::string register_split;  // a setmaxnreg kernel launched below its block's register count (RegisterSplitMismatch)
};

// On sm_90a only the Hopper tier is compiled (the portable variants are the sm_90 code, compiled there).
void CompileWholeSpace(const std::string& arch) {
  const tuner::KernelFamily& family = ChunkedForwardFamily();
  const tuner::Problem bucket = *family.Bucket(MakeProblem(16, 48, 8192));
  const auto limits = tuner::LimitsFor(arch);
  ASSERT_TRUE(limits.has_value()) << arch;
  // segment_chunks and piece_chunks change no code: compile each distinct CompileSpec once. Every valid geometry,
  // also the ones the tuner skips as dominated (the API still runs them); the only invalid geometries are fused
  // configs with an out_bv other than the one fused configs carry (duplicates), wgmma passes of another shape than
  // one warpgroup on 64 columns (with 4-warp prep, or 8-warp folded prep), prep per key head other than beside the
  // wgmma pass at chunk 32, the folded prep with a split pass, pieces without the fused sequential pass, and
  // pass_reserve but beside the wgmma pass's pieces.
  std::map<std::string, tuner::Config> distinct;
  for (const tuner::Config& config : tuner::EnumerateSpace(family)) {
    const std::string why = GeometryInvalidReason(config);
    if ((config.at("fused") > 0 && config.at("out_bv") != kFusedOutBv) ||
        (config.at("fused") == 3 &&
         (config.at("state_bv") != ::gdn::kWgmmaBv ||
          (config.at("warps") != 4 && !(config.at("warps") == 8 && config.at("prep_heads") == 2)))) ||
        (config.at("prep_heads") == 1 && (config.at("fused") < 3 || config.at("chunk") != 32)) ||
        (config.at("prep_heads") == 2 &&
         (config.at("fused") == 0 || config.at("chunk") != 32 || config.at("segment_chunks") > 0)) ||
        (config.at("piece_chunks") > 0 && (config.at("fused") == 0 || config.at("segment_chunks") > 0)) ||
        (config.at("pass_reserve") > 0 && (config.at("fused") != 3 || config.at("piece_chunks") == 0))) {
      EXPECT_NE(why, "") << tuner::ConfigLabel(config);
      continue;
    }
    ASSERT_EQ(why, "") << tuner::ConfigLabel(config);
    if (IsHopperTier(config) != (arch == "sm_90a")) {
      EXPECT_EQ(IsHopperTier(config), family.ArchInvalidReason(config, arch) != "") << tuner::ConfigLabel(config);
      continue;
    }
    const tuner::CompileSpec spec = family.MakeCompileSpec(config, bucket);
    std::string key;
    for (const auto& e : spec.name_expressions) key += e + ";";
    distinct.emplace(key, config);
  }
  tuner::ThreadPool pool(2);
  std::vector<std::future<Outcome>> futures;
  for (const auto& [key, config] : distinct) {
    futures.push_back(pool.Submit([&family, &bucket, &arch, &limits, config]() {
      Outcome o;
      o.label = "gdn[" + tuner::ConfigLabel(config) + "]";
      const tuner::CompileSpec spec = family.MakeCompileSpec(config, bucket);
      Result<tuner::CompiledVariant> compiled = tuner::CompileVariant(family.sources(), spec, arch, o.label);
      if (!compiled.ok()) {
        o.status = compiled.status();
        return o;
      }
      const Result<std::string> sass = testing::Sm90aSass(compiled->cubin, arch);  // HGMMA and register split
      if (!sass.ok()) {
        o.status = sass.status();
        return o;
      }
      for (const KernelShape& k : KernelShapesOf(*GeometryOf(config))) {
        const std::string& expr = k.expression;
        auto lowered = compiled->lowered_names.find(expr);
        if (lowered == compiled->lowered_names.end()) {
          o.status = Internal("no lowered name for " + expr);
          return o;
        }
        auto usage = compiled->resources.find(lowered->second);
        if (usage == compiled->resources.end()) {
          o.status = Internal("no ptxas report for " + expr);
          return o;
        }
        o.spill_stores += usage->second.spill_stores;
        if (o.register_split.empty())
          o.register_split = testing::RegisterSplitMismatch(*sass, lowered->second, usage->second.registers, k.threads);
        const std::string why = tuner::PruneReason(*limits, usage->second, k.threads,
                                                   static_cast<std::size_t>(k.dynamic_shared), /*allow_spills=*/false);
        if (!why.empty() && o.prune_reason.empty()) o.prune_reason = expr + ": " + why;
      }
      o.serialized = testing::WgmmaSerialisationAdvisory(compiled->log);
      o.hgmma = testing::HgmmaCount(*sass);
      return o;
    }));
  }
  std::size_t runnable = 0;
  for (auto& f : futures) {
    const Outcome o = f.get();
    EXPECT_TRUE(o.status.ok()) << arch << " " << o.label << ": " << o.status.ToString();
    if (!o.status.ok()) continue;
    if (arch == "sm_90a") {
      EXPECT_GT(o.hgmma, 0) << o.label << ": no HGMMA in the SASS of a Hopper-tier variant";
      EXPECT_EQ(o.prune_reason, "") << o.label << ": a Hopper-tier variant must run on sm_90a";
      EXPECT_EQ(o.serialized, "") << o.label << ": ptxas serialised the wgmma";
      EXPECT_EQ(o.register_split, "") << o.label;
    }
    if (o.prune_reason.empty()) {
      ++runnable;
      EXPECT_EQ(o.spill_stores, 0) << arch << " " << o.label;
    } else {
      std::printf("%s %s pruned: %s\n", arch.c_str(), o.label.c_str(), o.prune_reason.c_str());
    }
  }
  std::printf("%s: %zu distinct variants compiled, %zu runnable\n", arch.c_str(), futures.size(), runnable);
  EXPECT_GT(runnable, futures.size() / 3) << "too many variants pruned on " << arch;
}

TEST(GdnCompile, EveryVariantCompilesForSm90) { CompileWholeSpace("sm_90"); }
TEST(GdnCompile, EveryVariantCompilesForSm120) { CompileWholeSpace("sm_120"); }
TEST(GdnCompile, EveryHopperTierVariantCompilesForSm90aWithHgmma) { CompileWholeSpace("sm_90a"); }

TEST(GdnCompile, TheDefaultVariantRunsOnSm120WithinItsLimits) {
  const tuner::KernelFamily& family = ChunkedForwardFamily();
  const tuner::Problem bucket = *family.Bucket(MakeProblem(16, 48, 8192));
  for (int fused : {0, 1}) {  // fused 2 at chunk 64 needs 1 block of 148 KB: pruned on sm_120
    const tuner::Config config{{"chunk", 64},       {"out_bv", 64},       {"segment_chunks", 0},
                               {"state_bv", 32},    {"warps", 4},         {"fused", fused},
                               {"piece_chunks", 0}, {"prep_heads", 0},    {"pass_reserve", 0}};
    Result<tuner::CompiledVariant> c =
        tuner::CompileVariant(family.sources(), family.MakeCompileSpec(config, bucket), "sm_120", "gdn[default]");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const auto shape = family.BlockShapeOf(config, bucket);
    for (const auto& [name, usage] : c->resources) {
      EXPECT_EQ(tuner::PruneReason(*tuner::LimitsFor("sm_120"), usage, shape.threads, shape.dynamic_shared_bytes,
                                   false),
                "")
          << name;
    }
  }
}

}  // namespace
}  // namespace dflash::gdn
