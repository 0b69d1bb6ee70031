// Loss weights, labels and the accepted-length proxy against the spec text (§5, §7) written out in the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "trainer/data/loss_weights.h"

namespace dflash::trainer::data {
namespace {

constexpr std::int32_t kMask = 248070;

// Spec §5 literally: slot k of block j, k = 0 excluded:
//   valid_j · [a_j + k < S] · loss_mask[a_j + k] · exp(−(k − 1)/γ)
double SpecWeight(const Blocks& b, const std::vector<std::uint8_t>& mask, int j, int k, double gamma) {
  if (k == 0) return 0.0;
  const int a = b.anchors[j];
  const int S = b.doc_end[j];  // the sequence end of the anchor's document
  const double valid = b.valid[j] ? 1.0 : 0.0;
  const double in_range = (a + k < S) ? 1.0 : 0.0;
  const double m = (a + k < S) ? mask[a + k] : 0.0;
  return valid * in_range * m * std::exp(-(k - 1) / gamma);
}

struct Case {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
  std::vector<std::int32_t> cu;
  Blocks blocks;
};

Case RandomCase(std::mt19937_64& rng, int block_size, bool packed) {
  Case c;
  const int S = 2 + static_cast<int>(rng() % 150);
  for (int i = 0; i < S; ++i) {
    c.ids.push_back(static_cast<std::int32_t>(rng() % 50));  // small vocab: argmax hits happen
    c.mask.push_back(static_cast<std::uint8_t>(rng() % 4 != 0));
  }
  if (packed) {
    c.cu = {0};
    while (c.cu.back() < S) c.cu.push_back(std::min(S, c.cu.back() + 1 + static_cast<int>(rng() % 30)));
  }
  BlockOptions o{.num_anchors = 1 + static_cast<int>(rng() % 20), .block_size = block_size, .mask_token_id = kMask};
  auto b = SampleBlocks(c.ids, c.mask, c.cu, o, rng());
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  c.blocks = std::move(b).value();
  return c;
}

TEST(LossWeights, GammaIsSevenFiveFourForBlockSixteenTenEightAndOtherSizesAreRefused) {
  EXPECT_EQ(*DecayGamma(16), 7.0);
  EXPECT_EQ(*DecayGamma(10), 5.0);
  EXPECT_EQ(*DecayGamma(8), 4.0);
  auto bad = DecayGamma(12);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("12"), std::string::npos);
}

TEST(LossWeights, WeightsAndLabelsMatchTheSpecOnRandomRows) {
  std::mt19937_64 rng(std::random_device{}());
  for (int t = 0; t < 400; ++t) {
    const int B = std::vector<int>{8, 10, 16}[t % 3];
    const double gamma = B == 16 ? 7.0 : B == 10 ? 5.0 : 4.0;
    Case c = RandomCase(rng, B, t % 2 == 1);
    auto lt = BuildLossTargets(c.ids, c.mask, c.blocks);
    ASSERT_TRUE(lt.ok()) << lt.status().ToString();
    double sum = 0.0;
    for (int j = 0; j < c.blocks.num_blocks; ++j) {
      for (int k = 0; k < B; ++k) {
        const std::size_t slot = static_cast<std::size_t>(j) * B + k;
        const double w = SpecWeight(c.blocks, c.mask, j, k, gamma);
        EXPECT_FLOAT_EQ(lt->weights[slot], static_cast<float>(w)) << "block " << j << " slot " << k;
        sum += static_cast<float>(w);
        const int a = c.blocks.anchors[j];
        const bool has_label = c.blocks.valid[j] && k >= 1 && a + k < c.blocks.doc_end[j];
        EXPECT_EQ(lt->labels[slot], has_label ? c.ids[a + k] : kIgnoreLabel) << "block " << j << " slot " << k;
      }
    }
    EXPECT_NEAR(lt->weight_sum, sum, 1e-9 * (1 + sum));
  }
}

TEST(LossWeights, LabelledRowsAreExactlyTheSlotsWithALabelInOrder) {
  std::mt19937_64 rng(std::random_device{}());
  for (int t = 0; t < 200; ++t) {
    Case c = RandomCase(rng, 16, t % 2 == 1);
    auto lt = BuildLossTargets(c.ids, c.mask, c.blocks);
    ASSERT_TRUE(lt.ok()) << lt.status().ToString();
    const LabelledRows rows = SelectLabelledRows(*lt);
    ASSERT_EQ(rows.labels.size(), rows.index.size());
    ASSERT_EQ(rows.weights.size(), rows.index.size());
    std::size_t next = 0;
    double kept_weight = 0.0;
    for (std::size_t slot = 0; slot < lt->labels.size(); ++slot) {
      if (lt->labels[slot] == kIgnoreLabel) {
        EXPECT_EQ(lt->weights[slot], 0.0f) << "slot " << slot << " has a weight but no label";
        continue;
      }
      ASSERT_LT(next, rows.index.size());
      EXPECT_EQ(rows.index[next], static_cast<std::int32_t>(slot));
      EXPECT_EQ(rows.labels[next], lt->labels[slot]);
      EXPECT_EQ(rows.weights[next], lt->weights[slot]);
      kept_weight += rows.weights[next];
      ++next;
    }
    EXPECT_EQ(next, rows.index.size());
    for (int j = 0; j < c.blocks.num_blocks; ++j) {  // slot 0 is never a loss row
      EXPECT_EQ(std::count(rows.index.begin(), rows.index.end(), j * 16), 0);
    }
    EXPECT_NEAR(kept_weight, lt->weight_sum, 1e-9 * (1 + lt->weight_sum));
  }
}

TEST(LossWeights, BlockCrossingTheSequenceEndGetsNoWeightPastIt) {
  // S = 6, anchor 3 (mask 1 at 3 and 4), block 8: slots 1, 2 are inside (positions 4, 5), slots 3..7 are past S.
  const std::vector<std::int32_t> ids = {9, 9, 9, 30, 40, 50};
  const std::vector<std::uint8_t> mask = {0, 0, 0, 1, 1, 1};
  BlockOptions o{.num_anchors = 1, .block_size = 8, .mask_token_id = kMask};
  // Candidates are 3 and 4; find a seed that picks 3.
  Blocks b;
  for (std::uint64_t seed = 0;; ++seed) {
    b = *SampleBlocks(ids, mask, {}, o, seed);
    if (b.anchors[0] == 3) break;
  }
  auto lt = BuildLossTargets(ids, mask, b);
  ASSERT_TRUE(lt.ok());
  EXPECT_EQ(lt->weights[0], 0.0f);
  EXPECT_FLOAT_EQ(lt->weights[1], 1.0f);
  EXPECT_FLOAT_EQ(lt->weights[2], static_cast<float>(std::exp(-1.0 / 4)));
  for (int k = 3; k < 8; ++k) {
    EXPECT_EQ(lt->weights[k], 0.0f);
    EXPECT_EQ(lt->labels[k], kIgnoreLabel);
  }
  EXPECT_EQ(lt->labels[1], 40);
  EXPECT_EQ(lt->labels[2], 50);
}

TEST(LossWeights, PackedBlockStopsAtItsDocumentEnd) {
  // Two documents [0,4) and [4,8), all loss; an anchor at 2 must not learn positions 4.. of the next document.
  const std::vector<std::int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<std::uint8_t> mask(8, 1);
  const std::vector<std::int32_t> cu = {0, 4, 8};
  BlockOptions o{.num_anchors = 6, .block_size = 8, .mask_token_id = kMask};
  auto b = SampleBlocks(ids, mask, cu, o, 7);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->num_valid, 6);  // candidates 0,1,2 and 4,5,6
  auto lt = BuildLossTargets(ids, mask, *b);
  ASSERT_TRUE(lt.ok());
  const int j = 2;  // anchor 2
  ASSERT_EQ(b->anchors[j], 2);
  EXPECT_GT(lt->weights[j * 8 + 1], 0.0f);
  EXPECT_EQ(lt->labels[j * 8 + 1], 4);
  for (int k = 2; k < 8; ++k) EXPECT_EQ(lt->weights[j * 8 + k], 0.0f);
  EXPECT_EQ(b->position_ids[3 * 8], 0) << "anchor 4 starts the second document at position 0";
}

