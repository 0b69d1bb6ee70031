// The gdn host API's argument checks and workspace arithmetic (CPU only: nothing here reaches the driver).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/gdn/gdn_api.h"
#include "kernels/gdn/gdn_config.h"

namespace dflash::gdn {
namespace {

GdnArgs ValidArgs(const std::vector<std::int32_t>& cu) {
  // Fake, aligned device addresses: only validated, never dereferenced here.
  return GdnArgs::Contiguous(0x10000, 0x20000, 0x30000, 0x40000, 0x50000, 0x60000, 0x70000, 0x80000, 16, 48, cu);
}

TEST(GdnApi, ContiguousArgsHaveTheLayerLayoutAndValidate) {
  const std::vector<std::int32_t> cu{0, 8192};
  const GdnArgs a = ValidArgs(cu);
  EXPECT_EQ(a.q_stride_t, 16 * 128);
  EXPECT_EQ(a.v_stride_t, 48 * 128);
  EXPECT_EQ(a.ab_stride_t, 48);
  EXPECT_TRUE(ValidateArgs(a).ok());
}

TEST(GdnApi, MisalignedOrInconsistentArgumentsAreRejected) {
  const std::vector<std::int32_t> cu{0, 100};
  GdnArgs a = ValidArgs(cu);
  a.q += 2;  // not 16-byte aligned
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
  a = ValidArgs(cu);
  a.k_stride_t = 16 * 128 + 4;  // rows would not be 16-byte aligned
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
  a = ValidArgs(cu);
  a.value_heads = 40;
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
  a = ValidArgs(cu);
  a.b = 0;
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
  const std::vector<std::int32_t> bad{0, 50, 20};
  EXPECT_EQ(ChunkedWorkspaceBytes(Geometry{}, ValidArgs(bad)).status().code(), ErrorCode::kInvalidArgument);
}

TEST(GdnApi, ExactlyOneGateFormIsAccepted) {
  const std::vector<std::int32_t> cu{0, 100};
  GdnArgs a = ValidArgs(cu);
  a.g = 0x90000, a.beta = 0xA0000;  // both forms
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
  a.a = a.b = a.A_log = a.dt_bias = 0;  // the precomputed form alone
  EXPECT_TRUE(ValidateArgs(a).ok());
  a.qk_l2norm = false;
  EXPECT_TRUE(ValidateArgs(a).ok());
  a.beta = 0;  // half of it
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
  a.beta = 0xA0002;  // not 4-byte aligned
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
  a.g = a.beta = 0;  // neither
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
}

TEST(GdnApi, WorkspaceHoldsTheIntermediatesAndGrowsWithTheSplit) {
  const std::vector<std::int32_t> cu{0, 8192};
  const GdnArgs a = ValidArgs(cu);
  Geometry g;  // chunk 64, sequential
  Result<std::size_t> seq = ChunkedWorkspaceBytes(g, a);
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  const std::size_t T = 8192, HV = 48, D = 128;
  const std::size_t intermediates = T * HV * 4 + 4 * T * HV * D * 2 + 128 * HV * D * D * 2;  // gamma, W/U/kd/V_new, h_n
  EXPECT_GE(*seq, intermediates);
  EXPECT_LT(*seq, intermediates + 64 * 1024);
  g.segment_chunks = 16;  // 8 segments: maps [8, 48, 128, 256] and states [8, 48, 128, 128] in fp32
  Result<std::size_t> split = ChunkedWorkspaceBytes(g, a);
  ASSERT_TRUE(split.ok());
  EXPECT_GE(*split - *seq, 8 * HV * D * 3 * D * 4);
  g.segment_chunks = 0;
  g.fused = 1;  // no V_new, no h_n: qg [T, HV, 128] bf16 and P [128 chunks, HV, 64, 64] bf16 instead
  Result<std::size_t> fused = ChunkedWorkspaceBytes(g, a);
  ASSERT_TRUE(fused.ok());
  const std::size_t fused_intermediates = T * HV * 4 + 4 * T * HV * D * 2 + 128 * HV * 64 * 64 * 2;
  EXPECT_GE(*fused, fused_intermediates);
  EXPECT_LT(*fused, fused_intermediates + 64 * 1024);
  g.piece_chunks = 32;  // 4 pieces: the same intermediates and one fp32 state per sequence and head
  Result<std::size_t> pieces = ChunkedWorkspaceBytes(g, a);
  ASSERT_TRUE(pieces.ok()) << pieces.status().ToString();
  EXPECT_GE(*pieces, fused_intermediates + HV * D * D * 4);
  EXPECT_LT(*pieces, fused_intermediates + HV * D * D * 4 + 64 * 1024);
  g.fused = 0;
  EXPECT_EQ(ChunkedWorkspaceBytes(g, a).status().code(), ErrorCode::kInvalidArgument)
      << "pieces need the fused kernel";
  g.fused = 1;
  g.segment_chunks = 16;
  EXPECT_EQ(ChunkedWorkspaceBytes(g, a).status().code(), ErrorCode::kInvalidArgument)
      << "pieces need the sequential state pass";
}

TEST(GdnApi, TooSmallAWorkspaceIsRefusedBeforeAnythingRuns) {
  const std::vector<std::int32_t> cu{0, 10, 300};
  const GdnArgs a = ValidArgs(cu);
  Result<std::size_t> need = ChunkedWorkspaceBytes(Geometry{}, a);
  ASSERT_TRUE(need.ok());
  Result<PreparedForward> p = PrepareChunkedForward(Geometry{}, a, 0x100000, *need - 1);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("workspace"), std::string::npos);
}

}  // namespace
}  // namespace dflash::gdn
