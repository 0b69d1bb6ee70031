// Host-side bookkeeping of the chunked gated-delta-net forward for packed variable-length sequences: which
// chunk of which sequence each block of the WY/output kernels handles, and how each sequence's chunk recurrence
// is cut into segments for the parallel state pass, and (PlanPieces) how the chunks are re-listed piece-major so
// that prep of one piece overlaps the state pass of the previous one. The descriptors are laid out exactly as the
// kernels read them (int4), so a plan is uploaded as is.
// Who may call: the gdn launchers, workloads and tests (pure CPU code, no GPU needed).
// Thread-safety: pure functions over their arguments.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace dflash::gdn {

// One chunk: rows token_start .. token_start + length of sequence `seq` (length <= chunk_len, > 0).
struct ChunkDesc {
  std::int32_t token_start = 0;
  std::int32_t length = 0;
  std::int32_t seq = 0;
  std::int32_t unused = 0;
};
static_assert(sizeof(ChunkDesc) == 16, "read as int4 by the kernels");

// One segment of a sequence's chunk recurrence: tokens [token_start, token_end), whose first chunk has global
// index first_chunk; the state pass starts it from state h0_index (-1: zero state).
struct SegmentDesc {
  std::int32_t token_start = 0;
  std::int32_t token_end = 0;
  std::int32_t first_chunk = 0;
  std::int32_t h0_index = -1;
};
static_assert(sizeof(SegmentDesc) == 16, "read as int4 by the kernels");

struct ChunkPlan {
  int chunk_len = 0;
  int num_seqs = 0;
  std::int64_t num_tokens = 0;
  std::vector<ChunkDesc> chunks;              // in token order; index = global chunk index
  std::vector<std::int32_t> seq_first_chunk;  // [num_seqs + 1]: chunks of seq n are [first[n], first[n+1])
  std::vector<std::int32_t> cu_seqlens;       // [num_seqs + 1], as given
};

// Validates cu_seqlens (cu[0] == 0, non-decreasing, total < 2^31) and chunk_len (16..128, multiple of 16), and
// lists the chunks. Empty sequences own no chunk.
Result<ChunkPlan> PlanChunks(std::span<const std::int32_t> cu_seqlens, int chunk_len);

// Where the state pass starts each segment from.
enum class SegmentStart {
  kZeroOrInitial,  // one segment per sequence: h0_index = seq when has_initial_state, else -1
  kSegmentStates,  // parallel split: h0_index = the segment's own index (into the combined segment states)
};

struct SegmentPlan {
  int segment_chunks = 0;                          // chunks per segment (0: whole sequences)
  std::vector<SegmentDesc> segments;               // in token order
  std::vector<std::int32_t> seq_first_segment;     // [num_seqs + 1]
  std::vector<std::int32_t> final_state_index;     // per segment: its sequence if it is the last one, else -1
};

// Cuts every sequence's chunks into segments of `segment_chunks` chunks (the last one shorter); 0 keeps whole
// sequences (the sequential state pass). Every sequence, even an empty one, gets at least one segment, so its
// final state is always written.
Result<SegmentPlan> PlanSegments(const ChunkPlan& plan, int segment_chunks, SegmentStart start,
                                 bool has_initial_state);

// The call cut into pieces for overlapping prep with the fused state pass (piece_chunks > 0): piece p holds the
// p-th run of `piece_chunks` chunks of every sequence that has one. The chunks are re-listed piece-major, so a
// piece's chunks are one contiguous range (prep runs over it; its P matrices land at the same indices) and each
// sequence's chunks within a piece are contiguous (one segment). Every segment reads its start state from and
// writes its final state to one per-sequence state buffer (final_state_index = the sequence): the first piece
// of a sequence starts from that buffer's initial state (h0_index = seq) when has_initial_state, else from zero
// (-1); later pieces from the state the previous piece left there.
struct PieceRange {
  std::int32_t chunk_first = 0, chunk_count = 0;      // into PiecePlan::chunks
  std::int32_t segment_first = 0, segment_count = 0;  // into PiecePlan::segments
};
struct PiecePlan {
  int piece_chunks = 0;
  std::vector<ChunkDesc> chunks;                 // piece-major, each sequence's chunks in token order
  std::vector<SegmentDesc> segments;             // piece-major; first_chunk indexes `chunks`
  std::vector<std::int32_t> final_state_index;   // per segment: its sequence
  std::vector<PieceRange> pieces;                // the non-empty pieces in order
};
Result<PiecePlan> PlanPieces(const ChunkPlan& plan, int piece_chunks, bool has_initial_state);

// A segment length (in chunks) that gives the state pass about `target_blocks` blocks in flight:
// 0 (no split) when whole sequences already give that many, else the smallest power of two >= 2 that does not
// exceed the target. `column_slices` is how many column blocks each (segment, head) runs as.
int ChooseSegmentChunks(const ChunkPlan& plan, int value_heads, int column_slices, int target_blocks);

}  // namespace dflash::gdn
