// A run's setup (RunSetup) and its sides: with the target and the drafter on two GPUs (--target-device-offset) each
// GPU's backend resolves only its own model's kernels. The two sides must split the one-GPU list exactly: the drafter's
// side is the drafter attention (full and sliding, padded or packed rows), the target's side everything else, and
// together they are the one-GPU list in the same order.
#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <vector>

#include "decode_test_util.h"
#include "trainer/train/ops_setup.h"

namespace dflash::trainer {
namespace {

setup::DrafterConfig SlidingAndFullDrafter() {
  setup::DrafterConfig d;
  d.hidden_size = 256;
  d.num_attention_heads = 32;
  d.num_key_value_heads = 8;
  d.head_dim = 128;
  d.block_size = 16;
  d.layer_kinds = {setup::DrafterLayerKind::kSlidingAttention, setup::DrafterLayerKind::kFullAttention};
  d.sliding_window = 2048;
  return d;
}

// One line per shape: the op kind and the problems it launches, so two lists compare element by element.
std::vector<std::string> Describe(const std::vector<setup::OpShape>& shapes) {
  std::vector<std::string> out;
  for (const auto& shape : shapes) {
    std::string line = std::to_string(static_cast<int>(shape.op));
    for (const auto& request : setup::KernelRequestsFor(shape))
      line += " " + request.operation + " " + request.problem.dump();
    out.push_back(line);
  }
  return out;
}

TEST(RunSetup, TheTargetAndDrafterSidesSplitTheOneGpuListExactly) {
  const setup::TargetConfig target = testing::TinyHybridConfig();
  const setup::DrafterConfig drafter = SlidingAndFullDrafter();
  for (const auto mode : {data::RowMode::kPad, data::RowMode::kPack}) {
    TrainOptions options;
    options.max_length = 2048;
    options.num_anchors = 128;
    options.row_mode = mode;
    const setup::TrainingSetup run = RunSetup(options, target, drafter);
    const auto both = setup::OpShapesFor(run, setup::OpSide::kBoth);
    const auto target_side = setup::OpShapesFor(run, setup::OpSide::kTarget);
    const auto drafter_side = setup::OpShapesFor(run, setup::OpSide::kDrafter);
    // full and sliding drafter attention; the trained norms (context, block rows, q, k); q and k rope; the loss
    ASSERT_EQ(drafter_side.size(), 9u);
    // conv1d, gated delta rule, causal attention; the hidden norm without and with the residual add, q, k, gated;
    // q and k rope; the MLP's swiglu
    ASSERT_EQ(target_side.size(), 11u);
    auto drafter_op = [&](const setup::OpShape& s) {
      return s.op == setup::OpKind::kDraftAttention || s.op == setup::OpKind::kCrossEntropy ||
             (s.op == setup::OpKind::kRmsNorm && s.rmsnorm_trained) ||
             (s.op == setup::OpKind::kRope && s.rope.rotary_dim == drafter.head_dim);  // the target's is partial
    };
    for (const auto& s : drafter_side) EXPECT_TRUE(drafter_op(s)) << static_cast<int>(s.op);
    for (const auto& s : target_side) EXPECT_FALSE(drafter_op(s)) << static_cast<int>(s.op);
    // The two sides hold every shape of the list once (the list orders them by layout, then the row-wise ones).
    std::vector<setup::OpShape> joined = target_side;
    joined.insert(joined.end(), drafter_side.begin(), drafter_side.end());
    auto sorted = [](std::vector<std::string> v) {
      std::sort(v.begin(), v.end());
      return v;
    };
    EXPECT_EQ(sorted(Describe(joined)), sorted(Describe(both)));
    EXPECT_EQ(Describe(setup::OpShapesFor(run)), Describe(both));  // the default is both sides
  }
}

}  // namespace
}  // namespace dflash::trainer
