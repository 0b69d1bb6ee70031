// The host API of the gdn family for its callers (the trainer, the workloads): the gated delta rule forward of
// the Qwen3.5 gated-delta-net layer on device pointers with strides, through a tuned variant.
//   per value head j (key head j / (HV / H)), state S [128 x 128] fp32:
//   S <- exp(g_t) S ; S <- S + k_t (x) beta_t (v_t - S^T k_t) ; o_t = S^T (scale q_t)
//   g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b) (the raw gate form, Qwen3.5's), or g and beta as
//   given (the precomputed form, flash-linear-attention's); q and k L2-normalised (eps 1e-6) in the kernels
//   unless qk_l2norm is false.
// Tensors: q, k [T, H, 128] and v [T, HV, 128] bf16 with element strides (token, head; the last dim
// contiguous, rows 16-byte aligned); raw gates: a, b [T, HV] bf16, A_log, dt_bias [HV] fp32; precomputed gates:
// g, beta [T, HV] fp32 (both forms: token stride ab_stride_t, heads contiguous); o [T, HV, 128] bf16 (strided
// like v); h0 / ht fp32 [N, HV, 128 (K), 128 (V)] or none.
// Sequences are packed: cu_seqlens (host copy, int32 [N + 1], 0 .. T); the API plans the chunks on the host and
// uploads the plan into the caller's workspace (synchronous copy for now).
// Who may call it: anyone holding a LoadedVariant of the gdn family (its functions include every kernel of
// the variant). Thread-safety: re-entrant; the caller owns the stream ordering of the buffers. Variants with
// pieces (piece_chunks > 0) also use the calling thread's StreamFork: at most one open stream capture per thread
// may contain such calls (tuner/stream_fork.h).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "kernels/gdn/chunk_plan.h"
#include "kernels/gdn/gdn_config.h"
#include "tuner/kernel_family.h"

namespace dflash::gdn {

struct GdnArgs {
  CUdeviceptr q = 0, k = 0, v = 0, a = 0, b = 0, A_log = 0, dt_bias = 0, o = 0;
  CUdeviceptr g = 0, beta = 0;  // fp32 [T, HV]: the precomputed gate form; then a, b, A_log, dt_bias stay 0
  CUdeviceptr h0 = 0;  // fp32 [N, HV, 128, 128]; 0 = zero initial states
  CUdeviceptr ht = 0;  // fp32 [N, HV, 128, 128]; 0 = final states not written (may equal h0)
  std::int64_t q_stride_t = 0, q_stride_h = 0, k_stride_t = 0, k_stride_h = 0;  // elements
  std::int64_t v_stride_t = 0, v_stride_h = 0, o_stride_t = 0, o_stride_h = 0;
  std::int64_t ab_stride_t = 0;
  int heads = 0, value_heads = 0;
  std::span<const std::int32_t> cu_seqlens;  // host, [N + 1]
  float scale = 0.f;                         // 0: 128^-1/2
  bool qk_l2norm = true;                     // false: q and k are used as given (already normalised by the caller)

  // Contiguous q, k [T, H, 128], v, o [T, HV, 128], a, b [T, HV].
  static GdnArgs Contiguous(CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr a, CUdeviceptr b,
                            CUdeviceptr A_log, CUdeviceptr dt_bias, CUdeviceptr o, int heads, int value_heads,
                            std::span<const std::int32_t> cu_seqlens);
};

// Checks the arguments (InvalidArgument naming the field): pointers, strides, alignment, heads, cu_seqlens, and
// that exactly one gate form is given.
Status ValidateArgs(const GdnArgs& args);

// Device workspace the chunked forward needs for these sequences with this config (bytes): intermediates
// O(tokens * HV * 128) (gamma, W, U, kd; unfused: V_new and the chunk states h_n, bf16, 32 KiB per chunk and
// head; fused: qg and the chunk's C x C output matrices P; the wgmma pass: P and two row factors a token and
// head instead of qg and kd, kd only for the split pass), the split pass's segment maps and states, with
// pieces the per-sequence states (fp32 [N, HV, 128, 128]), and the uploaded plan.
Result<std::size_t> ChunkedWorkspaceBytes(const Geometry& g, const GdnArgs& args);

// The chunk/segment plan of one call, uploaded into a workspace (device pointers into it).
struct PreparedForward {
  Geometry geometry;
  int num_seqs = 0, num_chunks = 0, num_segments = 0;
  std::int64_t num_tokens = 0;
  CUdeviceptr gcum = 0, w = 0, u = 0, kd = 0, vnew = 0, hbuf = 0, qg = 0, pmat = 0, maps = 0, seg_states = 0;
  CUdeviceptr rowscale = 0;  // the wgmma pass's row factors, fp32 pairs [tokens, HV] (0 otherwise)
  CUdeviceptr chunks = 0, segments = 0, final_index = 0, seq_segments = 0;
  // piece_chunks > 0: the pieces (ranges of the uploaded chunk / segment lists) and the per-sequence state
  // buffer fp32 [N, HV, 128, 128] that carries each sequence's state from piece to piece.
  std::vector<PieceRange> pieces;
  CUdeviceptr piece_states = 0;
};
// Plans the chunks for args.cu_seqlens and uploads the plan (synchronous copy: no work in flight may be
// reading this workspace's plan for another call).
Result<PreparedForward> PrepareChunkedForward(const Geometry& g, const GdnArgs& args, CUdeviceptr workspace,
                                              std::size_t workspace_bytes);
// Launches the kernels of a prepared call on `stream` (no host synchronisation; graph-capturable). With pieces,
// the fused passes run on the calling thread's StreamFork stream, forked from and joined back into `stream`
// within the call, so callers still see all of the work ordered on `stream`.
Status LaunchPreparedForward(const tuner::LoadedVariant& winner, const PreparedForward& prepared,
                             const GdnArgs& args, CUstream stream);
// Prepare + launch.
Status LaunchChunkedForward(const tuner::LoadedVariant& winner, const GdnArgs& args, CUdeviceptr workspace,
                            std::size_t workspace_bytes, CUstream stream);

// Workspace of the recurrent kernel (the device copy of cu_seqlens).
std::size_t RecurrentWorkspaceBytes(const GdnArgs& args);
// Runs the token-by-token kernel (decoding against stored states; the independent check of the chunked path).
Status LaunchRecurrent(const tuner::LoadedVariant& winner, const GdnArgs& args, CUdeviceptr workspace,
                       std::size_t workspace_bytes, CUstream stream);

}  // namespace dflash::gdn