TEST(LossWeights, ExplicitGammaAllowsOtherBlockSizes) {
  const std::vector<std::int32_t> ids(20, 3);
  const std::vector<std::uint8_t> mask(20, 1);
  BlockOptions o{.num_anchors = 2, .block_size = 12, .mask_token_id = kMask};
  auto b = SampleBlocks(ids, mask, {}, o, 1);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(BuildLossTargets(ids, mask, *b).ok());
  auto lt = BuildLossTargets(ids, mask, *b, 6.0);
  ASSERT_TRUE(lt.ok());
  EXPECT_FLOAT_EQ(lt->weights[3], static_cast<float>(std::exp(-2.0 / 6.0)));
  EXPECT_FALSE(BuildLossTargets(ids, mask, *b, -1.0).ok());
}

TEST(AcceptLength, MatchesThePrefixDefinitionOnRandomArgmaxes) {
  std::mt19937_64 rng(std::random_device{}());
  for (int t = 0; t < 300; ++t) {
    const int B = 16;
    Case c = RandomCase(rng, B, t % 2 == 0);
    auto lt = BuildLossTargets(c.ids, c.mask, c.blocks);
    ASSERT_TRUE(lt.ok());
    std::vector<std::int32_t> argmax(c.blocks.tokens.size());
    for (std::size_t s = 0; s < argmax.size(); ++s) {
      argmax[s] = (rng() % 10 < 8 && lt->labels[s] != kIgnoreLabel) ? lt->labels[s] : static_cast<std::int32_t>(rng() % 50);
    }
    auto acc = BlockAcceptLengths(argmax, *lt, c.blocks);
    ASSERT_TRUE(acc.ok()) << acc.status().ToString();
    double sum = 0;
    int valid = 0;
    for (int j = 0; j < c.blocks.num_blocks; ++j) {
      int want = 0;
      if (c.blocks.valid[j]) {
        // Training proxy: 1 + length of the prefix of slots 1.. whose argmax equals the label (token at a_j + k).
        const int a = c.blocks.anchors[j];
        int prefix = 0;
        for (int k = 1; k < B && a + k < c.blocks.doc_end[j] && argmax[j * B + k] == c.ids[a + k]; ++k) ++prefix;
        want = prefix + 1;
        sum += want;
        ++valid;
      }
      EXPECT_EQ((*acc)[j], want) << "block " << j;
    }
    EXPECT_DOUBLE_EQ(MeanAcceptLength(*acc, c.blocks), valid ? sum / valid : 0.0);
  }
}

TEST(AcceptLength, PerfectPredictionsGiveTheFullBlockAndInvalidBlocksZero) {
  std::vector<std::int32_t> varied(40);
  for (int i = 0; i < 40; ++i) varied[i] = i;
  const std::vector<std::uint8_t> mask(40, 1);
  BlockOptions o{.num_anchors = 50, .block_size = 8, .mask_token_id = kMask};
  auto b = SampleBlocks(varied, mask, {}, o, 3);
  ASSERT_TRUE(b.ok());
  auto lt = BuildLossTargets(varied, mask, *b);
  ASSERT_TRUE(lt.ok());
  auto acc = BlockAcceptLengths(lt->labels, *lt, *b);
  ASSERT_TRUE(acc.ok());
  for (int j = 0; j < 50; ++j) {
    if (!b->valid[j]) {
      EXPECT_EQ((*acc)[j], 0);
      continue;
    }
    EXPECT_EQ((*acc)[j], std::min(8, 40 - b->anchors[j])) << "anchor " << b->anchors[j];
  }
  EXPECT_FALSE(BlockAcceptLengths(std::vector<std::int32_t>(3), *lt, *b).ok());
}

}  // namespace
}  // namespace dflash::trainer::data
