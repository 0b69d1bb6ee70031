// LaunchRmsNorm's argument checks (CheckRmsNormArgs: pointers, alignment, strides, sizes, eps, the aliasing rules)
// and its choice of kernel, all of which run before anything touches a GPU.
#include <gtest/gtest.h>

#include <string>

#include "kernels/rmsnorm/rmsnorm_api.h"
#include "kernels/rmsnorm/rmsnorm_config.h"

namespace dflash::rmsnorm {
namespace {

constexpr std::int64_t kRows = 100, kCols = 256;
constexpr CUdeviceptr kX = 0x100000, kW = 0x200000, kOut = 0x300000, kR = 0x400000, kZ = 0x500000,
                      kSum = 0x600000;

RmsNormArgs Plain() { return RmsNormArgs::Contiguous(kX, kW, kOut, kRows, kCols, Kind::kZeroCentred,
                                                     WeightDtype::kBf16, 1e-6f); }

RmsNormArgs Full() {
  RmsNormArgs a = Plain();
  a.residual = kR;
  a.residual_stride = kCols;
  a.gate = kZ;
  a.gate_stride = kCols;
  a.sum_out = kSum;
  a.sum_out_stride = kCols;
  return a;
}

// A variant as the loader would build it for `args`' problem, with a placeholder function (never launched here).
tuner::LoadedVariant VariantFor(const RmsNormArgs& args) {
  tuner::LoadedVariant v;
  v.config = {{"row_threads", 32}, {"threads", 256}, {"vec", 8}};
  v.functions[KernelNameExpression(*GeometryOf(v.config), ProblemOf(args))] = nullptr;
  v.label = "rmsnorm[test]";
  return v;
}

void ExpectInvalid(const RmsNormArgs& a, const std::string& mentions) {
  const Status s = CheckRmsNormArgs(a);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(mentions), std::string::npos) << s.message();
  // LaunchRmsNorm refuses the same arguments before launching.
  const Status l = LaunchRmsNorm(VariantFor(a), a, nullptr);
  EXPECT_EQ(l.code(), ErrorCode::kInvalidArgument) << l.ToString();
}

TEST(RmsNormApi, ContiguousArgsAndProblemOf) {
  const RmsNormArgs a = Plain();
  EXPECT_EQ(a.x_stride, kCols);
  EXPECT_EQ(a.out_stride, kCols);
  EXPECT_EQ(a.residual, 0u);
  EXPECT_EQ(a.gate, 0u);
  EXPECT_EQ(ProblemOf(a), (ProblemSpec{kRows, kCols, Kind::kZeroCentred, false, false, WeightDtype::kBf16}));
  RmsNormArgs f = Full();
  f.weight_dtype = WeightDtype::kFp32;
  f.kind = Kind::kStandard;
  EXPECT_EQ(ProblemOf(f), (ProblemSpec{kRows, kCols, Kind::kStandard, true, true, WeightDtype::kFp32}));
  EXPECT_TRUE(CheckRmsNormArgs(a).ok()) << CheckRmsNormArgs(a).ToString();
  EXPECT_TRUE(CheckRmsNormArgs(Full()).ok()) << CheckRmsNormArgs(Full()).ToString();
}

TEST(RmsNormApi, RejectsMissingPointersAndBadSizes) {
  RmsNormArgs a = Plain();
  a.x = 0;
  ExpectInvalid(a, "non-null");
  a = Plain();
  a.weight = 0;
  ExpectInvalid(a, "non-null");
  a = Plain();
  a.out = 0;
  ExpectInvalid(a, "non-null");
  a = Full();
  a.residual = 0;
  ExpectInvalid(a, "sum_out is given without a residual");
  a = Plain();
  a.rows = -1;
  ExpectInvalid(a, "rows=-1");
  a = Plain();
  a.rows = kMaxRows + 1;
  ExpectInvalid(a, "rows=");
  a = Plain();
  a.cols = 100;
  ExpectInvalid(a, "cols=100");
  a = Plain();
  a.cols = 0;
  ExpectInvalid(a, "cols=0");
  a = Plain();
  a.cols = a.x_stride = a.out_stride = 16392;
  ExpectInvalid(a, "cols=16392");
  a = Plain();
  a.eps = -1e-6f;
  ExpectInvalid(a, "eps");
  a = Plain();
  a.eps = NAN;
  ExpectInvalid(a, "eps");
}

TEST(RmsNormApi, RejectsMisalignedPointersAndStridesNamingTheField) {
  for (const char* field : {"x", "out", "residual", "gate", "sum_out"}) {
    SCOPED_TRACE(field);
    RmsNormArgs a = Full();
    CUdeviceptr* ptr = std::string(field) == "x"          ? &a.x
                       : std::string(field) == "out"      ? &a.out
                       : std::string(field) == "residual" ? &a.residual
                       : std::string(field) == "gate"     ? &a.gate
                                                          : &a.sum_out;
    std::int64_t* stride = std::string(field) == "x"          ? &a.x_stride
                           : std::string(field) == "out"      ? &a.out_stride
                           : std::string(field) == "residual" ? &a.residual_stride
                           : std::string(field) == "gate"     ? &a.gate_stride
                                                              : &a.sum_out_stride;
    const RmsNormArgs good = a;
    *ptr += 8;  // 8-byte aligned only
    ExpectInvalid(a, std::string(field) + " must be 16-byte aligned");
    a = good;
    *stride = kCols + 4;  // rows 8 bytes apart from 16-byte alignment
    ExpectInvalid(a, std::string(field) + "_stride=" + std::to_string(kCols + 4));
    a = good;
    *stride = kCols - 8;  // rows would overlap
    ExpectInvalid(a, std::string(field) + "_stride=" + std::to_string(kCols - 8));
    a = good;
    *stride = 0;
    ExpectInvalid(a, std::string(field) + "_stride=0");
  }
  RmsNormArgs a = Plain();
  a.weight += 4;
  ExpectInvalid(a, "weight must be 16-byte aligned");
}

TEST(RmsNormApi, SumOutMayBeTheResidualItselfButNoOtherOverlap) {
  RmsNormArgs a = Full();
  a.sum_out = a.residual;
  a.sum_out_stride = a.residual_stride;
  EXPECT_TRUE(CheckRmsNormArgs(a).ok()) << CheckRmsNormArgs(a).ToString();
  // The same buffer one row on, or with another stride: rows of the sum would land on residual rows other threads
  // still read.
  a.sum_out = a.residual + 2 * kCols;
  ExpectInvalid(a, "sum_out overlaps residual");
  a.sum_out = a.residual + 16;
  ExpectInvalid(a, "sum_out may only be the residual itself");
  a.sum_out = a.residual;
  a.sum_out_stride = 2 * kCols;
  ExpectInvalid(a, "sum_out overlaps residual");
  // out in place over x, over the residual, the gate or the weight, or over sum_out: refused.
  a = Full();
  a.out = a.x;
  ExpectInvalid(a, "out overlaps x");
  a = Full();
  a.out = a.residual + 2 * 50 * kCols;  // the second half of the residual
  ExpectInvalid(a, "out overlaps residual");
  a = Full();
  a.out = a.gate;
  ExpectInvalid(a, "out overlaps gate");
  a = Full();
  a.out = a.weight;
  ExpectInvalid(a, "out overlaps weight");
  a = Full();
  a.sum_out = a.out;
  ExpectInvalid(a, "overlaps");
  a = Full();
  a.sum_out = a.x + 2 * (kRows - 1) * kCols;  // the last row of x
  ExpectInvalid(a, "sum_out overlaps x");
  // Inputs may overlap each other.
  a = Full();
  a.gate = a.x;
  a.residual = a.x;
  a.sum_out = 0;
  EXPECT_TRUE(CheckRmsNormArgs(a).ok()) << CheckRmsNormArgs(a).ToString();
}

TEST(RmsNormApi, InterleavedViewsOfOneBufferAreDistinctWhenTheirColumnsAre) {
  // [rows, 512] buffer: x is columns 0..255 of each row, out columns 256..511 (the target's q / gate layout).
  RmsNormArgs a = Plain();
  a.x_stride = a.out_stride = 2 * kCols;
  a.out = a.x + 2 * kCols;
  EXPECT_TRUE(CheckRmsNormArgs(a).ok()) << CheckRmsNormArgs(a).ToString();
  a.out = a.x + 2 * (kCols - 8);  // columns 248..503: its first 8 columns are x's last 8
  ExpectInvalid(a, "out overlaps x");
  a.out = a.x + 2 * (kCols + 8);  // columns 264..519: its last 8 columns are the next row's first 8 of x
  ExpectInvalid(a, "out overlaps x");
  // Past the last row of x: no overlap.
  a.out = a.x + 2 * kRows * 2 * kCols;
  EXPECT_TRUE(CheckRmsNormArgs(a).ok()) << CheckRmsNormArgs(a).ToString();
  // Before the first row of x (ending exactly where x starts).
  a.out = a.x - 2 * ((kRows - 1) * 2 * kCols + kCols);
  EXPECT_TRUE(CheckRmsNormArgs(a).ok()) << CheckRmsNormArgs(a).ToString();
  a.out += 16;
  ExpectInvalid(a, "out overlaps x");
  // Different strides with overlapping address ranges are refused (checked by range only).
  a = Plain();
  a.x_stride = 2 * kCols;
  a.out = a.x + 2 * kCols;
  a.out_stride = 4 * kCols;
  ExpectInvalid(a, "out overlaps x");
}

TEST(RmsNormApi, LaunchRefusesAVariantOfAnotherProblem) {
  const RmsNormArgs a = Full();
  tuner::LoadedVariant v = VariantFor(Plain());  // built without residual and gate
  Status s = LaunchRmsNorm(v, a, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("holds no rmsnorm kernel"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("\"residual\":true"), std::string::npos) << s.message();
  v.functions.clear();
  s = LaunchRmsNorm(v, a, nullptr);
  EXPECT_NE(s.message().find("holds nothing"), std::string::npos) << s.message();
  v = VariantFor(a);
  v.config["vec"] = 3;
  s = LaunchRmsNorm(v, a, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("not a value"), std::string::npos) << s.message();
}

TEST(RmsNormApi, ZeroRowsLaunchNothing) {
  RmsNormArgs a = Full();
  a.rows = 0;
  EXPECT_TRUE(LaunchRmsNorm(VariantFor(a), a, nullptr).ok());
}

}  // namespace
}  // namespace dflash::rmsnorm
