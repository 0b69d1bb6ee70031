// AdamW (trainer/train/adamw.h) against LibTorch's own torch::optim::AdamW (an independent implementation of the same
// update) over several steps with changing learning rates; state save/restore continues identically; clipping; the
// training loop's Update (divide, clip, step), fused on a GPU.
#include "trainer/train/adamw.h"

#include <gtest/gtest.h>

namespace dflash::trainer {
namespace {

TEST(AdamW, MatchesTorchOptimAdamWOverStepsWithChangingLr) {
  torch::manual_seed(7);
  for (double wd : {0.0, 0.1}) {
    auto a = torch::randn({5, 3}).requires_grad_(true), b = torch::randn({4}).requires_grad_(true);
    auto ra = a.detach().clone().requires_grad_(true), rb = b.detach().clone().requires_grad_(true);
    AdamWOptions o;
    o.weight_decay = wd;
    AdamW ours({{"a", a}, {"b", b}}, o);
    torch::optim::AdamW theirs({ra, rb}, torch::optim::AdamWOptions(1e-3).weight_decay(wd));
    for (int step = 0; step < 6; ++step) {
      const double lr = 1e-2 * (step + 1);
      const auto ga = torch::randn({5, 3}), gb = torch::randn({4});
      a.mutable_grad() = ga.clone();
      b.mutable_grad() = gb.clone();
      ra.mutable_grad() = ga.clone();
      rb.mutable_grad() = gb.clone();
      ours.Step(lr);
      for (auto& group : theirs.param_groups()) group.options().set_lr(lr);
      theirs.step();
      EXPECT_TRUE(torch::allclose(a, ra, 1e-6, 1e-7)) << "wd " << wd << " step " << step;
      EXPECT_TRUE(torch::allclose(b, rb, 1e-6, 1e-7)) << "wd " << wd << " step " << step;
    }
    EXPECT_EQ(ours.step(), 6);
  }
}

TEST(AdamW, RestoredStateContinuesBitExactly) {
  torch::manual_seed(8);
  auto p = torch::randn({8}).requires_grad_(true);
  AdamW first({{"p", p}}, {});
  std::vector<torch::Tensor> grads;
  for (int i = 0; i < 6; ++i) grads.push_back(torch::randn({8}));
  for (int i = 0; i < 3; ++i) {
    p.mutable_grad() = grads[i].clone();
    first.Step(1e-2);
  }
  auto q = p.detach().clone().requires_grad_(true);
  std::vector<std::pair<std::string, torch::Tensor>> saved;
  for (auto& [n, t] : first.StateTensors()) saved.emplace_back(n, t.clone());
  AdamW second({{"p", q}}, {});
  ASSERT_TRUE(second.LoadState(saved, first.step()).ok());
  for (int i = 3; i < 6; ++i) {
    p.mutable_grad() = grads[i].clone();
    first.Step(1e-2);
    q.mutable_grad() = grads[i].clone();
    second.Step(1e-2);
  }
  EXPECT_TRUE(torch::equal(p, q));
  saved.pop_back();
  EXPECT_FALSE(second.LoadState(saved, 3).ok()) << "a missing moment must be refused";
}

TEST(AdamW, ClipGradNormScalesToTheGlobalNorm) {
  auto a = torch::zeros({2}).requires_grad_(true), b = torch::zeros({1}).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0f, 0.0f});
  b.mutable_grad() = torch::tensor({4.0f});
  const double norm = ClipGradNorm({{"a", a}, {"b", b}}, 1.0);
  EXPECT_NEAR(norm, 5.0, 1e-9);
  EXPECT_NEAR(a.grad()[0].item<double>(), 0.6, 1e-5);
  EXPECT_NEAR(b.grad()[0].item<double>(), 0.8, 1e-5);
  EXPECT_NEAR(ClipGradNorm({{"a", a}, {"b", b}}, 10.0), 1.0, 1e-5) << "below the limit: unchanged";
  EXPECT_NEAR(a.grad()[0].item<double>(), 0.6, 1e-5);
}

// Update = divide by the batch weight, clip, Step; here against those passes done by hand. On a GPU the same
// update runs through LibTorch's fused AdamW kernel: it must agree with the CPU's separate passes to fp32 rounding.
TEST(AdamW, UpdateDividesClipsAndStepsOnTheCpuAndFusedOnTheGpu) {
  torch::manual_seed(9);
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA, 0);
  for (const double max_norm : {0.0, 0.5, 1e6}) {
    const auto a0 = torch::randn({64, 3}), b0 = torch::randn({7});
    std::vector<std::vector<torch::Tensor>> grads;
    for (int i = 0; i < 4; ++i) grads.push_back({torch::randn({64, 3}) * 30, torch::randn({7}) * 30});
    // By hand on the CPU: divide, clip, Step.
    auto ra = a0.clone().requires_grad_(true), rb = b0.clone().requires_grad_(true);
    AdamWOptions o;
    o.weight_decay = 0.01;
    AdamW manual({{"a", ra}, {"b", rb}}, o);
    std::vector<double> manual_norms;
    for (int i = 0; i < 4; ++i) {
      ra.mutable_grad() = grads[i][0].clone() / 12.5;
      rb.mutable_grad() = grads[i][1].clone() / 12.5;
      manual_norms.push_back(ClipGradNorm({{"a", ra}, {"b", rb}}, max_norm));
      manual.Step(1e-2);
    }
    for (const auto& device : devices) {
      // Copies (on the CPU, to() would return a0 itself, and the update would move a0 for the next device).
      auto a = a0.clone().to(device).requires_grad_(true), b = b0.clone().to(device).requires_grad_(true);
      AdamW ours({{"a", a}, {"b", b}}, o);
      for (int i = 0; i < 4; ++i) {
        // Copies too: the CPU's Update divides and clips its gradients in place.
        a.mutable_grad() = grads[i][0].clone().to(device);
        b.mutable_grad() = grads[i][1].clone().to(device);
        EXPECT_NEAR(ours.Update(1e-2, 12.5, max_norm), manual_norms[i], 1e-5 * manual_norms[i]) << device;
        ours.ZeroGrad();
      }
      EXPECT_EQ(ours.step(), 4);
      EXPECT_TRUE(torch::allclose(a.cpu(), ra.detach(), 1e-5, 1e-6)) << device << " max_norm " << max_norm;
      EXPECT_TRUE(torch::allclose(b.cpu(), rb.detach(), 1e-5, 1e-6)) << device << " max_norm " << max_norm;
    }
  }
  // No weight in the batch: no update, the norm is still reported.
  auto p = torch::ones({3}).requires_grad_(true);
  AdamW idle({{"p", p}}, {});
  p.mutable_grad() = torch::full({3}, 2.0f);
  EXPECT_GT(idle.Update(1e-2, 0.0, 1.0), 0.0);
  EXPECT_EQ(idle.step(), 0);
  EXPECT_TRUE(torch::equal(p.detach(), torch::ones({3})));
}

}  // namespace
}  // namespace dflash::trainer
