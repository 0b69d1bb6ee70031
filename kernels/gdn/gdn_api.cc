#include "kernels/gdn/gdn_api.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "kernels/gdn/chunk_plan.h"
#include "tuner/gpu_runtime.h"
#include "tuner/stream_fork.h"

namespace dflash::gdn {
namespace {

constexpr std::size_t kAlign = 256;
constexpr std::int64_t kMaxGridYZ = 65535;

std::size_t AlignUp(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

struct Plans {
  ChunkPlan chunks;
  SegmentPlan segments;             // unless pieces
  std::optional<PiecePlan> pieces;  // piece_chunks > 0: its chunk list and segments replace the ones above
  const std::vector<ChunkDesc>& chunk_list() const { return pieces ? pieces->chunks : chunks.chunks; }
  const std::vector<SegmentDesc>& segment_list() const { return pieces ? pieces->segments : segments.segments; }
  const std::vector<std::int32_t>& final_index() const {
    return pieces ? pieces->final_state_index : segments.final_state_index;
  }
};

Result<Plans> MakePlans(const Geometry& g, const GdnArgs& args) {
  Plans p;
  DFLASH_ASSIGN_OR_RETURN(p.chunks, PlanChunks(args.cu_seqlens, g.chunk));
  if (g.piece_chunks > 0) {
    if (g.fused == 0 || g.segment_chunks > 0) {
      return InvalidArgument("gdn: piece_chunks needs the fused kernel and the sequential state pass");
    }
    DFLASH_ASSIGN_OR_RETURN(p.pieces, PlanPieces(p.chunks, g.piece_chunks, args.h0 != 0));
  } else {
    const SegmentStart start = g.segment_chunks > 0 ? SegmentStart::kSegmentStates : SegmentStart::kZeroOrInitial;
    DFLASH_ASSIGN_OR_RETURN(p.segments, PlanSegments(p.chunks, g.segment_chunks, start, args.h0 != 0));
  }
  if (static_cast<std::int64_t>(p.chunks.chunks.size()) > kMaxGridYZ ||
      static_cast<std::int64_t>(p.segment_list().size()) > kMaxGridYZ || p.chunks.num_seqs > kMaxGridYZ) {
    return Unsupported("gdn: more than 65535 chunks, segments or sequences in one call (split the batch)");
  }
  return p;
}

// One workspace region: its byte offset, and whether the kernels are handed a pointer to it (kd, qg and rowscale
// are null in the configs OffsetsOf leaves them out of; every other region is passed, empty or not).
struct Region {
  std::size_t offset = 0;
  bool passed = true;
  CUdeviceptr In(CUdeviceptr workspace) const { return passed ? workspace + offset : 0; }
};

// The workspace regions, in order, and their total size (bytes).
struct Offsets {
  Region gcum, w, u, kd, vnew, hbuf, qg, pmat, rowscale, maps, seg_states, piece_states, chunks, segments,
      final_index, seq_segments;
  std::size_t total = 0;
};

Offsets OffsetsOf(const Geometry& g, const GdnArgs& args, const Plans& p) {
  const std::size_t T = static_cast<std::size_t>(p.chunks.num_tokens), HV = static_cast<std::size_t>(args.value_heads);
  const std::size_t D = kHeadDim, nch = p.chunks.chunks.size(), nseg = p.segment_list().size();
  const std::size_t nseq = static_cast<std::size_t>(p.chunks.num_seqs);
  const bool split = g.segment_chunks > 0;
  Offsets o{};
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at = AlignUp(at + bytes);
    return Region{here};
  };
  // A region that only some configs have: no bytes and a null pointer unless `passed`.
  auto take_or_null = [&](bool passed, std::size_t bytes) { return Region{take(passed ? bytes : 0).offset, passed}; };
  const bool fused = g.fused != 0, wgmma = g.IsWgmmaPass(), fold = g.prep_heads == 2;
  const std::size_t C = static_cast<std::size_t>(g.chunk);
  o.gcum = take(T * HV * 4);
  o.w = take(T * HV * D * 2);
  o.u = take(fold ? 0 : T * HV * D * 2);  // folded: the pass reads v
  // The wgmma pass and the folded passes read k themselves; the transfer kernel kd.
  o.kd = take_or_null((!wgmma && !fold) || split, T * HV * D * 2);
  o.vnew = take(fused ? 0 : T * HV * D * 2);
  o.hbuf = take(fused ? 0 : nch * HV * D * D * 2);
  // qg: the wgmma pass and the folded passes read q themselves.
  o.qg = take_or_null(!wgmma && !fold, fused ? T * HV * D * 2 : 0);
  o.pmat = take(fused ? nch * HV * C * C * 2 : 0);
  o.rowscale = take_or_null(wgmma || fold, T * HV * 8);
  o.maps = take(split ? nseg * HV * D * 2 * D * 4 : 0);
  o.seg_states = take(split ? nseg * HV * D * D * 4 : 0);
  o.piece_states = take(p.pieces ? nseq * HV * D * D * 4 : 0);
  o.chunks = take(nch * sizeof(ChunkDesc));
  o.segments = take(nseg * sizeof(SegmentDesc));
  o.final_index = take(nseg * 4);
  o.seq_segments = take(p.pieces ? 0 : p.segments.seq_first_segment.size() * 4);
  o.total = at;
  return o;
}

Status Upload(CUdeviceptr dst, const void* src, std::size_t bytes, const char* what) {
  if (bytes == 0) return Status::Ok();
  DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
  return gpu::CheckCu(api->MemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD", std::string("gdn plan ") + what);
}

Status CheckRowPtr(CUdeviceptr p, const char* name) {
  if (p == 0) return InvalidArgument(std::string("gdn: ") + name + " is null");
  if (p % 16 != 0) return InvalidArgument(std::string("gdn: ") + name + " is not 16-byte aligned");
  return Status::Ok();
}

Status CheckStrides(std::int64_t st, std::int64_t sh, const char* name) {
  if (st <= 0 || sh <= 0) return InvalidArgument(std::string("gdn: ") + name + " strides must be positive");
  if (st % 8 != 0 || sh % 8 != 0) {
    return InvalidArgument(std::string("gdn: ") + name + " strides must be multiples of 8 elements (16-byte rows)");
  }
  return Status::Ok();
}

// The piece-wise schedule: prep of every piece in order on the caller's stream; the fused pass of piece i on
// the fork's (higher-priority) stream once prep of piece i is done, so prep of piece i+1 overlaps it. The
// per-sequence state buffer carries the states between pieces: h0 (or zeros) in first, ht out at the end.
template <typename PrepFn, typename FusedFn>
Status LaunchPieces(const PreparedForward& f, const GdnArgs& args, CUstream stream, const PrepFn& launch_prep,
                    const FusedFn& launch_fused) {
  DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
  const std::size_t state_floats = static_cast<std::size_t>(f.num_seqs) * args.value_heads * kHeadDim * kHeadDim;
  if (args.h0 != 0) {
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->MemcpyDtoDAsync(f.piece_states, args.h0, state_floats * 4, stream),
                                        "cuMemcpyDtoDAsync", "gdn initial states"));
  } else {
    // Sequences without chunks get no segment: their final state is this zero.
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->MemsetD32Async(f.piece_states, 0, state_floats, stream),
                                        "cuMemsetD32Async", "gdn piece states"));
  }
  DFLASH_ASSIGN_OR_RETURN(gpu::StreamFork * fork, gpu::StreamFork::ForCurrentThread());
  // Once work is on the side stream, every exit joins it back: after an error the caller frees the workspace and
  // the output on its own stream, which must not run ahead of fused passes already queued beside it.
  bool forked = false;
  auto joined = [&](Status st) {
    if (!forked) return st;
    forked = false;
    const Status join = fork->Order(fork->side(), stream);
    return st.ok() ? join : st;
  };
  for (const PieceRange& piece : f.pieces) {
    if (Status st = launch_prep(piece.chunk_first, piece.chunk_count, stream); !st.ok()) return joined(st);
    if (Status st = fork->Order(stream, fork->side()); !st.ok()) return joined(st);
    forked = true;
    if (Status st = launch_fused(piece.segment_first, piece.segment_count, f.piece_states, f.piece_states,
                                 fork->side());
        !st.ok()) {
      return joined(st);
    }
  }
  DFLASH_RETURN_IF_ERROR(joined(Status::Ok()));
  if (args.ht == 0) return Status::Ok();
  return gpu::CheckCu(api->MemcpyDtoDAsync(args.ht, f.piece_states, state_floats * 4, stream), "cuMemcpyDtoDAsync",
                      "gdn final states");
}

}  // namespace

