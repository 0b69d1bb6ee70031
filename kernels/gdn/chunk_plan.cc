#include "kernels/gdn/chunk_plan.h"

#include <algorithm>
#include <limits>
#include <string>

namespace dflash::gdn {

Result<ChunkPlan> PlanChunks(std::span<const std::int32_t> cu_seqlens, int chunk_len) {
  if (chunk_len < 16 || chunk_len > 128 || chunk_len % 16 != 0) {
    return InvalidArgument("gdn: chunk length " + std::to_string(chunk_len) + " is not a multiple of 16 in 16..128");
  }
  if (cu_seqlens.size() < 2) return InvalidArgument("gdn: cu_seqlens needs at least 2 entries (one sequence)");
  if (cu_seqlens[0] != 0) return InvalidArgument("gdn: cu_seqlens[0] is " + std::to_string(cu_seqlens[0]) + ", not 0");
  ChunkPlan plan;
  plan.chunk_len = chunk_len;
  plan.num_seqs = static_cast<int>(cu_seqlens.size() - 1);
  plan.seq_first_chunk.reserve(cu_seqlens.size());
  for (int n = 0; n < plan.num_seqs; ++n) {
    const std::int32_t bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
    if (eos < bos) {
      return InvalidArgument("gdn: cu_seqlens decreases at sequence " + std::to_string(n) + " (" +
                             std::to_string(bos) + " > " + std::to_string(eos) + ")");
    }
    plan.seq_first_chunk.push_back(static_cast<std::int32_t>(plan.chunks.size()));
    for (std::int64_t t = bos; t < eos; t += chunk_len) {
      ChunkDesc c;
      c.token_start = static_cast<std::int32_t>(t);
      c.length = static_cast<std::int32_t>(std::min<std::int64_t>(chunk_len, eos - t));
      c.seq = n;
      plan.chunks.push_back(c);
    }
  }
  plan.seq_first_chunk.push_back(static_cast<std::int32_t>(plan.chunks.size()));
  plan.num_tokens = cu_seqlens.back();
  plan.cu_seqlens.assign(cu_seqlens.begin(), cu_seqlens.end());
  return plan;
}

Result<SegmentPlan> PlanSegments(const ChunkPlan& plan, int segment_chunks, SegmentStart start,
                                 bool has_initial_state) {
  if (segment_chunks < 0) return InvalidArgument("gdn: negative segment length");
  if (plan.seq_first_chunk.size() != static_cast<std::size_t>(plan.num_seqs) + 1 ||
      plan.cu_seqlens.size() != static_cast<std::size_t>(plan.num_seqs) + 1) {
    return InvalidArgument("gdn: chunk plan is inconsistent (seq_first_chunk size)");
  }
  SegmentPlan out;
  out.segment_chunks = segment_chunks;
  out.seq_first_segment.reserve(plan.num_seqs + 1);
  for (int n = 0; n < plan.num_seqs; ++n) {
    out.seq_first_segment.push_back(static_cast<std::int32_t>(out.segments.size()));
    const int c0 = plan.seq_first_chunk[n], c1 = plan.seq_first_chunk[n + 1];
    const int step = segment_chunks == 0 ? std::max(1, c1 - c0) : segment_chunks;
    // An empty sequence still gets one (empty) segment: the state pass then writes its final state = h0.
    const std::int32_t empty_at = plan.cu_seqlens[n];
    for (int c = c0; c < c1 || (c == c0 && c0 == c1); c += step) {
      SegmentDesc s;
      s.first_chunk = c;
      if (c0 == c1) {
        s.token_start = s.token_end = empty_at;
      } else {
        const int last = std::min(c + step, c1) - 1;
        s.token_start = plan.chunks[c].token_start;
        s.token_end = plan.chunks[last].token_start + plan.chunks[last].length;
      }
      if (start == SegmentStart::kSegmentStates) {
        s.h0_index = static_cast<std::int32_t>(out.segments.size());
      } else {
        s.h0_index = has_initial_state ? n : -1;
      }
      out.segments.push_back(s);
      out.final_state_index.push_back(-1);
      if (c0 == c1) break;
    }
    out.final_state_index.back() = n;
  }
  out.seq_first_segment.push_back(static_cast<std::int32_t>(out.segments.size()));
  return out;
}

Result<PiecePlan> PlanPieces(const ChunkPlan& plan, int piece_chunks, bool has_initial_state) {
  if (piece_chunks < 1) return InvalidArgument("gdn: piece length must be at least one chunk");
  if (plan.seq_first_chunk.size() != static_cast<std::size_t>(plan.num_seqs) + 1) {
    return InvalidArgument("gdn: chunk plan is inconsistent (seq_first_chunk size)");
  }
  PiecePlan out;
  out.piece_chunks = piece_chunks;
  out.chunks.reserve(plan.chunks.size());
  for (int p = 0;; ++p) {
    PieceRange piece;
    piece.chunk_first = static_cast<std::int32_t>(out.chunks.size());
    piece.segment_first = static_cast<std::int32_t>(out.segments.size());
    for (int n = 0; n < plan.num_seqs; ++n) {
      const std::int64_t c0 = plan.seq_first_chunk[n] + static_cast<std::int64_t>(p) * piece_chunks;
      const std::int64_t c1 = std::min<std::int64_t>(c0 + piece_chunks, plan.seq_first_chunk[n + 1]);
      if (c0 >= c1) continue;
      SegmentDesc s;
      s.first_chunk = static_cast<std::int32_t>(out.chunks.size());
      s.token_start = plan.chunks[c0].token_start;
      s.token_end = plan.chunks[c1 - 1].token_start + plan.chunks[c1 - 1].length;
      s.h0_index = p > 0 || has_initial_state ? n : -1;
      out.segments.push_back(s);
      out.final_state_index.push_back(n);
      out.chunks.insert(out.chunks.end(), plan.chunks.begin() + c0, plan.chunks.begin() + c1);
    }
    piece.chunk_count = static_cast<std::int32_t>(out.chunks.size()) - piece.chunk_first;
    piece.segment_count = static_cast<std::int32_t>(out.segments.size()) - piece.segment_first;
    if (piece.segment_count == 0) break;  // no sequence reaches this piece
    out.pieces.push_back(piece);
  }
  return out;
}

int ChooseSegmentChunks(const ChunkPlan& plan, int value_heads, int column_slices, int target_blocks) {
  const std::int64_t per_segment = static_cast<std::int64_t>(value_heads) * column_slices;
  if (per_segment <= 0 || plan.num_seqs <= 0) return 0;
  const std::int64_t whole = per_segment * plan.num_seqs;
  if (whole >= target_blocks) return 0;
  int max_chunks = 0;
  for (int n = 0; n < plan.num_seqs; ++n) {
    max_chunks = std::max(max_chunks, plan.seq_first_chunk[n + 1] - plan.seq_first_chunk[n]);
  }
  const std::int64_t segments_per_seq = (target_blocks + whole - 1) / whole;
  std::int64_t want = (max_chunks + segments_per_seq - 1) / segments_per_seq;
  int s = 2;
  while (s < want) s *= 2;
  if (s >= max_chunks) return 0;  // one segment would hold the whole sequence anyway
  return s;
}

}  // namespace dflash::gdn
