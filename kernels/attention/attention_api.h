// The host API of the attention families for their callers (the trainer, the workloads, the benchmark): launches
// a loaded variant (normally the cached tuned winner) of "attention_fwd" or "attention_bwd" on device pointers
// with arbitrary (batch, head, seq) strides, so [B,S,H,D] and [B,H,S,D] both work without copies.
//   forward:  O = softmax(scale * Q K^T + mask) V, LSE = logsumexp per row (natural log, -inf for rows that see
//             nothing, whose O is 0);
//   backward: dQ, dK, dV from dO, O and LSE (dK/dV reduced over each GQA group inside the kernel).
// All tensors bf16 with a contiguous head_dim; LSE fp32 [batch, heads_q, seq_q] contiguous. The backward needs a
// workspace of BackwardWorkspaceBytes() (O(rows): delta, plus the fp32 dQ accumulator when dq_mode = 0).
// Unfinished: looking the winner up in the kernel cache (and the "run dflash-tune warmup ..." error for a missing
// key) belongs to the cache-backed front end; this layer launches the variant it is given and never compiles.
// Who may call it: anyone holding a LoadedVariant of these families. Thread-safety: re-entrant; the caller owns
// the stream ordering of the buffers.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "kernels/attention/attention_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::attention {

// A bf16 tensor [batch, heads, seq, head_dim] by pointer + element strides (head_dim stride 1).
struct TensorRef {
  CUdeviceptr ptr = 0;
  std::int64_t batch_stride = 0, head_stride = 0, seq_stride = 0;
  // Contiguous [B, S, H, D] / [B, H, S, D].
  static TensorRef Bshd(CUdeviceptr p, std::int64_t seq, std::int64_t heads, std::int64_t head_dim);
  static TensorRef Bhsd(CUdeviceptr p, std::int64_t seq, std::int64_t heads, std::int64_t head_dim);
};

struct AttentionArgs {
  ProblemSpec problem;
  TensorRef q, k, v;
  TensorRef o;                   // forward output, backward input
  CUdeviceptr lse = 0;           // fp32 [batch, heads_q, seq_q]; forward output, backward input
  TensorRef dout, dq, dk, dv;    // backward only
  CUdeviceptr cu_seqlens = 0;    // doc_causal: int32 [num_docs + 1], shared by all batches
  CUdeviceptr anchors = 0;       // DFlash: int32 [batch, num_blocks], sorted ascending among valid blocks
  CUdeviceptr block_valid = 0;   // DFlash: uint8 [batch, num_blocks]; 0 = every block valid
  CUdeviceptr doc_start = 0;     // DFlash with problem.doc_bound (and only then): int32 [batch, num_blocks],
                                 // block j's context kv >= doc_start[j] (packed rows)
  float scale = 0.0f;            // 0 = 1 / sqrt(head_dim)
};

std::size_t BackwardWorkspaceBytes(const ProblemSpec& problem, const tuner::Config& config);

// Checks the arguments (InvalidArgument naming the field: null or misaligned pointers, strides that are not
// multiples of 8 elements, a problem the variant's kernels were not built for) and enqueues the kernels on
// `stream`.
Status LaunchForward(const tuner::LoadedVariant& winner, const AttentionArgs& args, CUstream stream);
Status LaunchBackward(const tuner::LoadedVariant& winner, const AttentionArgs& args, CUdeviceptr workspace,
                      std::size_t workspace_bytes, CUstream stream);

}  // namespace dflash::attention