GdnArgs GdnArgs::Contiguous(CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr a, CUdeviceptr b,
                            CUdeviceptr A_log, CUdeviceptr dt_bias, CUdeviceptr o, int heads, int value_heads,
                            std::span<const std::int32_t> cu_seqlens) {
  GdnArgs r;
  r.q = q, r.k = k, r.v = v, r.a = a, r.b = b, r.A_log = A_log, r.dt_bias = dt_bias, r.o = o;
  r.heads = heads, r.value_heads = value_heads, r.cu_seqlens = cu_seqlens;
  r.q_stride_t = r.k_stride_t = static_cast<std::int64_t>(heads) * kHeadDim;
  r.q_stride_h = r.k_stride_h = kHeadDim;
  r.v_stride_t = r.o_stride_t = static_cast<std::int64_t>(value_heads) * kHeadDim;
  r.v_stride_h = r.o_stride_h = kHeadDim;
  r.ab_stride_t = value_heads;
  return r;
}

Status ValidateArgs(const GdnArgs& a) {
  if (a.heads < 1 || a.value_heads < a.heads || a.value_heads % a.heads != 0) {
    return InvalidArgument("gdn: value_heads must be a positive multiple of heads");
  }
  if (a.cu_seqlens.size() < 2) return InvalidArgument("gdn: cu_seqlens must list at least one sequence");
  DFLASH_RETURN_IF_ERROR(CheckRowPtr(a.q, "q"));
  DFLASH_RETURN_IF_ERROR(CheckRowPtr(a.k, "k"));
  DFLASH_RETURN_IF_ERROR(CheckRowPtr(a.v, "v"));
  DFLASH_RETURN_IF_ERROR(CheckRowPtr(a.o, "o"));
  DFLASH_RETURN_IF_ERROR(CheckStrides(a.q_stride_t, a.q_stride_h, "q"));
  DFLASH_RETURN_IF_ERROR(CheckStrides(a.k_stride_t, a.k_stride_h, "k"));
  DFLASH_RETURN_IF_ERROR(CheckStrides(a.v_stride_t, a.v_stride_h, "v"));
  DFLASH_RETURN_IF_ERROR(CheckStrides(a.o_stride_t, a.o_stride_h, "o"));
  const bool raw = a.a != 0 || a.b != 0 || a.A_log != 0 || a.dt_bias != 0, given = a.g != 0 || a.beta != 0;
  if (raw == given) {
    return InvalidArgument("gdn: give the gates either raw (a, b, A_log, dt_bias) or precomputed (g, beta), not " +
                           std::string(raw ? "both" : "neither"));
  }
  if (raw && (a.a == 0 || a.b == 0 || a.A_log == 0 || a.dt_bias == 0)) {
    return InvalidArgument("gdn: the raw gate form needs all of a, b, A_log and dt_bias");
  }
  if (given && (a.g == 0 || a.beta == 0)) return InvalidArgument("gdn: the precomputed gate form needs g and beta");
  if (a.a % 2 != 0 || a.b % 2 != 0 || a.A_log % 4 != 0 || a.dt_bias % 4 != 0 || a.g % 4 != 0 || a.beta % 4 != 0) {
    return InvalidArgument("gdn: a, b must be 2-byte and A_log, dt_bias, g, beta 4-byte aligned");
  }
  if (a.ab_stride_t < a.value_heads) return InvalidArgument("gdn: ab_stride_t is smaller than value_heads");
  if ((a.h0 != 0 && a.h0 % 16 != 0) || (a.ht != 0 && a.ht % 16 != 0)) {
    return InvalidArgument("gdn: h0 / ht must be 16-byte aligned");
  }
  if (!(a.scale >= 0.f) || std::isinf(a.scale)) return InvalidArgument("gdn: scale must be finite and >= 0");
  return Status::Ok();
}

