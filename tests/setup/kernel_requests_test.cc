// The kernel problems CachedKernelOps derives at each launch (OpShape of the row it runs: rows shorter than
// max_length, fewer anchors, padded rows and packed rows of any document count) fall exactly into the buckets of
// the requests of the preset's training setup (what `dflash-tune warmup --preset` tunes and dflash-train resolves
// before its first step) — checked in both directions.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "setup/kernel_requests.h"
#include "setup/presets.h"

namespace dflash::setup {
namespace {

using Key = std::pair<std::string, std::string>;  // family, bucketed problem

Key BucketKey(const tuner::KernelFamily& family, const tuner::Problem& problem) {
  auto bucket = family.Bucket(problem);
  EXPECT_TRUE(bucket.ok()) << family.name() << " " << problem.dump() << ": " << bucket.status().ToString();
  return {std::string(family.name()), bucket.ok() ? bucket->dump() : ""};
}

std::set<Key> PresetKeys(const std::string& preset) {
  auto training = Preset(preset);
  EXPECT_TRUE(training.ok()) << training.status().ToString();
  auto items = KernelRequestsFor(*training);
  EXPECT_TRUE(items.ok()) << items.status().ToString();
  std::set<Key> keys;
  for (const auto& item : items->requests) keys.insert(BucketKey(*item.family, item.problem));
  return keys;
}

// The model sizes of a preset, written out by hand from the spec (dflash-training.md) and the tiny preset's files.
struct ModelShapes {
  std::int64_t tokens, anchors, window, draft_heads, draft_kv, draft_dim;
  std::int64_t target_heads, target_kv, target_dim, gdn_heads, gdn_value_heads;
  std::int64_t hidden, vocab, intermediate;
};

// The shapes training runs with rows of `tokens` tokens and `anchors` blocks use: padded rows (one document) and
// packed rows (`docs` documents).
std::vector<OpShape> RunShapes(const ModelShapes& s, std::int64_t tokens, std::int64_t anchors, std::int64_t docs) {
  std::vector<OpShape> shapes;
  const std::int64_t channels = 2 * s.gdn_heads * 128 + s.gdn_value_heads * 128;
  for (const std::int64_t d : {std::int64_t{1}, docs}) {
    const bool packed = d > 1;
    shapes.push_back(OpShape::DraftAttention(tokens, anchors, 16, 0, s.draft_heads, s.draft_kv, s.draft_dim, packed));
    shapes.push_back(
        OpShape::DraftAttention(tokens, anchors, 16, s.window, s.draft_heads, s.draft_kv, s.draft_dim, packed));
    shapes.push_back(OpShape::CausalAttention(tokens, d, s.target_heads, s.target_kv, s.target_dim));
    shapes.push_back(OpShape::Conv1d(tokens, channels, d));
    shapes.push_back(
        OpShape::GatedDeltaRule(tokens, static_cast<int>(s.gdn_heads), static_cast<int>(s.gdn_value_heads), d));
  }
  // Row-wise, the same for both layouts: the target's (zero-centred) norms over the hidden rows, with and without
  // the residual add, its q and k norms, the delta net's gated norm (128 values a head); the loss over every block
  // row (a row always holds the setup's number of blocks, invalid ones padded) in chunks of 2048.
  const auto zc = rmsnorm::Kind::kZeroCentred;
  const auto bf16 = rmsnorm::WeightDtype::kBf16;
  shapes.push_back(OpShape::RmsNorm(tokens, s.hidden, zc, false, false, bf16));
  shapes.push_back(OpShape::RmsNorm(tokens, s.hidden, zc, true, false, bf16));
  shapes.push_back(OpShape::RmsNorm(tokens * s.target_heads, s.target_dim, zc, false, false, bf16));
  shapes.push_back(OpShape::RmsNorm(tokens * s.target_kv, s.target_dim, zc, false, false, bf16));
  shapes.push_back(OpShape::RmsNorm(tokens * s.gdn_value_heads, 128, rmsnorm::Kind::kStandard, false, true, bf16));
  // The drafter's trained norms (standard, fp32 master weights): the context's, the block rows' (input,
  // post-attention, final), q over the block rows' heads, k over the context's and the block rows' kv heads.
  const std::int64_t block_rows = s.anchors * 16;
  const auto standard = rmsnorm::Kind::kStandard;
  const auto fp32 = rmsnorm::WeightDtype::kFp32;
  shapes.push_back(OpShape::TrainedRmsNorm(tokens, s.hidden, standard, fp32));
  shapes.push_back(OpShape::TrainedRmsNorm(block_rows, s.hidden, standard, fp32));
  shapes.push_back(OpShape::TrainedRmsNorm(block_rows * s.draft_heads, s.draft_dim, standard, fp32));
  shapes.push_back(OpShape::TrainedRmsNorm((tokens + block_rows) * s.draft_kv, s.draft_dim, standard, fp32));
  // The rotary embeddings: the target's q and k (both presets rotate a quarter of each head: partial_rotary_factor
  // 0.25), the drafter's q over the block rows and k over the context and block rows (every dim).
  shapes.push_back(OpShape::Swiglu(tokens, s.intermediate));  // the target MLP's silu(gate) * up
  shapes.push_back(OpShape::Rope(tokens, s.target_heads, s.target_dim, s.target_dim / 4));
  shapes.push_back(OpShape::Rope(tokens, s.target_kv, s.target_dim, s.target_dim / 4));
  shapes.push_back(OpShape::Rope(block_rows, s.draft_heads, s.draft_dim, s.draft_dim));
  shapes.push_back(OpShape::Rope(tokens + block_rows, s.draft_kv, s.draft_dim, s.draft_dim));
  for (std::int64_t start = 0; start < block_rows; start += 2048) {
    shapes.push_back(OpShape::CrossEntropy(std::min<std::int64_t>(2048, block_rows - start), s.vocab));
  }
  return shapes;
}

std::set<Key> RequestKeys(const std::vector<OpShape>& shapes) {
  std::set<Key> keys;
  for (const auto& shape : shapes) {
    for (const auto& r : KernelRequestsFor(shape)) keys.insert(BucketKey(*r.family, r.problem));
  }
  return keys;
}

void ExpectSameKeys(const std::set<Key>& got, const std::set<Key>& want) {
  for (const auto& k : got) EXPECT_TRUE(want.count(k)) << "not warmed by the preset: " << k.first << " " << k.second;
  for (const auto& k : want) EXPECT_TRUE(got.count(k)) << "warmed but never used: " << k.first << " " << k.second;
}

TEST(KernelRequests, TinyPresetWarmsEveryKeyTheOpsUse) {
  const ModelShapes tiny{512, 16, 64, 4, 2, 64, 4, 2, 64, 2, 4, 256, 1024, 512};
  ExpectSameKeys(RequestKeys(RunShapes(tiny, 512, 16, 3)), PresetKeys("tiny"));
  // A shorter row, fewer valid anchors and more documents fall in the same buckets.
  ExpectSameKeys(RequestKeys(RunShapes(tiny, 300, 12, 8)), PresetKeys("tiny"));
}

TEST(KernelRequests, Dflash27bPresetWarmsEveryKeyTheOpsUse) {
  const ModelShapes big{4096, 512, 2048, 32, 8, 128, 24, 4, 256, 16, 48, 5120, 248320, 17408};
  ExpectSameKeys(RequestKeys(RunShapes(big, 4096, 512, 2)), PresetKeys("dflash-27b"));
  ExpectSameKeys(RequestKeys(RunShapes(big, 3000, 300, 5)), PresetKeys("dflash-27b"));
}

TEST(KernelRequests, DraftAttentionNeedsForwardAndBackwardOfTheSameProblem) {
  const auto requests = KernelRequestsFor(OpShape::DraftAttention(100, 4, 16, 32, 4, 2, 128, false));
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].family->name(), "attention_fwd");
  EXPECT_EQ(requests[1].family->name(), "attention_bwd");
  EXPECT_EQ(requests[0].problem, requests[1].problem);
  EXPECT_EQ(requests[0].problem["mask"], "dflash_sliding");
  EXPECT_EQ(requests[0].problem["window"], 32);
  EXPECT_EQ(requests[0].problem["seq_q"], 64);
  EXPECT_EQ(requests[0].problem["seq_kv"], 164);
  EXPECT_FALSE(
      KernelRequestsFor(OpShape::DraftAttention(100, 4, 16, 0, 4, 2, 128, false))[0].problem.contains("window"));
}

