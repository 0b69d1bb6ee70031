// trainer/train/block_loss: the chunked weighted cross-entropy against the naive version that holds all logits
// (double precision, autograd for the gradient), for chunk sizes that do and do not divide the rows, with ignored
// labels and zero weights.
#include "trainer/train/block_loss.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dflash::trainer {
namespace {

constexpr std::int64_t kRows = 37, kHidden = 24, kVocab = 101;

struct Case {
  torch::Tensor hidden, head, labels, weights;
};

Case MakeCase(std::uint64_t seed) {
  torch::manual_seed(seed);
  Case c;
  c.hidden = torch::randn({kRows, kHidden}) * 2.0;
  c.head = torch::randn({kVocab, kHidden});
  c.labels = torch::randint(0, kVocab, {kRows}, torch::kLong);
  c.weights = torch::rand({kRows});
  for (std::int64_t r : {0, 7, 16, 33}) c.labels[r] = -100;  // ignored (their weights are not 0: must not matter)
  for (std::int64_t r : {3, 16, 20}) c.weights[r] = 0.0f;    // zero weight
  return c;
}

// sum_i w_i * CE_i with every logit held, in double; labels -100 skipped.
torch::Tensor NaiveLoss(const torch::Tensor& hidden, const Case& c) {
  const auto logp = torch::log_softmax(torch::matmul(hidden, c.head.to(torch::kDouble).t()), -1);
  auto total = torch::zeros({}, torch::kDouble);
  for (std::int64_t r = 0; r < kRows; ++r) {
    const auto label = c.labels[r].item<std::int64_t>();
    if (label == -100) continue;
    total = total - c.weights[r].item<double>() * logp[r][label];
  }
  return total;
}

TEST(ChunkedBlockLoss, ValueArgmaxAndGradientMatchNaiveFullLogits) {
  const Case c = MakeCase(1);
  const auto hidden64 = c.hidden.to(torch::kDouble).requires_grad_(true);
  const auto want = NaiveLoss(hidden64, c);
  want.backward();
  const auto want_grad = hidden64.grad();
  const auto want_argmax = torch::matmul(c.hidden, c.head.t()).argmax(-1);

  for (std::int64_t chunk : {1, 5, 16, 37, 64}) {
    const auto hidden = c.hidden.clone().requires_grad_(true);
    const auto got = ChunkedBlockLoss(hidden, c.head, c.labels, c.weights, chunk);
    ASSERT_EQ(got.weighted_ce_sum.dim(), 0);
    EXPECT_EQ(got.weighted_ce_sum.scalar_type(), torch::kFloat);
    EXPECT_NEAR(got.weighted_ce_sum.item<double>(), want.item<double>(), 1e-5 * std::abs(want.item<double>()))
        << "chunk " << chunk;
    EXPECT_EQ(got.argmax.scalar_type(), torch::kLong);
    EXPECT_FALSE(got.argmax.requires_grad());
    EXPECT_TRUE(torch::equal(got.argmax, want_argmax)) << "chunk " << chunk;
    got.weighted_ce_sum.backward();
    ASSERT_TRUE(hidden.grad().defined());
    EXPECT_LT((hidden.grad().to(torch::kDouble) - want_grad).abs().max().item<double>(), 1e-5) << "chunk " << chunk;
    // Ignored and zero-weight rows get exactly zero gradient.
    for (std::int64_t r : {0, 3, 7, 16, 20, 33}) {
      EXPECT_EQ(hidden.grad()[r].abs().max().item<float>(), 0.0f) << "row " << r << " chunk " << chunk;
    }
  }
}

// The training step gathers the labelled rows before the loss (data::SelectLabelledRows): the loss and the labelled
// rows' gradient are those of the loss over every row, and the rows left out get the zero gradient they would have.
TEST(ChunkedBlockLoss, GatheringTheLabelledRowsFirstChangesNeitherLossNorGradient) {
  const Case c = MakeCase(3);
  const auto all = c.hidden.clone().requires_grad_(true);
  const auto want = ChunkedBlockLoss(all, c.head, c.labels, c.weights, 8);
  want.weighted_ce_sum.backward();
  const auto kept = (c.labels != -100).nonzero().squeeze(1);
  ASSERT_LT(kept.size(0), kRows);
  const auto hidden = c.hidden.clone().requires_grad_(true);
  const auto got = ChunkedBlockLoss(hidden.index_select(0, kept), c.head, c.labels.index_select(0, kept),
                                    c.weights.index_select(0, kept), 8);
  got.weighted_ce_sum.backward();
  EXPECT_NEAR(got.weighted_ce_sum.item<double>(), want.weighted_ce_sum.item<double>(),
              1e-6 * std::abs(want.weighted_ce_sum.item<double>()));
  EXPECT_TRUE(torch::equal(got.argmax, want.argmax.index_select(0, kept)));
  EXPECT_LT((hidden.grad() - all.grad()).abs().max().item<float>(), 1e-6f);
  for (std::int64_t r : {0, 7, 16, 33}) EXPECT_EQ(hidden.grad()[r].abs().max().item<float>(), 0.0f) << "row " << r;
}

TEST(ChunkedBlockLoss, GradientScalesWithTheUpstreamGradientAndLeavesTheHeadAlone) {
  const Case c = MakeCase(2);
  const auto head = c.head.clone().requires_grad_(true);
  const auto h1 = c.hidden.clone().requires_grad_(true), h2 = c.hidden.clone().requires_grad_(true);
  ChunkedBlockLoss(h1, head, c.labels, c.weights, 8).weighted_ce_sum.backward();
  (ChunkedBlockLoss(h2, head, c.labels, c.weights, 8).weighted_ce_sum * -2.5).backward();
  EXPECT_TRUE(torch::allclose(h2.grad(), h1.grad() * -2.5, 1e-5, 1e-6));
  EXPECT_FALSE(head.grad().defined());
}

TEST(ChunkedBlockLoss, Bf16HiddenGivesBf16GradientCloseToFp32) {
  const Case c = MakeCase(3);
  const auto h32 = c.hidden.clone().requires_grad_(true);
  const auto h16 = c.hidden.to(torch::kBFloat16).requires_grad_(true);
  const auto l32 = ChunkedBlockLoss(h32, c.head, c.labels, c.weights, 10);
  const auto l16 = ChunkedBlockLoss(h16, c.head, c.labels, c.weights, 10);
  l32.weighted_ce_sum.backward();
  l16.weighted_ce_sum.backward();
  EXPECT_EQ(l16.weighted_ce_sum.scalar_type(), torch::kFloat);
  EXPECT_EQ(h16.grad().scalar_type(), torch::kBFloat16);
  EXPECT_NEAR(l16.weighted_ce_sum.item<double>(), l32.weighted_ce_sum.item<double>(),
              0.02 * std::abs(l32.weighted_ce_sum.item<double>()));
  EXPECT_LT((h16.grad().to(torch::kFloat) - h32.grad()).abs().max().item<double>(),
            0.05 * h32.grad().abs().max().item<double>());
}

TEST(ChunkedBlockLoss, AllRowsIgnoredGivesZeroLossAndGradient) {
  Case c = MakeCase(4);
  c.labels.fill_(-100);
  const auto hidden = c.hidden.clone().requires_grad_(true);
  const auto got = ChunkedBlockLoss(hidden, c.head, c.labels, c.weights, 6);
  EXPECT_EQ(got.weighted_ce_sum.item<float>(), 0.0f);
  got.weighted_ce_sum.backward();
  EXPECT_EQ(hidden.grad().abs().max().item<float>(), 0.0f);
}

TEST(ChunkedBlockLoss, RejectsBadInputs) {
  const Case c = MakeCase(5);
  auto bad_labels = c.labels.clone();
  bad_labels[2] = kVocab;
  EXPECT_THROW(ChunkedBlockLoss(c.hidden, c.head, bad_labels, c.weights), c10::Error);
  EXPECT_THROW(ChunkedBlockLoss(c.hidden, c.head, c.labels.to(torch::kInt), c.weights), c10::Error);
  EXPECT_THROW(ChunkedBlockLoss(c.hidden, c.head, c.labels, c.weights.narrow(0, 0, 5)), c10::Error);
  EXPECT_THROW(ChunkedBlockLoss(c.hidden, c.head.narrow(1, 0, 8), c.labels, c.weights), c10::Error);
  EXPECT_THROW(ChunkedBlockLoss(c.hidden, c.head, c.labels, c.weights, 0), c10::Error);
}

}  // namespace
}  // namespace dflash::trainer