Result<std::size_t> ChunkedWorkspaceBytes(const Geometry& g, const GdnArgs& args) {
  DFLASH_RETURN_IF_ERROR(ValidateArgs(args));
  DFLASH_ASSIGN_OR_RETURN(Plans p, MakePlans(g, args));
  return OffsetsOf(g, args, p).total;
}

Result<PreparedForward> PrepareChunkedForward(const Geometry& g, const GdnArgs& args, CUdeviceptr workspace,
                                              std::size_t workspace_bytes) {
  DFLASH_RETURN_IF_ERROR(ValidateArgs(args));
  DFLASH_ASSIGN_OR_RETURN(Plans p, MakePlans(g, args));
  const Offsets o = OffsetsOf(g, args, p);
  if (workspace == 0 || workspace_bytes < o.total) {
    return InvalidArgument("gdn: workspace of " + std::to_string(workspace_bytes) + " B is smaller than the " +
                           std::to_string(o.total) + " B this call needs");
  }
  if (workspace % kAlign != 0) return InvalidArgument("gdn: workspace must be 256-byte aligned");
  PreparedForward f;
  f.geometry = g;
  f.num_seqs = p.chunks.num_seqs;
  f.num_chunks = static_cast<int>(p.chunks.chunks.size());
  f.num_tokens = p.chunks.num_tokens;
  f.num_segments = static_cast<int>(p.segment_list().size());
  if (p.pieces) f.pieces = p.pieces->pieces;
  f.gcum = o.gcum.In(workspace), f.w = o.w.In(workspace), f.u = o.u.In(workspace), f.kd = o.kd.In(workspace);
  f.vnew = o.vnew.In(workspace), f.hbuf = o.hbuf.In(workspace), f.maps = o.maps.In(workspace);
  f.qg = o.qg.In(workspace), f.pmat = o.pmat.In(workspace), f.rowscale = o.rowscale.In(workspace);
  f.seg_states = o.seg_states.In(workspace), f.chunks = o.chunks.In(workspace), f.segments = o.segments.In(workspace);
  f.piece_states = o.piece_states.In(workspace);
  f.final_index = o.final_index.In(workspace), f.seq_segments = o.seq_segments.In(workspace);
  DFLASH_RETURN_IF_ERROR(
      Upload(f.chunks, p.chunk_list().data(), p.chunk_list().size() * sizeof(ChunkDesc), "chunks"));
  DFLASH_RETURN_IF_ERROR(
      Upload(f.segments, p.segment_list().data(), p.segment_list().size() * sizeof(SegmentDesc), "segments"));
  DFLASH_RETURN_IF_ERROR(Upload(f.final_index, p.final_index().data(), p.final_index().size() * 4, "final index"));
  if (!p.pieces) {
    DFLASH_RETURN_IF_ERROR(Upload(f.seq_segments, p.segments.seq_first_segment.data(),
                                  p.segments.seq_first_segment.size() * 4, "sequence segments"));
  } else {
    // The fork's stream and event are created here, outside any graph capture of the launches.
    DFLASH_RETURN_IF_ERROR(gpu::StreamFork::ForCurrentThread().status());
  }
  return f;
}

