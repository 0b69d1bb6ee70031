// LaunchConv1d's argument checks, which run before anything touches a GPU.
#include <gtest/gtest.h>

#include <string>

#include "kernels/conv1d/conv1d_api.h"
#include "kernels/conv1d/conv1d_config.h"

namespace dflash::conv1d {
namespace {

// A variant as the loader would build it, with a placeholder function (never launched by these tests).
tuner::LoadedVariant TokenMajorVariant() {
  tuner::LoadedVariant v;
  v.config = {{"block_c", 256}, {"threads", 256}, {"tpt", 8}, {"vec", 8}};
  v.functions[KernelNameExpression(*GeometryOf(v.config, Layout::kTokenMajor))] = nullptr;
  v.label = "conv1d[test]";
  return v;
}

Conv1dArgs GoodArgs() {
  return Conv1dArgs::Contiguous(Layout::kTokenMajor, 0x10000, 0x20000, 0x30000, 100, 64);
}

void ExpectInvalid(const Conv1dArgs& a, const std::string& mentions) {
  const Status s = LaunchConv1d(TokenMajorVariant(), a, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(mentions), std::string::npos) << s.message();
}

TEST(Conv1dApi, ContiguousArgsUseTheLayoutsStrides) {
  const Conv1dArgs t = Conv1dArgs::Contiguous(Layout::kTokenMajor, 1, 2, 3, 100, 64);
  EXPECT_EQ(t.x_stride_t, 64);
  EXPECT_EQ(t.x_stride_c, 1);
  EXPECT_EQ(t.y_stride_t, 64);
  EXPECT_EQ(t.y_stride_c, 1);
  const Conv1dArgs c = Conv1dArgs::Contiguous(Layout::kChannelMajor, 1, 2, 3, 100, 64);
  EXPECT_EQ(c.x_stride_t, 1);
  EXPECT_EQ(c.x_stride_c, 100);
  EXPECT_EQ(c.num_seqs, 1);
  EXPECT_EQ(c.bias, 0u);
  EXPECT_EQ(c.cu_seqlens, 0u);
}

TEST(Conv1dApi, RejectsBadArgumentsBeforeLaunching) {
  Conv1dArgs a = GoodArgs();
  a.x = 0;
  ExpectInvalid(a, "non-null");
  a = GoodArgs();
  a.y = 0x30001;
  ExpectInvalid(a, "2-byte aligned");
  a = GoodArgs();
  a.cu_seqlens = 0x40002;
  a.num_seqs = 2;
  ExpectInvalid(a, "cu_seqlens must be 4-byte aligned");
  a = GoodArgs();
  a.num_seqs = 3;
  ExpectInvalid(a, "needs cu_seqlens");
  a = GoodArgs();
  a.num_seqs = 0;
  ExpectInvalid(a, "num_seqs");
  a = GoodArgs();
  a.tokens = -1;
  ExpectInvalid(a, "tokens");
  a = GoodArgs();
  a.channels = 0;
  ExpectInvalid(a, "channels");
  a = GoodArgs();
  a.channels = 70000;
  ExpectInvalid(a, "channels");
  a = GoodArgs();
  a.y_stride_c = 0;
  ExpectInvalid(a, "strides");
}

TEST(Conv1dApi, RejectsAVariantWithoutAConv1dKernel) {
  tuner::LoadedVariant v = TokenMajorVariant();
  v.functions.clear();
  Status s = LaunchConv1d(v, GoodArgs(), nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("holds no conv1d kernel"), std::string::npos) << s.message();
  v = TokenMajorVariant();
  v.config["vec"] = 3;
  s = LaunchConv1d(v, GoodArgs(), nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
}

TEST(Conv1dApi, ZeroTokensLaunchNothing) {
  Conv1dArgs a = GoodArgs();
  a.tokens = 0;
  EXPECT_TRUE(LaunchConv1d(TokenMajorVariant(), a, nullptr).ok());
}

}  // namespace
}  // namespace dflash::conv1d
