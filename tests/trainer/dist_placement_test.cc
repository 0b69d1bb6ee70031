// Placement of target and drafter (--target-device-offset): the device arithmetic for every rank of a host (no two
// ranks share a GPU, every target on the host, 0 = today's one GPU) and its errors; DeviceRoutedOps sends each
// operation to the backend of its input's device.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "trainer/dist/placement.h"
#include "trainer/train/device_routed_ops.h"

namespace dflash::trainer {
namespace {

TEST(Placement, OffsetZeroKeepsBothModelsOnTheDraftersGpu) {
  for (int gpu = 0; gpu < 4; ++gpu) {
    auto p = dist::PlaceModels(gpu, 4, 0, 4);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->drafter_device, gpu);
    EXPECT_EQ(p->target_device, gpu);
    EXPECT_FALSE(p->paired());
  }
}

TEST(Placement, EveryValidOffsetGivesEveryRankItsOwnTwoGpus) {
  // Checked against the definition: the 2 x ranks devices of a host are distinct and all below the GPU count.
  for (int gpus = 1; gpus <= 8; ++gpus) {
    for (int ranks = 1; ranks <= gpus; ++ranks) {
      for (int offset = 0; offset <= gpus; ++offset) {
        std::set<int> used;
        bool all_ok = true, distinct = true;
        for (int local = 0; local < ranks; ++local) {
          auto p = dist::PlaceModels(local, ranks, offset, gpus);
          if (!p.ok()) {
            all_ok = false;
            EXPECT_NE(p.status().message().find("--target-device-offset " + std::to_string(offset)),
                      std::string::npos) << p.status().message();
            continue;
          }
          EXPECT_EQ(p->drafter_device, local);
          EXPECT_EQ(p->target_device, local + offset);
          distinct &= used.insert(p->drafter_device).second;
          if (p->paired()) distinct &= used.insert(p->target_device).second;
        }
        const bool expect_ok = offset == 0 || (offset >= ranks && ranks - 1 + offset < gpus);
        EXPECT_EQ(all_ok, expect_ok) << gpus << " GPUs, " << ranks << " ranks, offset " << offset;
        if (all_ok) {
          EXPECT_TRUE(distinct) << gpus << " GPUs, " << ranks << " ranks, offset " << offset;
          for (int d : used) EXPECT_LT(d, gpus);
        }
      }
    }
  }
}

TEST(Placement, ErrorsSayWhatIsWrong) {
  auto negative = dist::PlaceModels(0, 1, -1, 2);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("must be >= 0"), std::string::npos);
  auto beyond = dist::PlaceModels(1, 1, 1, 2);
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.status().message().find("would run on cuda:2, but this host has 2 GPU(s)"), std::string::npos)
      << beyond.status().message();
  auto collide = dist::PlaceModels(0, 2, 1, 4);
  ASSERT_FALSE(collide.ok());
  EXPECT_NE(collide.status().message().find("use 0 or at least LOCAL_WORLD_SIZE=2"), std::string::npos)
      << collide.status().message();
  EXPECT_FALSE(dist::PlaceModels(2, 1, 0, 2).ok());  // no such GPU
}

// Records which operations reached it; returns its input.
class RecordingOps final : public Ops {
 public:
  std::string name() const override { return "recording"; }
  torch::Tensor DraftAttention(const torch::Tensor& q, const torch::Tensor&, const torch::Tensor&, const DraftMask&,
                               double) override {
    calls.push_back("draft");
    return q;
  }
  torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor&, const torch::Tensor&,
                                const torch::Tensor&, double) override {
    calls.push_back("causal");
    return q;
  }
  torch::Tensor CausalConv1dSilu(const torch::Tensor& x, const torch::Tensor&, const torch::Tensor&) override {
    calls.push_back("conv");
    return x;
  }
  torch::Tensor GatedDeltaRule(const torch::Tensor& q, const torch::Tensor&, const torch::Tensor&,
                               const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                               const torch::Tensor&, const torch::Tensor&) override {
    calls.push_back("gdn");
    return q;
  }
  std::vector<std::string> calls;
};

TEST(DeviceRoutedOps, EachOperationRunsOnTheBackendOfItsInputsDevice) {
  // Two devices a CPU has: cpu (the "drafter") and meta (the "target").
  RecordingOps drafter, target;
  DeviceRoutedOps ops(drafter, torch::kCPU, target, torch::kMeta);
  const auto on_cpu = torch::zeros({2});
  const auto on_meta = torch::empty({2}, torch::device(torch::kMeta));
  const torch::Tensor none;
  ops.DraftAttention(on_cpu, on_cpu, on_cpu, DraftMask{}, 1.0);
  ops.CausalAttention(on_meta, on_meta, on_meta, none, 1.0);
  ops.CausalConv1dSilu(on_meta, on_meta, none);
  ops.GatedDeltaRule(on_meta, on_meta, on_meta, on_meta, on_meta, on_meta, on_meta, none);
  ops.CausalAttention(on_cpu, on_cpu, on_cpu, none, 1.0);
  ops.DraftAttention(on_meta, on_meta, on_meta, DraftMask{}, 1.0);
  EXPECT_EQ(drafter.calls, (std::vector<std::string>{"draft", "causal"}));
  EXPECT_EQ(target.calls, (std::vector<std::string>{"causal", "conv", "gdn", "draft"}));
  // An input on neither device is an error naming both.
  RecordingOps a, b;
  DeviceRoutedOps meta_only(a, torch::kMeta, b, torch::kMeta);
  try {
    meta_only.CausalConv1dSilu(on_cpu, on_cpu, none);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("causal conv1d: input on cpu"), std::string::npos)
        << e.what_without_backtrace();
  }
  EXPECT_TRUE(a.calls.empty() && b.calls.empty());
}

}  // namespace
}  // namespace dflash::trainer