Status LaunchPreparedForward(const tuner::LoadedVariant& winner, const PreparedForward& f, const GdnArgs& args,
                             CUstream stream) {
  const Geometry& g = f.geometry;
  const KernelNames names = KernelNamesOf(g);
  const unsigned nt = g.threads();
  int H = args.heads, HV = args.value_heads, l2norm = args.qk_l2norm ? 1 : 0;
  float scale = args.scale > 0.f ? args.scale : 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  CUdeviceptr null_ptr = 0;
  std::string label = winner.label;

  // prep over `count` chunks of the uploaded list from `first` (their P matrices at the same indices).
  auto launch_prep = [&](int first, int count, CUstream on) -> Status {
    if (count == 0) return Status::Ok();
    DFLASH_ASSIGN_OR_RETURN(CUfunction prep, winner.Function(names.prep));
    CUdeviceptr q = args.q, k = args.k, v = args.v, a = args.a, b = args.b, alog = args.A_log, dtb = args.dt_bias,
                gin = args.g, betain = args.beta;
    long long qst = args.q_stride_t, qsh = args.q_stride_h, kst = args.k_stride_t, ksh = args.k_stride_h,
              vst = args.v_stride_t, vsh = args.v_stride_h, abst = args.ab_stride_t;
    CUdeviceptr chunks = f.chunks + static_cast<CUdeviceptr>(first) * sizeof(ChunkDesc), gcum = f.gcum, w = f.w,
                u = f.u, kd = f.kd, qg = f.qg, rowscale = f.rowscale;
    CUdeviceptr pmat = f.pmat == 0 ? 0
                                   : f.pmat + static_cast<CUdeviceptr>(first) * static_cast<CUdeviceptr>(HV) *
                                                  static_cast<CUdeviceptr>(g.chunk * g.chunk) * 2;
    void* pa[] = {&q, &qst, &qsh, &k, &kst, &ksh, &v, &vst, &vsh, &a, &b, &abst, &alog, &dtb, &gin, &betain,
                  &chunks, &H, &HV, &l2norm, &gcum, &w, &u, &kd, &scale, &qg, &pmat, &rowscale};
    const unsigned prep_heads = static_cast<unsigned>(g.prep_heads > 0 ? H : HV);  // per key / value head
    return gpu::Launch(prep, {static_cast<unsigned>(count), prep_heads, 1}, {nt, 1, 1},
                       PrepSharedBytesOf(g), on, pa, label + " prep");
  };
  CUdeviceptr kd = f.kd, w = f.w, u = f.u, gcum = f.gcum, hbuf = f.hbuf, vnew = f.vnew;
  // The fused pass over `count` segments of the uploaded list from `first`, states from h0 / to ht.
  auto launch_fused = [&](int first, int count, CUdeviceptr h0, CUdeviceptr ht, CUstream on) -> Status {
    DFLASH_ASSIGN_OR_RETURN(CUfunction fused, winner.Function(names.fused));
    CUdeviceptr qg = f.qg, pmat = f.pmat, o = args.o;
    CUdeviceptr segs = f.segments + static_cast<CUdeviceptr>(first) * sizeof(SegmentDesc);
    CUdeviceptr final_index = f.final_index + static_cast<CUdeviceptr>(first) * 4;
    long long ost = args.o_stride_t, osh = args.o_stride_h;
    CUdeviceptr q = args.q, k = args.k, v = args.v, rowscale = f.rowscale;
    long long qst = args.q_stride_t, qsh = args.q_stride_h, kst = args.k_stride_t, ksh = args.k_stride_h,
              vst = args.v_stride_t, vsh = args.v_stride_h;
    void* pw[] = {&q, &qst, &qsh, &k, &kst, &ksh, &v, &vst, &vsh, &H, &w, &u, &pmat, &gcum, &rowscale,
                  &segs, &final_index, &HV, &h0, &ht, &o, &ost, &osh};
    void* pf[] = {&kd, &w, &u, &qg, &pmat, &gcum, &segs, &final_index, &HV, &h0, &ht, &o, &ost, &osh,
                  &q, &qst, &qsh, &k, &kst, &ksh, &v, &vst, &vsh, &H, &rowscale};
    return gpu::Launch(fused,
                       {static_cast<unsigned>(kHeadDim / g.state_bv), static_cast<unsigned>(HV),
                        static_cast<unsigned>(count)},
                       {g.fused_threads(), 1, 1}, FusedSharedBytesOf(g), on, g.fused == kFusedWgmma ? pw : pf,
                       label + " fused");
  };

  if (g.piece_chunks > 0) return LaunchPieces(f, args, stream, launch_prep, launch_fused);
  DFLASH_RETURN_IF_ERROR(launch_prep(0, f.num_chunks, stream));
  CUdeviceptr segs = f.segments;
  CUdeviceptr state_h0 = args.h0;
  const unsigned nseg = static_cast<unsigned>(f.num_segments);
  if (g.segment_chunks > 0) {
    DFLASH_ASSIGN_OR_RETURN(CUfunction transfer, winner.Function(names.transfer));
    DFLASH_ASSIGN_OR_RETURN(CUfunction combine, winner.Function(names.combine));
    CUdeviceptr maps = f.maps, states = f.seg_states, seq_segs = f.seq_segments, h0 = args.h0;
    void* pt[] = {&kd, &w, &u, &gcum, &segs, &null_ptr, &HV, &null_ptr, &maps, &null_ptr, &null_ptr};
    DFLASH_RETURN_IF_ERROR(gpu::Launch(transfer,
                                       {static_cast<unsigned>(2 * kHeadDim / g.state_bv), static_cast<unsigned>(HV), nseg},
                                       {nt, 1, 1}, StateSharedBytesOf(g), stream, pt, label + " transfer"));
    void* pc[] = {&maps, &seq_segs, &HV, &h0, &states};
    DFLASH_RETURN_IF_ERROR(gpu::Launch(combine,
                                       {static_cast<unsigned>(kHeadDim / g.state_bv), static_cast<unsigned>(HV),
                                        static_cast<unsigned>(f.num_seqs)},
                                       {kCombineThreads, 1, 1}, CombineSharedBytesOf(g), stream, pc, label + " combine"));
    state_h0 = f.seg_states;
  }
  CUdeviceptr final_index = f.final_index, ht = args.ht;
  if (g.fused) return launch_fused(0, f.num_segments, state_h0, args.ht, stream);
  DFLASH_ASSIGN_OR_RETURN(CUfunction state, winner.Function(names.state));
  void* ps[] = {&kd, &w, &u, &gcum, &segs, &final_index, &HV, &state_h0, &ht, &hbuf, &vnew};
  DFLASH_RETURN_IF_ERROR(gpu::Launch(state, {static_cast<unsigned>(kHeadDim / g.state_bv), static_cast<unsigned>(HV), nseg},
                                     {nt, 1, 1}, StateSharedBytesOf(g), stream, ps, label + " state"));
  if (f.num_chunks > 0) {
    DFLASH_ASSIGN_OR_RETURN(CUfunction output, winner.Function(names.output));
    CUdeviceptr q = args.q, k = args.k, o = args.o, chunks = f.chunks;
    long long qst = args.q_stride_t, qsh = args.q_stride_h, kst = args.k_stride_t, ksh = args.k_stride_h,
              ost = args.o_stride_t, osh = args.o_stride_h;
    void* po[] = {&q, &qst, &qsh, &k, &kst, &ksh, &gcum, &hbuf, &vnew, &chunks, &H, &HV, &l2norm, &scale,
                  &o, &ost, &osh};
    DFLASH_RETURN_IF_ERROR(gpu::Launch(output,
                                       {static_cast<unsigned>(kHeadDim / g.out_bv), static_cast<unsigned>(f.num_chunks),
                                        static_cast<unsigned>(HV)},
                                       {nt, 1, 1}, OutputSharedBytesOf(g), stream, po, label + " output"));
  }
  return Status::Ok();
}

