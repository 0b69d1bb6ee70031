// The per-arch limits table and pruning, including pruning of real compiles.
#include <gtest/gtest.h>

#include "jit_test_sources.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::tuner {
namespace {

TEST(ArchLimits, TableHoldsTheDocumentedLimits) {
  struct Expected {
    const char* arch;
    int max_shared_per_block;
    int threads_per_sm;
  };
  for (const Expected& e : {Expected{"sm_75", 65536, 1024}, Expected{"sm_80", 166912, 2048},
                            Expected{"sm_86", 101376, 1536}, Expected{"sm_87", 166912, 2048},
                            Expected{"sm_89", 101376, 1536}, Expected{"sm_90", 232448, 2048},
                            Expected{"sm_100", 232448, 2048}, Expected{"sm_103", 232448, 2048},
                            Expected{"sm_120", 101376, 1536}, Expected{"sm_121", 101376, 1536}}) {
    std::optional<ArchLimits> l = LimitsFor(e.arch);
    ASSERT_TRUE(l.has_value()) << e.arch;
    EXPECT_EQ(l->arch, e.arch);
    EXPECT_EQ(l->cc, testing::ArchNumber(e.arch));
    EXPECT_EQ(l->max_shared_per_block, e.max_shared_per_block) << e.arch;
    EXPECT_EQ(l->max_threads_per_sm, e.threads_per_sm) << e.arch;
    EXPECT_EQ(l->registers_per_sm, 65536) << e.arch;
    EXPECT_EQ(l->max_registers_per_thread, 255) << e.arch;
    EXPECT_EQ(l->max_threads_per_block, 1024) << e.arch;
    EXPECT_GE(l->shared_per_sm, l->max_shared_per_block) << e.arch;
  }
  EXPECT_EQ(LimitsFor("sm_120")->shared_per_sm, 102400);
  EXPECT_EQ(LimitsFor("sm_90a")->shared_reserved_per_block(), 1024);
  EXPECT_EQ(LimitsFor("sm_120")->shared_reserved_per_block(), 1024);
  EXPECT_FALSE(LimitsFor("sm_70").has_value());
  EXPECT_FALSE(LimitsFor("sm_120a").has_value());
  EXPECT_FALSE(LimitsFor("").has_value());
  // The Hopper tier's arch-specific target: Hopper's limits, marked arch-specific.
  ASSERT_TRUE(LimitsFor("sm_90a").has_value());
  EXPECT_EQ(LimitsFor("sm_90a")->cc, 90);
  EXPECT_TRUE(LimitsFor("sm_90a")->arch_specific);
  EXPECT_FALSE(LimitsFor("sm_90")->arch_specific);
  EXPECT_EQ(LimitsFor("sm_90a")->max_shared_per_block, LimitsFor("sm_90")->max_shared_per_block);
}

TEST(ArchLimits, ADeviceTunesForItsArchSpecificTargetWhereTheTableHasOne) {
  EXPECT_EQ(DeviceArch(90), "sm_90a");
  EXPECT_EQ(DeviceArch(120), "sm_120");
  EXPECT_EQ(DeviceArch(80), "sm_80");
  EXPECT_TRUE(RunsOn("sm_90", 90));
  EXPECT_TRUE(RunsOn("sm_90a", 90));
  EXPECT_FALSE(RunsOn("sm_90a", 100));
  EXPECT_FALSE(RunsOn("sm_90", 120));
  EXPECT_FALSE(RunsOn("sm_120", 0));
  EXPECT_FALSE(RunsOn("garbage", 90));
}

TEST(ArchLimits, TableIsOrderedOldestFirstWithoutDuplicates) {
  const auto& all = AllArchLimits();
  ASSERT_FALSE(all.empty());
  for (std::size_t i = 1; i < all.size(); ++i) {
    // An arch-specific target follows its portable arch (same cc); otherwise the cc grows.
    if (all[i].arch_specific) {
      EXPECT_EQ(all[i - 1].cc, all[i].cc) << all[i].arch;
      EXPECT_EQ(all[i - 1].arch + "a", all[i].arch);
    } else {
      EXPECT_LT(all[i - 1].cc, all[i].cc) << all[i].arch;
    }
  }
}

TEST(ArchLimits, RegisterAllocationRoundsPerWarpAndToFourWarps) {
  EXPECT_EQ(RegistersAllocatedPerBlock(32, 1024), 32 * 1024);
  EXPECT_EQ(RegistersAllocatedPerBlock(33, 32), 40 * 32 * 4);  // 33*32=1056 -> 1280 per warp, 1 warp -> 4
  EXPECT_EQ(RegistersAllocatedPerBlock(64, 1), 64 * 32 * 4);
  EXPECT_EQ(RegistersAllocatedPerBlock(0, 256), 0);
}

TEST(Prune, A120KiBSharedConfigIsPrunedOnSm120ButNotOnSm90) {
  ResourceUsage usage;
  usage.registers = 64;
  usage.shared_bytes = 0;
  const std::size_t dynamic = 120 * 1024;
  std::string on120 = PruneReason(*LimitsFor("sm_120"), usage, 256, dynamic, false);
  EXPECT_NE(on120.find("shared memory"), std::string::npos) << on120;
  EXPECT_NE(on120.find("101376"), std::string::npos) << on120;
  EXPECT_NE(on120.find("sm_120"), std::string::npos) << on120;
  EXPECT_EQ(PruneReason(*LimitsFor("sm_90"), usage, 256, dynamic, false), "");
  // Static and dynamic shared memory add up.
  usage.shared_bytes = 2048;
  EXPECT_EQ(PruneReason(*LimitsFor("sm_120"), usage, 256, 101376 - 2048, false), "");
  EXPECT_NE(PruneReason(*LimitsFor("sm_120"), usage, 256, 101376 - 2047, false), "");
}

TEST(Prune, RegistersThreadsAndTheirProduct) {
  const ArchLimits sm120 = *LimitsFor("sm_120");
  ResourceUsage u;
  u.registers = 64;
  EXPECT_EQ(PruneReason(sm120, u, 1024, 0, false), "");  // exactly 64K registers
  u.registers = 65;
  EXPECT_NE(PruneReason(sm120, u, 1024, 0, false).find("registers"), std::string::npos);
  u.registers = 128;
  EXPECT_EQ(PruneReason(sm120, u, 512, 0, false), "");
  EXPECT_NE(PruneReason(sm120, u, 544, 0, false), "");
  u.registers = 255;
  EXPECT_EQ(PruneReason(sm120, u, 256, 0, false), "");
  u.registers = 256;
  EXPECT_NE(PruneReason(sm120, u, 32, 0, false).find("256 registers per thread"), std::string::npos);
  u.registers = 32;
  EXPECT_NE(PruneReason(sm120, u, 1025, 0, false).find("threads"), std::string::npos);
  EXPECT_NE(PruneReason(sm120, u, 0, 0, false), "");
}

TEST(Prune, SpillsArePrunedUnlessAllowedAndAStackFrameIsFine) {
  const ArchLimits sm90 = *LimitsFor("sm_90");
  ResourceUsage u;
  u.registers = 40;
  u.stack_frame = 1024;
  EXPECT_EQ(PruneReason(sm90, u, 128, 0, false), "");
  u.spill_loads = 4;
  EXPECT_NE(PruneReason(sm90, u, 128, 0, false).find("spill"), std::string::npos);
  EXPECT_EQ(PruneReason(sm90, u, 128, 0, true), "");
  u.spill_loads = 0;
  u.spill_stores = 4;
  EXPECT_NE(PruneReason(sm90, u, 128, 0, false), "");
}

TEST(Prune, RealSpillingKernelIsPrunedOnSm120UnlessSpillsAllowed) {
  std::string src = testing::ReadTestData("ptxas_capture.cu");
  ASSERT_FALSE(src.empty());
  const EmbeddedFile files[] = {{"ptxas_capture.cu", src.c_str(), src.size()}};
  CompileSpec spec;
  spec.main_file = "ptxas_capture.cu";
  spec.name_expressions = {"pressure", "reverse_tile<4096>"};
  Result<CompiledVariant> v = CompileVariant(files, spec, "sm_120", "capture");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const ArchLimits sm120 = *LimitsFor("sm_120");
  const ResourceUsage& spilling = v->resources.at(v->lowered_names.at("pressure"));
  ASSERT_GT(spilling.spill_stores, 0) << v->log;
  EXPECT_NE(PruneReason(sm120, spilling, 1024, 0, false), "");
  EXPECT_EQ(PruneReason(sm120, spilling, 1024, 0, true), "");
  const ResourceUsage& tile = v->resources.at(v->lowered_names.at("reverse_tile<4096>"));
  EXPECT_EQ(PruneReason(sm120, tile, 1024, 0, false), "");
  EXPECT_NE(PruneReason(sm120, tile, 1024, 101376 - 8192 + 1, false), "") << "static smem counts";
}

}  // namespace
}  // namespace dflash::tuner