TEST(KernelRequests, PackedRowsUseTheDocBoundVariantOfTheDraftAttention) {
  const auto padded = KernelRequestsFor(OpShape::DraftAttention(100, 4, 16, 0, 4, 2, 128, false));
  const auto packed = KernelRequestsFor(OpShape::DraftAttention(100, 4, 16, 0, 4, 2, 128, true));
  ASSERT_EQ(packed.size(), 2u);
  EXPECT_EQ(packed[0].problem["doc_bound"], true);
  EXPECT_EQ(packed[1].problem["doc_bound"], true);
  EXPECT_FALSE(padded[0].problem.contains("doc_bound"));
  // The provenance table and errors say which keys are the packed rows'.
  EXPECT_EQ(packed[1].operation, "draft_attention (packed rows) backward");
  EXPECT_EQ(padded[1].operation, "draft_attention backward");
  EXPECT_EQ(KernelRequestsFor(OpShape::Conv1d(512, 256, 3))[0].operation, "conv1d (packed rows)");
  EXPECT_NE(BucketKey(*packed[1].family, packed[1].problem), BucketKey(*padded[1].family, padded[1].problem));
}

TEST(KernelRequests, PackedRowsOfAnyDocumentCountShareThePresetKey) {
  EXPECT_EQ(KernelRequestsFor(OpShape::CausalAttention(512, 1, 4, 2, 64))[0].problem["mask"], "causal");
  const auto packed = KernelRequestsFor(OpShape::CausalAttention(512, 3, 4, 2, 64))[0].problem;
  EXPECT_EQ(packed["mask"], "doc_causal");
  EXPECT_EQ(packed["num_docs"], kMinPackedDocs);
  // Any number of documents uses the same key (every variant serves any count): no missing key mid-run.
  EXPECT_EQ(KernelRequestsFor(OpShape::CausalAttention(512, 11, 4, 2, 64))[0].problem["num_docs"], kMinPackedDocs);
  EXPECT_EQ(KernelRequestsFor(OpShape::Conv1d(512, 256, 40))[0].problem["num_seqs"], kMinPackedDocs);
  EXPECT_EQ(KernelRequestsFor(OpShape::GatedDeltaRule(512, 1, 2, 3))[0].problem["num_seqs"], kMinPackedDocs);
  EXPECT_EQ(KernelRequestsFor(OpShape::GatedDeltaRule(512, 1, 2, 1))[0].problem["num_seqs"], 1);
}

}  // namespace
}  // namespace dflash::setup