Status LaunchChunkedForward(const tuner::LoadedVariant& winner, const GdnArgs& args, CUdeviceptr workspace,
                            std::size_t workspace_bytes, CUstream stream) {
  DFLASH_ASSIGN_OR_RETURN(Geometry g, GeometryOf(winner.config));
  DFLASH_ASSIGN_OR_RETURN(PreparedForward f, PrepareChunkedForward(g, args, workspace, workspace_bytes));
  return LaunchPreparedForward(winner, f, args, stream);
}

std::size_t RecurrentWorkspaceBytes(const GdnArgs& args) { return AlignUp(args.cu_seqlens.size() * 4); }

Status LaunchRecurrent(const tuner::LoadedVariant& winner, const GdnArgs& args, CUdeviceptr workspace,
                       std::size_t workspace_bytes, CUstream stream) {
  DFLASH_RETURN_IF_ERROR(ValidateArgs(args));
  DFLASH_ASSIGN_OR_RETURN(ChunkPlan plan, PlanChunks(args.cu_seqlens, 64));  // validates cu_seqlens
  if (plan.num_seqs > kMaxGridYZ) return Unsupported("gdn: more than 65535 sequences in one call");
  if (workspace == 0 || workspace_bytes < RecurrentWorkspaceBytes(args)) {
    return InvalidArgument("gdn: recurrent workspace too small");
  }
  DFLASH_RETURN_IF_ERROR(Upload(workspace, args.cu_seqlens.data(), args.cu_seqlens.size() * 4, "cu_seqlens"));
  const KernelNames names = KernelNamesOf(Geometry{});
  DFLASH_ASSIGN_OR_RETURN(CUfunction rec, winner.Function(names.recurrent));
  CUdeviceptr q = args.q, k = args.k, v = args.v, a = args.a, b = args.b, alog = args.A_log, dtb = args.dt_bias,
              gin = args.g, betain = args.beta;
  CUdeviceptr cu = workspace, h0 = args.h0, ht = args.ht, o = args.o;
  long long qst = args.q_stride_t, qsh = args.q_stride_h, kst = args.k_stride_t, ksh = args.k_stride_h,
            vst = args.v_stride_t, vsh = args.v_stride_h, abst = args.ab_stride_t, ost = args.o_stride_t,
            osh = args.o_stride_h;
  int H = args.heads, HV = args.value_heads, l2norm = args.qk_l2norm ? 1 : 0;
  float scale = args.scale > 0.f ? args.scale : 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  void* pr[] = {&q, &qst, &qsh, &k, &kst, &ksh, &v, &vst, &vsh, &a, &b, &abst, &alog, &dtb,
                &gin, &betain, &cu, &H, &HV, &l2norm, &scale, &h0, &ht, &o, &ost, &osh};
  return gpu::Launch(rec, {static_cast<unsigned>(kHeadDim / kRecurrentBv), static_cast<unsigned>(HV),
                           static_cast<unsigned>(plan.num_seqs)},
                     {static_cast<unsigned>(2 * kRecurrentBv), 1, 1}, 0, stream, pr, winner.label + " recurrent");
}

}  // namespace dflash::gdn
