#include "kernels/attention/attention_api.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention/attention_config.h"
#include "kernels/attention/attention_params.cuh"
#include "kernels/common/tensor_map.h"
#include "tuner/gpu_runtime.h"

namespace dflash::attention {
namespace {

Status Invalid(const std::string& what) { return InvalidArgument("attention launch: " + what); }

std::size_t AlignUp(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

Status CheckTensor(const TensorRef& t, const char* name) {
  if (t.ptr == 0) return Invalid(std::string(name) + " is a null pointer");
  if (t.ptr % 16 != 0) return Invalid(std::string(name) + " must be 16-byte aligned");
  if (t.batch_stride % 8 || t.head_stride % 8 || t.seq_stride % 8)
    return Invalid(std::string(name) + " strides must be multiples of 8 elements (16-byte rows)");
  if (t.batch_stride < 0 || t.head_stride < 0 || t.seq_stride < 0) return Invalid(std::string(name) + " has a negative stride");
  return Status::Ok();
}

void SetStrides(const TensorRef& t, long long& b, long long& h, long long& s) {
  b = t.batch_stride;
  h = t.head_stride;
  s = t.seq_stride;
}

Result<dflash_attn::AttnParams> MakeParams(const AttentionArgs& a, Direction dir) {
  const ProblemSpec& p = a.problem;
  DFLASH_RETURN_IF_ERROR(Validate(p, dir).WithContext("attention launch"));
  DFLASH_RETURN_IF_ERROR(CheckTensor(a.q, "q"));
  DFLASH_RETURN_IF_ERROR(CheckTensor(a.k, "k"));
  DFLASH_RETURN_IF_ERROR(CheckTensor(a.v, "v"));
  DFLASH_RETURN_IF_ERROR(CheckTensor(a.o, "o"));
  if (a.lse == 0 || a.lse % 4) return Invalid("lse must be a non-null, 4-byte aligned fp32 pointer");
  if (dir == Direction::kBackward) {
    DFLASH_RETURN_IF_ERROR(CheckTensor(a.dout, "dout"));
    DFLASH_RETURN_IF_ERROR(CheckTensor(a.dq, "dq"));
    DFLASH_RETURN_IF_ERROR(CheckTensor(a.dk, "dk"));
    DFLASH_RETURN_IF_ERROR(CheckTensor(a.dv, "dv"));
  }
  if (p.mask == dflash_attn::kMaskDocCausal && (a.cu_seqlens == 0 || a.cu_seqlens % 4))
    return Invalid("doc_causal needs a 4-byte aligned int32 cu_seqlens");
  if (p.is_dflash() && (a.anchors == 0 || a.anchors % 4)) return Invalid("DFlash masks need a 4-byte aligned int32 anchors");
  if (a.doc_start != 0 && !p.doc_bound)
    return Invalid("doc_start (packed rows) needs a problem with doc_bound (a DFlash mask's packed-rows variant)");
  if (p.doc_bound && (a.doc_start == 0 || a.doc_start % 4))
    return Invalid("a doc_bound problem needs doc_start: a 4-byte aligned int32 [batch, num_blocks]");
  dflash_attn::AttnParams k{};
  k.q = reinterpret_cast<const void*>(a.q.ptr);
  k.k = reinterpret_cast<const void*>(a.k.ptr);
  k.v = reinterpret_cast<const void*>(a.v.ptr);
  k.o = reinterpret_cast<void*>(a.o.ptr);
  k.lse = reinterpret_cast<float*>(a.lse);
  k.dout = reinterpret_cast<const void*>(a.dout.ptr);
  k.dq = reinterpret_cast<void*>(a.dq.ptr);
  k.dk = reinterpret_cast<void*>(a.dk.ptr);
  k.dv = reinterpret_cast<void*>(a.dv.ptr);
  SetStrides(a.q, k.q_batch_stride, k.q_head_stride, k.q_seq_stride);
  SetStrides(a.k, k.k_batch_stride, k.k_head_stride, k.k_seq_stride);
  SetStrides(a.v, k.v_batch_stride, k.v_head_stride, k.v_seq_stride);
  SetStrides(a.o, k.o_batch_stride, k.o_head_stride, k.o_seq_stride);
  SetStrides(a.dout, k.do_batch_stride, k.do_head_stride, k.do_seq_stride);
  SetStrides(a.dq, k.dq_batch_stride, k.dq_head_stride, k.dq_seq_stride);
  SetStrides(a.dk, k.dk_batch_stride, k.dk_head_stride, k.dk_seq_stride);
  SetStrides(a.dv, k.dv_batch_stride, k.dv_head_stride, k.dv_seq_stride);
  k.batch = static_cast<int>(p.batch);
  k.heads_q = static_cast<int>(p.heads_q);
  k.heads_kv = static_cast<int>(p.heads_kv);
  k.head_dim = static_cast<int>(p.head_dim);
  k.scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  k.mask.kind = p.mask;
  k.mask.seq_q = static_cast<int>(p.seq_q);
  k.mask.seq_kv = static_cast<int>(p.seq_kv);
  k.mask.cu_seqlens = reinterpret_cast<const int*>(a.cu_seqlens);
  k.mask.num_docs = static_cast<int>(p.num_docs);
  k.mask.anchors = reinterpret_cast<const int*>(a.anchors);
  k.mask.block_valid = reinterpret_cast<const unsigned char*>(a.block_valid);
  k.mask.doc_start = reinterpret_cast<const int*>(a.doc_start);
  k.mask.num_blocks = p.is_dflash() ? static_cast<int>(p.num_blocks()) : 0;
  k.mask.block_size = static_cast<int>(p.block_size);
  k.mask.ctx_len = static_cast<int>(p.ctx_len);
  k.mask.window = static_cast<int>(p.window);
  return k;
}

// The Q / K / V tensor maps of the warp-specialised forward (attention_fwd_tma.cuh's AttnTmaMaps: three
// CUtensorMaps in this order).
struct TmaMaps {
  CUtensorMap q, k, v;
};
static_assert(sizeof(CUtensorMap) == 128 && sizeof(TmaMaps) == 3 * 128, "AttnTmaMaps mirrors three CUtensorMaps");

// The map of a (batch, seq, heads, head_dim) tensor with boxes of box_rows rows (kernels/common/tensor_map.h).
Result<CUtensorMap> EncodeTensorMap(const TensorRef& t, std::int64_t seq, std::int64_t heads, std::int64_t batch,
                                    std::int64_t head_dim, unsigned box_rows, const char* name) {
  return kernels::EncodeSw128TileMap({.ptr = t.ptr, .cols = head_dim, .rows = seq, .heads = heads, .batch = batch,
                                      .row_stride = t.seq_stride, .head_stride = t.head_stride,
                                      .batch_stride = t.batch_stride},
                                     box_rows, name);
}

Result<TmaMaps> ForwardTensorMaps(const AttentionArgs& a, const tuner::Config& config) {
  const ProblemSpec& p = a.problem;
  const unsigned bn = static_cast<unsigned>(config.at("block_n"));
  TmaMaps maps;
  DFLASH_ASSIGN_OR_RETURN(maps.q, EncodeTensorMap(a.q, p.seq_q, p.heads_q, p.batch, p.head_dim,
                                                   dflash_attn::kTmaFwdBlockM, "q"));
  DFLASH_ASSIGN_OR_RETURN(maps.k, EncodeTensorMap(a.k, p.seq_kv, p.heads_kv, p.batch, p.head_dim, bn, "k"));
  DFLASH_ASSIGN_OR_RETURN(maps.v, EncodeTensorMap(a.v, p.seq_kv, p.heads_kv, p.batch, p.head_dim, bn, "v"));
  return maps;
}

// The Q / dO / K / V tensor maps of the warp-specialised backward (attention_bwd_tma.cuh's AttnBwdTmaMaps: four
// CUtensorMaps in this order).
struct BwdTmaMaps {
  CUtensorMap q, dout, k, v;
};
static_assert(sizeof(BwdTmaMaps) == 4 * 128, "AttnBwdTmaMaps mirrors four CUtensorMaps");

Result<BwdTmaMaps> BackwardTensorMaps(const AttentionArgs& a) {
  const ProblemSpec& p = a.problem;
  constexpr unsigned bm = dflash_attn::kTmaBwdBlockM, bn = dflash_attn::kTmaBwdBlockN;
  BwdTmaMaps maps;
  DFLASH_ASSIGN_OR_RETURN(maps.q, EncodeTensorMap(a.q, p.seq_q, p.heads_q, p.batch, p.head_dim, bm, "q"));
  DFLASH_ASSIGN_OR_RETURN(maps.dout, EncodeTensorMap(a.dout, p.seq_q, p.heads_q, p.batch, p.head_dim, bm, "dout"));
  DFLASH_ASSIGN_OR_RETURN(maps.k, EncodeTensorMap(a.k, p.seq_kv, p.heads_kv, p.batch, p.head_dim, bn, "k"));
  DFLASH_ASSIGN_OR_RETURN(maps.v, EncodeTensorMap(a.v, p.seq_kv, p.heads_kv, p.batch, p.head_dim, bn, "v"));
  return maps;
}

// maps: the launches' tensor maps (TmaMaps or BwdTmaMaps), passed after the params to those that take them.
Status RunLaunches(const tuner::LoadedVariant& winner, const std::vector<KernelLaunch>& launches,
                   dflash_attn::AttnParams& params, CUstream stream, void* maps = nullptr) {
  for (const KernelLaunch& l : launches) {
    if (l.grid_x == 0 || l.grid_y == 0 || l.grid_z == 0) continue;
    DFLASH_ASSIGN_OR_RETURN(CUfunction f, winner.Function(l.name_expression));
    if (l.tensor_maps && maps == nullptr) return Invalid(l.name_expression + " needs tensor maps");
    void* args[] = {&params, maps};
    unsigned grid_x = l.grid_x;
    if (l.persistent) {
      DFLASH_ASSIGN_OR_RETURN(const int sms, gpu::CurrentDeviceSmCount());
      grid_x = std::min(grid_x, static_cast<unsigned>(sms));
    }
    DFLASH_RETURN_IF_ERROR(gpu::Launch(f, {grid_x, l.grid_y, l.grid_z}, {l.threads, 1, 1}, l.shared_bytes, stream,
                                       args, winner.label + " " + l.name_expression));
  }
  return Status::Ok();
}

}  // namespace

TensorRef TensorRef::Bshd(CUdeviceptr p, std::int64_t seq, std::int64_t heads, std::int64_t head_dim) {
  return {p, seq * heads * head_dim, head_dim, heads * head_dim};
}
TensorRef TensorRef::Bhsd(CUdeviceptr p, std::int64_t seq, std::int64_t heads, std::int64_t head_dim) {
  return {p, heads * seq * head_dim, seq * head_dim, head_dim};
}

std::size_t BackwardWorkspaceBytes(const ProblemSpec& p, const tuner::Config& config) {
  const std::size_t rows = static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q);
  std::size_t bytes = AlignUp(rows * sizeof(float), 256);
  if (UsesDqAccumulator(config)) {  // rows rounded up to the accumulator's 8 x 8 tiles
    bytes += static_cast<std::size_t>(p.batch * p.heads_q) * dflash_attn::DqAccumRows(p.seq_q) *
             static_cast<std::size_t>(p.head_dim) * sizeof(float);
  }
  return bytes;
}

Status LaunchForward(const tuner::LoadedVariant& winner, const AttentionArgs& args, CUstream stream) {
  DFLASH_ASSIGN_OR_RETURN(dflash_attn::AttnParams params, MakeParams(args, Direction::kForward));
  const std::string why = ForwardInvalidReason(winner.config, args.problem);
  if (!why.empty()) return Invalid("variant " + winner.label + " cannot run this problem: " + why);
  if (IsWarpSpecialisedForward(winner.config)) {
    DFLASH_ASSIGN_OR_RETURN(TmaMaps maps, ForwardTensorMaps(args, winner.config));
    return RunLaunches(winner, ForwardLaunches(winner.config, args.problem), params, stream, &maps);
  }
  return RunLaunches(winner, ForwardLaunches(winner.config, args.problem), params, stream);
}

Status LaunchBackward(const tuner::LoadedVariant& winner, const AttentionArgs& args, CUdeviceptr workspace,
                      std::size_t workspace_bytes, CUstream stream) {
  DFLASH_ASSIGN_OR_RETURN(dflash_attn::AttnParams params, MakeParams(args, Direction::kBackward));
  const std::string why = BackwardInvalidReason(winner.config, args.problem);
  if (!why.empty()) return Invalid("variant " + winner.label + " cannot run this problem: " + why);
  const std::size_t need = BackwardWorkspaceBytes(args.problem, winner.config);
  if (workspace == 0 || workspace % 256 || workspace_bytes < need)
    return Invalid("backward workspace must be 256-byte aligned and at least " + std::to_string(need) + " bytes");
  const std::size_t rows = static_cast<std::size_t>(args.problem.batch * args.problem.heads_q * args.problem.seq_q);
  params.delta = reinterpret_cast<float*>(workspace);
  params.dq_accum = UsesDqAccumulator(winner.config)
                        ? reinterpret_cast<float*>(workspace + AlignUp(rows * sizeof(float), 256))
                        : nullptr;
  if (IsWarpSpecialisedBackward(winner.config)) {
    DFLASH_ASSIGN_OR_RETURN(BwdTmaMaps maps, BackwardTensorMaps(args));
    return RunLaunches(winner, BackwardLaunches(winner.config, args.problem), params, stream, &maps);
  }
  return RunLaunches(winner, BackwardLaunches(winner.config, args.problem), params, stream);
}

}  // namespace dflash::attention
