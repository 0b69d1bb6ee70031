// LaunchXent's argument checks, which run before anything touches a GPU.
#include "kernels/xent/xent_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/xent/xent_config.h"

namespace dflash::xent {
namespace {

// A variant as the loader would build it, with a placeholder function (never launched by these tests).
tuner::LoadedVariant Variant(bool grad) {
  tuner::LoadedVariant v;
  v.config = {{"threads", 1024}, {"vec", 4}, {"unroll", 8}, {"split", 8}};
  v.functions[KernelNameExpression(*GeometryOf(v.config), grad)] = nullptr;
  v.label = grad ? "xent[grad]" : "xent[no grad]";
  return v;
}

XentArgs GoodArgs() {
  XentArgs a;
  a.logits = 0x100000;
  a.row_stride = 1024;
  a.labels = 0x20000;
  a.weights = 0x30000;
  a.loss = 0x40000;
  a.argmax = 0x50000;
  a.grad = 0x10000000;
  a.grad_row_stride = 1024;
  a.rows = 0;  // no launch: a well-formed call returns Ok without a GPU
  a.vocab = 1000;
  a.grad_scale = 0.5f;
  return a;
}

void ExpectInvalid(const XentArgs& a, const std::string& mentions, bool grad = true) {
  const Status s = LaunchXent(Variant(grad), a, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(mentions), std::string::npos) << s.message();
}

TEST(XentApi, ZeroRowsLaunchNothing) {
  EXPECT_TRUE(LaunchXent(Variant(true), GoodArgs(), nullptr).ok());
  XentArgs a = GoodArgs();
  a.grad = 0;
  a.grad_row_stride = 0;
  EXPECT_TRUE(LaunchXent(Variant(false), a, nullptr).ok());
}

TEST(XentApi, RejectsNullAndMisalignedPointers) {
  for (CUdeviceptr XentArgs::*field :
       {&XentArgs::logits, &XentArgs::labels, &XentArgs::weights, &XentArgs::loss, &XentArgs::argmax}) {
    XentArgs a = GoodArgs();
    a.*field = 0;
    ExpectInvalid(a, "non-null");
  }
  const struct {
    CUdeviceptr XentArgs::*field;
    CUdeviceptr offset;
    const char* mentions;
  } misaligned[] = {
      {&XentArgs::logits, 8, "logits must be 16-byte aligned"},
      {&XentArgs::labels, 4, "8-byte aligned"},
      {&XentArgs::argmax, 4, "8-byte aligned"},
      {&XentArgs::weights, 2, "4-byte aligned"},
      {&XentArgs::loss, 2, "4-byte aligned"},
      {&XentArgs::grad, 4, "grad must be 8-byte aligned"},
  };
  for (const auto& m : misaligned) {
    XentArgs a = GoodArgs();
    a.*m.field += m.offset;
    ExpectInvalid(a, m.mentions);
  }
}

TEST(XentApi, RejectsBadSizesAndStrides) {
  XentArgs a = GoodArgs();
  a.rows = -1;
  ExpectInvalid(a, "rows");
  a = GoodArgs();
  a.rows = (std::int64_t{1} << 24) + 1;
  ExpectInvalid(a, "rows");
  a = GoodArgs();
  a.vocab = 0;
  ExpectInvalid(a, "vocab");
  a = GoodArgs();
  a.vocab = (std::int64_t{1} << 20) + 1;
  a.row_stride = a.grad_row_stride = std::int64_t{1} << 21;
  ExpectInvalid(a, "vocab");
  a = GoodArgs();
  a.row_stride = 996;  // < vocab
  ExpectInvalid(a, "row_stride");
  a = GoodArgs();
  a.row_stride = 1002;  // rows would not be 16-byte aligned
  ExpectInvalid(a, "row_stride");
  a = GoodArgs();
  a.grad_row_stride = 1001;
  ExpectInvalid(a, "grad_row_stride");
  a = GoodArgs();
  a.grad_row_stride = 996;
  ExpectInvalid(a, "grad_row_stride");
  a = GoodArgs();
  a.grad_scale = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(a, "grad_scale");
  a.grad_scale = std::numeric_limits<float>::infinity();
  ExpectInvalid(a, "grad_scale");
}

TEST(XentApi, RejectsAGradientThatOverlapsTheLogits) {
  XentArgs a = GoodArgs();
  a.rows = 4;
  a.grad = a.logits + 4 * 3 * 1024;  // inside row 3 of the logits
  ExpectInvalid(a, "overlaps");
  a.grad = a.logits - 2 * 1024;  // starts 2 KiB before the logits: its rows 1 .. 3 lie on them
  ExpectInvalid(a, "overlaps");
  // Right before the logits (its extent is 3 * 1024 + 1000 bf16): past the checks, to the launch of the
  // placeholder function (which fails without a driver, or as a null function with one).
  a.grad = a.logits - 2 * (3 * 1024 + 1000);
  const Status s = LaunchXent(Variant(true), a, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().find("xent launch"), std::string::npos) << s.message();
}

TEST(XentApi, TheVariantDecidesWhetherAGradientIsWritten) {
  XentArgs a = GoodArgs();
  a.grad = 0;
  ExpectInvalid(a, "grad must be non-null", /*grad=*/true);
  ExpectInvalid(GoodArgs(), "grad must be 0", /*grad=*/false);
}

TEST(XentApi, RejectsAVariantWithoutAnXentKernel) {
  tuner::LoadedVariant v = Variant(true);
  v.functions.clear();
  Status s = LaunchXent(v, GoodArgs(), nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("holds no xent kernel"), std::string::npos) << s.message();
  v = Variant(true);
  v.config["split"] = 3;
  s = LaunchXent(v, GoodArgs(), nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace dflash::xent
