// Every config of the attention spaces either is invalid for a stated reason or compiles with NVRTC for sm_90 and
// sm_120 (the drafter's DFlash full-layer bucket, also as packed rows: doc_bound) and then passes the arch's PruneReason
// or is pruned for a stated reason; plus one variant per mask kind and head dim. The Hopper tier's configs compile
// for sm_90a (and only there: elsewhere they are invalid for the arch), within its limits (no spills, shared memory
// within 227 KiB), with HGMMA in their SASS and no wgmma serialised by ptxas. CPU only: NVRTC needs no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "kernels/attention/attention_config.h"
#include "kernels/attention/attention_family.h"
#include "sass_check.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::attention {
namespace {

struct Outcome {
  std::string label;
  Status status;
  std::string prune_reason;
  int hgmma = -1;  // HGMMA instructions in the SASS (counted for sm_90a only)
  std::string serialized;  // ptxas's advisory when it serialised the wgmma pipeline (each product waited for)
  std::string register_split;  // a setmaxnreg kernel launched below its block's register count (RegisterSplitMismatch)
};

tuner::Problem Problem(const char* mask, int head_dim, int seq_q, int seq_kv) {
  tuner::Problem p = {{"mask", mask}, {"batch", 1}, {"heads_q", 32}, {"heads_kv", 8}, {"head_dim", head_dim},
                      {"seq_q", seq_q}, {"seq_kv", seq_kv}};
  if (std::string(mask).rfind("dflash", 0) == 0) {
    p["ctx_len"] = seq_kv - seq_q;
    p["block_size"] = 16;
  }
  if (std::string(mask) == "doc_causal") p["num_docs"] = 4;
  return p;
}

Outcome CompileOne(const tuner::KernelFamily& family, const tuner::Config& config, const tuner::Problem& bucket,
                   const std::string& arch) {
  Outcome o;
  o.label = std::string(family.name()) + "[" + tuner::ConfigLabel(config) + "]";
  const auto limits = tuner::LimitsFor(arch);
  if (!limits) {
    o.status = Internal("no limits for " + arch);
    return o;
  }
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
  for (const std::string& expr : spec.name_expressions) {
    const auto shape = family.KernelBlockShape(config, bucket, expr);
    auto lowered = compiled->lowered_names.find(expr);
    if (lowered == compiled->lowered_names.end()) {
      o.status = Internal("no lowered name for " + expr);
      return o;
    }
    auto usage = compiled->resources.find(lowered->second);
    if (usage == compiled->resources.end()) {
      o.status = Internal("no ptxas report for " + lowered->second);
      return o;
    }
    const std::string why = tuner::PruneReason(*limits, usage->second, shape.threads, shape.dynamic_shared_bytes,
                                               /*allow_spills=*/false);
    // Each kernel against its own launch's (threads, dynamic shared memory), as the tuner prunes.
    if (!why.empty() && o.prune_reason.empty()) o.prune_reason = expr + ": " + why;
    if (o.register_split.empty())
      o.register_split = testing::RegisterSplitMismatch(*sass, lowered->second, usage->second.registers, shape.threads);
  }
  o.serialized = testing::WgmmaSerialisationAdvisory(compiled->log);
  o.hgmma = testing::HgmmaCount(*sass);
  return o;
}

// `doc_bound`: the packed-rows problem, whose kernels are the document-bound instantiations. On sm_90a only the
// Hopper tier is compiled (the portable configs are the sm_90 code, compiled there) and its SASS must hold HGMMA
// and ptxas must not have serialised its wgmma (the advisories C7510-C7520).
void CompileWholeSpace(const tuner::KernelFamily& family, const std::string& arch, bool doc_bound = false) {
  tuner::Problem problem = Problem("dflash_full", 128, 8192, 16384);
  if (doc_bound) problem["doc_bound"] = true;
  const tuner::Problem bucket = *family.Bucket(problem);
  tuner::ThreadPool pool;
  std::vector<std::future<Outcome>> futures;
  std::size_t invalid = 0;
  for (const tuner::Config& config : tuner::EnumerateSpace(family)) {
    if (arch == "sm_90a" && !IsHopperTier(config)) continue;
    std::string why = family.InvalidReason(config, bucket);
    if (IsTunerSkip(why)) why.clear();  // the tuner skips it; the API runs it: compile it
    if (why.empty()) why = family.ArchInvalidReason(config, arch);
    if (!why.empty()) {
      std::printf("%s %s[%s] invalid: %s\n", arch.c_str(), std::string(family.name()).c_str(),
                  tuner::ConfigLabel(config).c_str(), why.c_str());
      ++invalid;
      continue;
    }
    futures.push_back(pool.Submit([&family, &bucket, arch, config]() { return CompileOne(family, config, bucket, arch); }));
  }
  std::size_t runnable = 0;
  for (auto& f : futures) {
    const Outcome o = f.get();
    EXPECT_TRUE(o.status.ok()) << arch << " " << o.label << ": " << o.status.ToString();
    if (!o.status.ok()) continue;
    if (arch == "sm_90a") {
      EXPECT_GT(o.hgmma, 0) << o.label << ": no HGMMA in the SASS of a Hopper-tier variant";
      EXPECT_EQ(o.serialized, "") << o.label;
      EXPECT_EQ(o.register_split, "") << o.label;
    }
    if (o.prune_reason.empty()) {
      ++runnable;
    } else {
      std::printf("%s %s pruned: %s\n", arch.c_str(), o.label.c_str(), o.prune_reason.c_str());
    }
  }
  std::printf("%s %s%s: %zu invalid, %zu compiled, %zu runnable\n", arch.c_str(), std::string(family.name()).c_str(),
              doc_bound ? " (doc_bound)" : "", invalid, futures.size(), runnable);
  EXPECT_GE(runnable, 3u) << "too few runnable variants on " << arch;
}

// Each (problem, config) is valid, compiles for sm_90a in parallel, is not pruned, has HGMMA in its SASS, and its
// setmaxnreg kernels launch at the register count their split was sized for.
void CompileEachForSm90a(const tuner::KernelFamily& family,
                         const std::vector<std::pair<tuner::Problem, tuner::Config>>& items) {
  tuner::ThreadPool pool;
  std::vector<std::future<Outcome>> futures;
  for (const auto& [problem, config] : items) {
    const tuner::Problem bucket = *family.Bucket(problem);
    const std::string why = family.InvalidReason(config, bucket);
    ASSERT_TRUE(why.empty() || IsTunerSkip(why)) << bucket.dump() << ": " << why;
    futures.push_back(pool.Submit([&family, bucket, config]() { return CompileOne(family, config, bucket, "sm_90a"); }));
  }
  for (auto& f : futures) {
    const Outcome o = f.get();
    EXPECT_TRUE(o.status.ok()) << o.label << ": " << o.status.ToString();
    EXPECT_EQ(o.prune_reason, "") << o.label;
    EXPECT_GT(o.hgmma, 0) << o.label;
    EXPECT_EQ(o.serialized, "") << o.label;
    EXPECT_EQ(o.register_split, "") << o.label;
  }
}

// The Hopper tier needs an arch-specific sm_90a target: on any other arch its configs are invalid (the tuner prunes
// them before compiling), on sm_90a they are not.
TEST(AttentionCompile, TheHopperTierIsInvalidOffSm90a) {
  const tuner::Config hopper = {{"block_m", 128}, {"block_n", 128}, {"warps", 4}, {"stages", 3}, {"kernel", 2}};
  const tuner::Config portable = {{"block_m", 128}, {"block_n", 64}, {"warps", 4}, {"stages", 2}, {"kernel", 0}};
  for (const char* arch : {"sm_80", "sm_90", "sm_100", "sm_120"}) {
    EXPECT_NE(ForwardFamily().ArchInvalidReason(hopper, arch).find("needs sm_90a"), std::string::npos) << arch;
    EXPECT_EQ(ForwardFamily().ArchInvalidReason(portable, arch), "") << arch;
  }
  EXPECT_EQ(ForwardFamily().ArchInvalidReason(hopper, "sm_90a"), "");
  EXPECT_EQ(ForwardFamily().ArchInvalidReason(portable, "sm_90a"), "");
  const tuner::Config hopper_bwd = {{"block_m", 64}, {"block_n", 128}, {"stages", 2}, {"dq_mode", 0}, {"kernel", 1}};
  for (const char* arch : {"sm_80", "sm_90", "sm_100", "sm_120"})
    EXPECT_NE(BackwardFamily().ArchInvalidReason(hopper_bwd, arch).find("needs sm_90a"), std::string::npos) << arch;
  EXPECT_EQ(BackwardFamily().ArchInvalidReason(hopper_bwd, "sm_90a"), "");
}

TEST(AttentionCompile, EveryForwardConfigCompilesForSm90) { CompileWholeSpace(ForwardFamily(), "sm_90"); }
TEST(AttentionCompile, EveryForwardConfigCompilesForSm120) { CompileWholeSpace(ForwardFamily(), "sm_120"); }
TEST(AttentionCompile, EveryHopperTierForwardConfigCompilesForSm90aWithHgmma) {
  CompileWholeSpace(ForwardFamily(), "sm_90a");
  CompileWholeSpace(ForwardFamily(), "sm_90a", true);
}
TEST(AttentionCompile, EveryHopperTierBackwardConfigCompilesForSm90aWithHgmma) {
  CompileWholeSpace(BackwardFamily(), "sm_90a");
  CompileWholeSpace(BackwardFamily(), "sm_90a", true);
}
TEST(AttentionCompile, EveryBackwardConfigCompilesForSm90) { CompileWholeSpace(BackwardFamily(), "sm_90"); }
TEST(AttentionCompile, EveryBackwardConfigCompilesForSm120) { CompileWholeSpace(BackwardFamily(), "sm_120"); }

// Packed rows (doc_bound) are kernels of their own: the whole space again, for both archs.
TEST(AttentionCompile, EveryPackedRowsForwardConfigCompilesForSm90AndSm120) {
  CompileWholeSpace(ForwardFamily(), "sm_90", true);
  CompileWholeSpace(ForwardFamily(), "sm_120", true);
}
TEST(AttentionCompile, EveryPackedRowsBackwardConfigCompilesForSm90) { CompileWholeSpace(BackwardFamily(), "sm_90", true); }
TEST(AttentionCompile, EveryPackedRowsBackwardConfigCompilesForSm120) {
  CompileWholeSpace(BackwardFamily(), "sm_120", true);
}

TEST(AttentionCompile, EveryMaskKindAndHeadDimCompilesForSm120) {
  struct Item { const tuner::KernelFamily* family; tuner::Problem problem; tuner::Config config; };
  const tuner::Config fwd = {{"block_m", 64}, {"block_n", 64}, {"warps", 4}, {"stages", 2}};
  const tuner::Config fwd256 = {{"block_m", 64}, {"block_n", 32}, {"warps", 4}, {"stages", 2}};
  const tuner::Config bwd = {{"block_m", 64}, {"block_n", 64}, {"stages", 1}, {"dq_mode", 1}};
  std::vector<Item> items;
  for (const char* mask : {"none", "causal", "doc_causal", "dflash_sliding"}) {
    const int q = std::string(mask).rfind("dflash", 0) == 0 ? 4096 : 8192;
    const int kv = std::string(mask).rfind("dflash", 0) == 0 ? 12288 : 8192;
    items.push_back({&ForwardFamily(), Problem(mask, 128, q, kv), fwd});
    items.push_back({&BackwardFamily(), Problem(mask, 64, q, kv), bwd});
  }
  items.push_back({&ForwardFamily(), Problem("causal", 256, 8192, 8192), fwd256});
  items.push_back({&ForwardFamily(), Problem("doc_causal", 256, 8192, 8192), fwd256});
  tuner::ThreadPool pool;
  std::vector<std::future<Outcome>> futures;
  for (const Item& it : items) {
    const tuner::Problem bucket = *it.family->Bucket(it.problem);
    ASSERT_EQ(it.family->InvalidReason(it.config, bucket), "") << bucket.dump();
    futures.push_back(pool.Submit([it, bucket]() { return CompileOne(*it.family, it.config, bucket, "sm_120"); }));
  }
  for (auto& f : futures) {
    const Outcome o = f.get();
    EXPECT_TRUE(o.status.ok()) << o.label << ": " << o.status.ToString();
    EXPECT_EQ(o.prune_reason, "") << o.label;
  }
}

TEST(AttentionCompile, EveryMaskKindAndHeadDimOfTheHopperTierCompilesForSm90a) {
  std::vector<std::pair<tuner::Problem, tuner::Config>> items;
  auto hopper = [](int bn, int kernel = 1, int bm = 128) {
    return tuner::Config{{"block_m", bm}, {"block_n", bn}, {"warps", 4}, {"stages", kernel == 2 ? 3 : 2}, {"kernel", kernel}};
  };
  for (const char* mask : {"none", "causal", "doc_causal", "dflash_full", "dflash_sliding"}) {
    const bool dflash = std::string(mask).rfind("dflash", 0) == 0;
    for (int d : {64, 128}) {
      // kernel 2 holds two S tiles: at block_n 128 some masks spill (pruned), so it is checked at 64.
      for (int kernel : {1, 2})
        items.push_back({Problem(mask, d, dflash ? 4096 : 8192, dflash ? 12288 : 8192), hopper(kernel == 2 ? 64 : 128, kernel)});
    }
  }
  items.push_back({Problem("causal", 256, 4096, 4096), hopper(64)});
  items.push_back({Problem("doc_causal", 256, 4096, 4096), hopper(64)});
  items.push_back({Problem("causal", 256, 4096, 4096), hopper(64, 2, 64)});  // three 256-wide kv buffers + Q of 64 rows
  // The warp-specialised kernel (TMA, producer warpgroup): every pipeline, every mask kind, head dims 64 / 128 / 256.
  auto tma = [](int bn, int kernel) {
    return tuner::Config{{"block_m", 128}, {"block_n", bn}, {"warps", 4}, {"stages", 2}, {"kernel", kernel}};
  };
  for (const char* mask : {"none", "causal", "doc_causal", "dflash_full", "dflash_sliding"}) {
    const bool dflash = std::string(mask).rfind("dflash", 0) == 0;
    for (int kernel : {3, 4, 5})
      items.push_back({Problem(mask, 128, dflash ? 4096 : 8192, dflash ? 12288 : 8192), tma(128, kernel)});
  }
  // The persistent kernel 6 (head dim <= 128); the variants that spill (doc_causal at block_n 128: 4 B in a
  // consumer; dflash_sliding with the document bound at block_n 64: 20 B in a planning warp) are pruned by the tuner
  // and left out here.
  for (const char* mask : {"none", "causal", "doc_causal", "dflash_full", "dflash_sliding"}) {
    const bool dflash = std::string(mask).rfind("dflash", 0) == 0;
    const bool doc = std::string(mask) == "doc_causal";
    items.push_back({Problem(mask, 128, dflash ? 4096 : 8192, dflash ? 12288 : 8192), tma(doc ? 64 : 128, 6)});
    items.push_back({Problem(mask, 64, dflash ? 4096 : 8192, dflash ? 12288 : 8192), tma(64, 6)});
  }
  items.push_back({Problem("causal", 64, 8192, 8192), tma(128, 4)});
  items.push_back({Problem("causal", 256, 4096, 4096), tma(64, 3)});
  items.push_back({Problem("doc_causal", 256, 4096, 4096), tma(64, 4)});
  items.push_back({Problem("causal", 256, 4096, 4096), tma(64, 5)});
  CompileEachForSm90a(ForwardFamily(), items);
}

// The wgmma backward for every mask kind and both head dims (the whole space above is the DFlash full bucket).
TEST(AttentionCompile, EveryMaskKindAndHeadDimOfTheHopperTierBackwardCompilesForSm90a) {
  std::vector<std::pair<tuner::Problem, tuner::Config>> items;
  auto hopper = [](int bm, int bn, int kernel = 1) {
    return tuner::Config{{"block_m", bm}, {"block_n", bn}, {"stages", 2}, {"dq_mode", 0},
                         {"warp_layout", 1}, {"head_groups", 0}, {"kernel", kernel}};
  };
  for (const char* mask : {"none", "causal", "doc_causal", "dflash_sliding"}) {
    const bool dflash = std::string(mask).rfind("dflash", 0) == 0;
    items.push_back({Problem(mask, 128, dflash ? 4096 : 8192, dflash ? 12288 : 8192), hopper(64, 128)});
    items.push_back({Problem(mask, 64, dflash ? 4096 : 8192, dflash ? 12288 : 8192), hopper(128, 128)});
    items.push_back({Problem(mask, 128, dflash ? 4096 : 8192, dflash ? 12288 : 8192), hopper(64, 128, 2)});
    items.push_back({Problem(mask, 128, dflash ? 4096 : 8192, dflash ? 12288 : 8192), hopper(64, 128, 3)});
    items.push_back({Problem(mask, 128, dflash ? 4096 : 8192, dflash ? 12288 : 8192), hopper(64, 128, 4)});
  }
  CompileEachForSm90a(BackwardFamily(), items);
}

TEST(AttentionCompile, AnInvalidConfigFailsItsStaticAsserts) {
  const tuner::Config bad = {{"block_m", 64}, {"block_n", 64}, {"warps", 8}, {"stages", 2}};  // 64 % (16*8) != 0
  const tuner::Problem bucket = *ForwardFamily().Bucket(Problem("causal", 128, 1024, 1024));
  ASSERT_NE(ForwardFamily().InvalidReason(bad, bucket), "");
  Result<tuner::CompiledVariant> r = tuner::CompileVariant(
      ForwardFamily().sources(), ForwardFamily().MakeCompileSpec(bad, bucket), "sm_90", "attention_fwd[bad]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  EXPECT_NE(r.status().message().find("m-tiles of 16 rows"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace dflash::attention
