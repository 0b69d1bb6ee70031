// Host bookkeeping of the chunked gdn forward: chunk lists for packed sequences and the segment split of the
// state recurrence, and the pieces of the prep / state-pass overlap (CPU only).
#include <gtest/gtest.h>

#include <random>
#include <string>
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

namespace dflash::gdn {
namespace {

// Runs a piece plan the way the launcher does (pieces in order; within a piece every segment walks its chunks
// from first_chunk) and checks, per sequence, that its tokens are visited exactly once, in order, in chunks
// that the plan's prep range of the same piece covers, starting from the right state.
void CheckPiecePlanRunsEverySequenceInOrder(const std::vector<std::int32_t>& cu, int chunk, int piece_chunks,
                                            bool h0) {
  SCOPED_TRACE("chunk " + std::to_string(chunk) + " piece " + std::to_string(piece_chunks));
  Result<ChunkPlan> plan = PlanChunks(cu, chunk);
  ASSERT_TRUE(plan.ok());
  Result<PiecePlan> pp = PlanPieces(*plan, piece_chunks, h0);
  ASSERT_TRUE(pp.ok()) << pp.status().ToString();
  const int n = static_cast<int>(cu.size()) - 1;
  ASSERT_EQ(pp->chunks.size(), plan->chunks.size());
  ASSERT_EQ(pp->final_state_index.size(), pp->segments.size());
  std::vector<std::int32_t> next_token(cu.begin(), cu.end() - 1);  // per sequence: the next token to run
  std::vector<bool> started(n, false);
  std::vector<int> pieces_of(n, 0);
  std::int32_t chunk_at = 0, segment_at = 0;
  for (const PieceRange& piece : pp->pieces) {
    ASSERT_EQ(piece.chunk_first, chunk_at) << "prep ranges tile the chunk list in order";
    ASSERT_EQ(piece.segment_first, segment_at);
    ASSERT_GT(piece.segment_count, 0);
    chunk_at += piece.chunk_count;
    segment_at += piece.segment_count;
    std::vector<bool> seq_in_piece(n, false);
    for (int s = piece.segment_first; s < piece.segment_first + piece.segment_count; ++s) {
      const SegmentDesc& seg = pp->segments[s];
      const int seq = pp->final_state_index[s];
      ASSERT_GE(seq, 0);
      ASSERT_LT(seq, n);
      EXPECT_FALSE(seq_in_piece[seq]) << "two segments of one sequence in one launch would share its state";
      seq_in_piece[seq] = true;
      EXPECT_EQ(seg.h0_index, started[seq] || h0 ? seq : -1) << "segment " << s;
      EXPECT_EQ(seg.token_start, next_token[seq]) << "sequence " << seq << " resumes where it stopped";
      EXPECT_LE(seg.token_end - seg.token_start, static_cast<std::int64_t>(piece_chunks) * chunk);
      // The fused kernel reads P of chunk first_chunk + j for the j-th chunk of its segment.
      int j = 0;
      for (std::int32_t t = seg.token_start; t < seg.token_end; t += chunk, ++j) {
        const int c = seg.first_chunk + j;
        ASSERT_GE(c, piece.chunk_first);
        ASSERT_LT(c, piece.chunk_first + piece.chunk_count) << "a chunk prepared by another piece's prep";
        EXPECT_EQ(pp->chunks[c].token_start, t);
        EXPECT_EQ(pp->chunks[c].seq, seq);
      }
      next_token[seq] = seg.token_end;
      started[seq] = true;
      ++pieces_of[seq];
    }
  }
  EXPECT_EQ(chunk_at, static_cast<std::int32_t>(pp->chunks.size()));
  EXPECT_EQ(segment_at, static_cast<std::int32_t>(pp->segments.size()));
  for (int seq = 0; seq < n; ++seq) {
    EXPECT_EQ(next_token[seq], cu[seq + 1]) << "sequence " << seq << " ran to its end";
    const int chunks = (cu[seq + 1] - cu[seq] + chunk - 1) / chunk;
    EXPECT_EQ(pieces_of[seq], (chunks + piece_chunks - 1) / piece_chunks) << "sequence " << seq;
  }
}

TEST(GdnPiecePlan, PiecesRunEverySequenceOnceInOrderFromTheRightState) {
  // Lengths 0, 1, 63, 64, 65, 1000, 8192 and an empty one at the end.
  const std::vector<std::int32_t> fixed{0, 0, 1, 64, 128, 193, 1193, 9385, 9385};
  for (int chunk : {32, 64})
    for (int piece : {1, 2, 3, 64})
      for (bool h0 : {false, true}) CheckPiecePlanRunsEverySequenceInOrder(fixed, chunk, piece, h0);
  std::mt19937 rng(20261130);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::int32_t> cu{0};
    const int seqs = 1 + static_cast<int>(rng() % 9);
    for (int s = 0; s < seqs; ++s) cu.push_back(cu.back() + static_cast<std::int32_t>(rng() % 5000));
    CheckPiecePlanRunsEverySequenceInOrder(cu, 32, 1 + static_cast<int>(rng() % 70), rng() % 2 == 0);
  }
}

TEST(GdnPiecePlan, OneLongSequenceIsCutIntoPiecesOfTheGivenLength) {
  const std::vector<std::int32_t> cu{0, 8192};
  Result<ChunkPlan> plan = PlanChunks(cu, 32);
  ASSERT_TRUE(plan.ok());
  Result<PiecePlan> pp = PlanPieces(*plan, 64, false);
  ASSERT_TRUE(pp.ok());
  ASSERT_EQ(pp->pieces.size(), 4u);  // 256 chunks of 32
  for (const PieceRange& p : pp->pieces) {
    EXPECT_EQ(p.chunk_count, 64);
    EXPECT_EQ(p.segment_count, 1);
  }
  EXPECT_EQ(pp->segments[0].h0_index, -1);
  EXPECT_EQ(pp->segments[3].h0_index, 0);
  EXPECT_EQ(pp->segments[3].token_start, 3 * 64 * 32);
  EXPECT_EQ(PlanPieces(*plan, 0, false).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::gdn
