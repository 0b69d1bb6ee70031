// Host bookkeeping of the chunked gdn forward: chunk lists for packed sequences and the segment split of the
// state recurrence (CPU only).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/gdn/chunk_plan.h"

namespace dflash::gdn {
namespace {

TEST(GdnChunkPlan, PackedSequencesGetChunksThatCoverEveryTokenOnce) {
  const std::vector<std::int32_t> cu{0, 1, 64, 128, 193, 1193};  // lengths 1, 63, 64, 65, 1000
  Result<ChunkPlan> p = PlanChunks(cu, 64);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->num_seqs, 5);
  EXPECT_EQ(p->num_tokens, 1193);
  // 1 + 1 + 1 + 2 + 16 chunks
  ASSERT_EQ(p->chunks.size(), 21u);
  EXPECT_EQ(p->seq_first_chunk, (std::vector<std::int32_t>{0, 1, 2, 3, 5, 21}));
  std::vector<int> seen(1193, 0);
  for (std::size_t i = 0; i < p->chunks.size(); ++i) {
    const ChunkDesc& c = p->chunks[i];
    ASSERT_GT(c.length, 0);
    ASSERT_LE(c.length, 64);
    EXPECT_GE(c.token_start, cu[c.seq]);
    EXPECT_LE(c.token_start + c.length, cu[c.seq + 1]) << "chunk " << i << " crosses its sequence's end";
    for (int t = c.token_start; t < c.token_start + c.length; ++t) ++seen[t];
  }
  for (int t = 0; t < 1193; ++t) ASSERT_EQ(seen[t], 1) << "token " << t;
  EXPECT_EQ(p->chunks[3].length, 64);  // seq 3 (65 tokens): 64 + 1
  EXPECT_EQ(p->chunks[4].length, 1);
  EXPECT_EQ(p->chunks[4].token_start, 192);
  EXPECT_EQ(p->chunks[20].length, 1000 - 15 * 64);
}

TEST(GdnChunkPlan, EmptySequencesOwnNoChunkButKeepTheirPlace) {
  const std::vector<std::int32_t> cu{0, 0, 5, 5, 70};
  Result<ChunkPlan> p = PlanChunks(cu, 32);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->seq_first_chunk, (std::vector<std::int32_t>{0, 0, 1, 1, 4}));
  ASSERT_EQ(p->chunks.size(), 4u);
  EXPECT_EQ(p->chunks[0].seq, 1);
  EXPECT_EQ(p->chunks[1].seq, 3);
}

TEST(GdnChunkPlan, BadInputsAreRejectedWithAReason) {
  EXPECT_EQ(PlanChunks(std::vector<std::int32_t>{0, 10}, 48 + 1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(PlanChunks(std::vector<std::int32_t>{0, 10}, 256).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(PlanChunks(std::vector<std::int32_t>{1, 10}, 64).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(PlanChunks(std::vector<std::int32_t>{0}, 64).status().code(), ErrorCode::kInvalidArgument);
  Result<ChunkPlan> dec = PlanChunks(std::vector<std::int32_t>{0, 10, 5}, 64);
  ASSERT_FALSE(dec.ok());
  EXPECT_NE(dec.status().message().find("decreases"), std::string::npos);
}

TEST(GdnSegmentPlan, WholeSequencesStartFromTheirInitialStates) {
  const std::vector<std::int32_t> cu{0, 100, 100, 300};
  ChunkPlan p = *PlanChunks(cu, 64);
  Result<SegmentPlan> s = PlanSegments(p, 0, SegmentStart::kZeroOrInitial, true);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->segments.size(), 3u);  // the empty sequence keeps a segment: its final state is h0
  EXPECT_EQ(s->segments[1].token_start, 100);
  EXPECT_EQ(s->segments[1].token_end, 100);
  for (int n = 0; n < 3; ++n) {
    EXPECT_EQ(s->segments[n].h0_index, n);
    EXPECT_EQ(s->final_state_index[n], n);
  }
  EXPECT_EQ(s->segments[2].first_chunk, 2);
  EXPECT_EQ(s->segments[2].token_end, 300);
  Result<SegmentPlan> z = PlanSegments(p, 0, SegmentStart::kZeroOrInitial, false);
  for (const SegmentDesc& d : z->segments) EXPECT_EQ(d.h0_index, -1);
}

TEST(GdnSegmentPlan, SplitSegmentsTileEachSequenceAndOnlyTheLastWritesTheFinalState) {
  const std::vector<std::int32_t> cu{0, 8192, 8192 + 1000};
  ChunkPlan p = *PlanChunks(cu, 64);  // 128 + 16 chunks
  Result<SegmentPlan> s = PlanSegments(p, 16, SegmentStart::kSegmentStates, false);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->segments.size(), 8u + 1u);
  EXPECT_EQ(s->seq_first_segment, (std::vector<std::int32_t>{0, 8, 9}));
  std::int32_t at = 0;
  for (std::size_t i = 0; i < s->segments.size(); ++i) {
    const SegmentDesc& d = s->segments[i];
    EXPECT_EQ(d.token_start, at) << i;
    EXPECT_EQ(d.h0_index, static_cast<std::int32_t>(i));
    EXPECT_EQ(p.chunks[d.first_chunk].token_start, d.token_start);
    at = d.token_end;
  }
  EXPECT_EQ(at, 9192);
  EXPECT_EQ(s->segments[7].token_end, 8192);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(s->final_state_index[i], i == 7 ? 0 : (i == 8 ? 1 : -1)) << i;
}

TEST(GdnSegmentPlan, SegmentLengthIsChosenToFillTheGpu) {
  ChunkPlan one_long = *PlanChunks(std::vector<std::int32_t>{0, 8192}, 64);
  // 48 heads x 4 column slices = 192 blocks for the whole sequence; ask for 1024: about 6 segments.
  const int s = ChooseSegmentChunks(one_long, 48, 4, 1024);
  EXPECT_EQ(s, 32);
  EXPECT_EQ(ChooseSegmentChunks(one_long, 48, 4, 100), 0) << "already enough blocks";
  ChunkPlan many = *PlanChunks(std::vector<std::int32_t>{0, 4096, 8192, 12288, 16384}, 64);
  EXPECT_EQ(ChooseSegmentChunks(many, 48, 4, 512), 0);
}

}  // namespace
}  // namespace dflash::gdn
