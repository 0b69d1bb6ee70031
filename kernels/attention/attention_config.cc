#include "kernels/attention/attention_config.h"

#include <algorithm>

#include "kernels/attention/attention_params.cuh"

namespace dflash::attention {
namespace {

// The start of every TunerSkipReason (IsTunerSkip looks for it).
constexpr std::string_view kSkippedByTuner = "skipped by the tuner: ";

int Get(const tuner::Config& c, const char* k) {
  auto it = c.find(k);
  return it == c.end() ? 0 : static_cast<int>(it->second);
}

// 1 when the config has no warp_layout (configs made before the parameter existed).
int WarpLayout(const tuner::Config& c) { return c.count("warp_layout") ? Get(c, "warp_layout") : 1; }

unsigned CeilDiv(std::int64_t a, std::int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

std::string Expr(const char* name, std::initializer_list<long long> args) {
  std::string s = std::string("dflash_attn::") + name + "<";
  bool first = true;
  for (long long a : args) {
    if (!first) s += ",";
    s += std::to_string(a);
    first = false;
  }
  return s + ">";
}

constexpr int kPreRowsPerBlock = 32;  // attention_bwd.cuh
constexpr int kDqTileN = 64;          // kv tile of the separate dQ pass

}  // namespace

std::vector<tuner::TunableParam> ForwardParams() {
  return {{"block_m", {64, 128}, "query rows per thread block"},
          {"block_n", {32, 64, 128}, "kv rows per shared-memory tile"},
          {"warps", {4, 8}, "warps per block (each owns block_m / warps query rows)"},
          {"stages", {1, 2, 3}, "kv tile buffers (2 = cp.async double buffering; kernel 2 takes 3, kernels 3-5 2 or 3)"},
          {"kernel", {0, 1, 2, 3, 4, 5, 6},
           "0: mma.sync (AttnFwd, the portable tier: sm_80 and later); 1: wgmma (AttnFwdWgmma, the Hopper tier: "
           "sm_90a only; one warpgroup per 64 query rows, warps 4); 2: as 1 with the softmax of each kv tile "
           "overlapping the next tile's QK^T (stages 3); 3: warp-specialised (AttnFwdTma, sm_90a only: a producer "
           "warpgroup loads Q, K, V with the bulk tensor copy engine, two consumer warpgroups of 64 query rows, "
           "block_m 128); 4: as 3 with the softmax of the next tile overlapping this tile's PV; 5: as 4 with the two "
           "consumers issuing their products in turns; 6: 5 as a persistent kernel (AttnFwdTmaPersistent: one block "
           "per SM walks query tiles, each tile's start and end under its neighbours' products; head dim <= 128)"}};
}

std::vector<tuner::TunableParam> BackwardParams() {
  return {{"block_m", {32, 64, 128}, "query rows per inner tile"},
          {"block_n", {64, 128}, "kv rows per thread block (warps = block_n / 16)"},
          {"stages", {1, 2, 3}, "query tile buffers (2 = cp.async double buffering; 3: kernel 2 only)"},
          {"dq_mode", {0, 1}, "0: dQ by fp32 atomics + convert pass; 1: separate deterministic dQ pass"},
          {"warp_layout", {1, 2},
           "1: each warp owns 16 kv rows (AttnBwdKv); 2: FlashAttention-2's 2-D warp layout (AttnBwdKv2d; "
           "block_m 64, dq_mode 0)"},
          {"head_groups", {0, 1},
           "dK/dV launch: 0 = every kv head in flight; 1 = kv heads in groups whose Q / dO / dQ working set fits "
           "~32 MiB of L2 (attention_schedule.cuh)"},
          {"kernel", {0, 1, 2, 3, 4},
           "0: mma.sync (the portable tier, warp_layout picks the kernel); 1: wgmma (AttnBwdWgmma, the Hopper tier: "
           "sm_90a only; one warpgroup per 64 kv rows, block_m 64 or 128, dq_mode 0, warp_layout 1); 2: "
           "warp-specialised (AttnBwdTma, sm_90a only: a producer warpgroup loads K, V, Q, dO with the bulk tensor "
           "copy engine, two consumer warpgroups of 64 kv rows; block_m 64, block_n 128, head_dim 128); 3: as 2 with "
           "each item's dQ tile staged in shared memory and added to the accumulator by one bulk reduce-add, and the "
           "item's LSE, delta and dQ staging buffer waited for under the products; 4: as 3 with the next item's tiles "
           "also waited for under the dK product"}};
}

int BackwardHeadsPerGroup(const tuner::Config& c, const ProblemSpec& p) {
  if (Get(c, "head_groups") == 0) return static_cast<int>(p.heads_kv);
  constexpr std::int64_t kBudget = std::int64_t{32} << 20;
  // Per kv head: the GQA group's Q and dO rows (bf16) and, with dq_mode 0, their fp32 dQ accumulator rows.
  const std::int64_t per_head =
      (p.heads_q / p.heads_kv) * p.seq_q * p.head_dim * (2 + 2 + (UsesDqAccumulator(c) ? 4 : 0));
  int hg = 1;
  for (int h = 1; h <= p.heads_kv; ++h)
    if (p.heads_kv % h == 0 && h * per_head <= kBudget) hg = h;
  return hg;
}

bool UsesDqAccumulator(const tuner::Config& config) { return Get(config, "dq_mode") == 0; }

bool IsHopperTier(const tuner::Config& config) { return Get(config, "kernel") >= 1; }

bool IsWarpSpecialisedForward(const tuner::Config& config) { return Get(config, "kernel") >= 3; }

bool IsWarpSpecialisedBackward(const tuner::Config& config) { return Get(config, "kernel") >= 2; }

int ForwardSmemBytes(const tuner::Config& c, const ProblemSpec& p) {
  const int d = static_cast<int>(p.head_dim), bn = Get(c, "block_n"), st = Get(c, "stages");
  if (Get(c, "kernel") == 6) return dflash_attn::FwdTmaPersistentSmemBytes(d, bn, st);
  return IsWarpSpecialisedForward(c) ? dflash_attn::FwdTmaSmemBytes(d, bn, st)
                                     : dflash_attn::FwdSmemBytes(d, Get(c, "block_m"), bn, st);
}

std::string ArchInvalidReason(const tuner::Config& config, std::string_view arch) {
  if (IsHopperTier(config) && arch != "sm_90a")
    return "a wgmma kernel (kernel >= 1) needs sm_90a, not " + std::string(arch);
  return "";
}

std::string ForwardInvalidReason(const tuner::Config& c, const ProblemSpec& p) {
  const int bm = Get(c, "block_m"), bn = Get(c, "block_n"), w = Get(c, "warps"), st = Get(c, "stages");
  if (c.size() != 4 + (c.count("kernel") ? 1u : 0u))
    return "forward config needs exactly block_m, block_n, warps, stages (and optionally kernel)";
  const int kernel = Get(c, "kernel");
  if (kernel < 0 || kernel > 6) return "kernel must be 0 .. 6";
  if ((p.seq_kv + bn - 1) / bn > dflash_attn::kMaxTiles) return "seq_kv exceeds the tile-class table (" + std::to_string(dflash_attn::kMaxTiles) + " kv tiles)";
  if (IsHopperTier(c)) {
    if (w != 4) return "the wgmma kernel has one warpgroup per 64 query rows: warps must be 4";
    if (bm != 64 && bm != 128) return "the wgmma kernel needs block_m 64 or 128";
    if (bn != 64 && bn != 128) return "the wgmma kernel needs block_n 64 or 128";
    if (kernel == 1 && st != 1 && st != 2) return "kernel 1 takes stages 1 or 2";
    if (kernel == 2 && st != 3) return "kernel 2 keeps three kv buffers: stages must be 3";
    if (IsWarpSpecialisedForward(c) && bm != dflash_attn::kTmaFwdBlockM)
      return "the warp-specialised kernel has two consumer warpgroups: block_m " +
             std::to_string(dflash_attn::kTmaFwdBlockM);
    if (IsWarpSpecialisedForward(c) && st != 2 && st != 3) return "the warp-specialised kernel takes stages 2 or 3";
    if (kernel == 6 && p.head_dim > 128) return "the persistent kernel keeps two Q tiles: head dim 64 or 128";
    // Per thread: O (head_dim / 2 fp32), S (block_n / 2; twice with kernel 2), P (block_n / 4 bf16 pairs; twice with
    // kernels 4-6).
    const int regs = static_cast<int>(p.head_dim) / 2 + (kernel == 2 ? 2 : 1) * bn / 2 + (kernel >= 4 ? 2 : 1) * bn / 4;
    if (regs > 224) return "accumulators need " + std::to_string(regs) + " registers per thread (> 224): would spill";
    if (ForwardSmemBytes(c, p) > 227 * 1024) return "shared memory exceeds 227 KiB";
    return "";
  }
  if (w != 4 && w != 8) return "warps must be 4 or 8";
  if (bm < 16 || bm % (16 * w) != 0) return "block_m must be a multiple of 16 * warps";
  if (bm / (16 * w) > 4) return "at most 4 m-tiles of 16 rows per warp";
  if (bn < 16 || bn > 128 || bn % 16 != 0) return "block_n must be a multiple of 16 in 16..128";
  if (st != 1 && st != 2) return "stages must be 1 or 2";
  // Register budget: the O accumulator (block_m/warps x head_dim fp32 per warp) plus S (block_m/warps x block_n).
  const int acc_per_thread = (bm / w) * static_cast<int>(p.head_dim) / 32 + (bm / w) * bn / 32;
  if (acc_per_thread > 192) return "accumulators need " + std::to_string(acc_per_thread) + " registers per thread (> 192): would spill";
  return "";
}

bool IsTunerSkip(std::string_view invalid_reason) { return invalid_reason.starts_with(kSkippedByTuner); }

std::string TunerSkipReason(const tuner::Config& c, Direction dir) {
  if (dir == Direction::kBackward && Get(c, "kernel") == 4)
    return std::string(kSkippedByTuner) +
           "backward kernel 4 (kernel 3 with the next item's wait under the dK product) is not established: -7 % to "
           "+3 % against kernel 3 in one H100 A/B, a tie with it in the tuner's final round (DFlash full 512)";
  return "";
}

std::string BackwardInvalidReason(const tuner::Config& c, const ProblemSpec& p) {
  const int bm = Get(c, "block_m"), bn = Get(c, "block_n"), st = Get(c, "stages"), dq = Get(c, "dq_mode");
  const int layout = WarpLayout(c);
  if (c.size() != 4 + (c.count("warp_layout") ? 1u : 0u) + (c.count("head_groups") ? 1u : 0u) + (c.count("kernel") ? 1u : 0u))
    return "backward config needs exactly block_m, block_n, stages, dq_mode (and optionally warp_layout, head_groups, "
           "kernel)";
  if (p.head_dim != 64 && p.head_dim != 128) return "backward supports head_dim 64 and 128";
  if (bm < 16 || bm > 128 || bm % 16 != 0) return "block_m must be a multiple of 16 in 16..128";
  if (bn != 64 && bn != 128) return "block_n must be 64 or 128";
  if (st < 1 || st > 3) return "stages must be 1, 2 or 3";
  if (st == 3 && !(IsWarpSpecialisedBackward(c) && Get(c, "kernel") == 2))
    return "stages 3 is the warp-specialised backward's kernel 2 only (stages must be 1 or 2 elsewhere)";
  if (dq != 0 && dq != 1) return "dq_mode must be 0 or 1";
  if (layout != 1 && layout != 2) return "warp_layout must be 1 or 2";
  if (Get(c, "head_groups") != 0 && Get(c, "head_groups") != 1) return "head_groups must be 0 or 1";
  if (Get(c, "kernel") < 0 || Get(c, "kernel") > 4) return "backward kernel must be 0 .. 4";
  if (IsHopperTier(c)) {
    if (bm != 64 && bm != 128) return "the wgmma backward needs block_m 64 or 128";
    if (dq != 0) return "the wgmma backward accumulates dQ with atomics (dq_mode 0)";
    if (layout != 1) return "the wgmma backward has its own layout: warp_layout must be 1 (or absent)";
    if (bm > bn) return "the wgmma backward splits dQ's query rows among block_n / 64 warpgroups: block_m <= block_n";
    if (static_cast<int>(p.head_dim) * (bm / 64) / (bn / 64) % 64 != 0)
      return "the wgmma backward's dQ columns per warpgroup must be a multiple of 64";
  }
  if (IsWarpSpecialisedBackward(c)) {
    if (bm != dflash_attn::kTmaBwdBlockM || bn != dflash_attn::kTmaBwdBlockN)
      return "the warp-specialised backward has a fixed tile: block_m " + std::to_string(dflash_attn::kTmaBwdBlockM) +
             ", block_n " + std::to_string(dflash_attn::kTmaBwdBlockN);
    if (p.head_dim != 128) return "the warp-specialised backward needs head_dim 128 (one m64n64 dQ pass per warpgroup)";
    if (st != 2 && st != 3) return "the warp-specialised backward takes stages 2 or 3";
  }
  // The 2-D layout uses (block_n / 32) * (block_m / 32) warps; the launch gives block_n / 16.
  if (layout == 2 && bm != 64) return "warp_layout 2 needs block_m 64 (warps = block_n / 16)";
  if (layout == 2 && dq != 0) return "warp_layout 2 accumulates dQ with atomics (dq_mode 0)";
  if ((p.seq_q + bm - 1) / bm > dflash_attn::kMaxTiles) return "seq_q exceeds the tile-class table (" + std::to_string(dflash_attn::kMaxTiles) + " query tiles)";
  if (dq == 1 && (p.seq_kv + kDqTileN - 1) / kDqTileN > dflash_attn::kMaxTiles)
    return "seq_kv exceeds the dQ pass's tile-class table";
  // dK, dV (2 x head_dim/8 x 4 per thread) + S^T, dP^T (2 x block_m/8 x 4).
  const int acc = static_cast<int>(p.head_dim) + bm;
  if (acc > 224) return "accumulators need " + std::to_string(acc) + " registers per thread (> 224): would spill";
  return "";
}

std::vector<KernelLaunch> ForwardLaunches(const tuner::Config& c, const ProblemSpec& p) {
  const int bm = Get(c, "block_m"), bn = Get(c, "block_n"), w = Get(c, "warps"), st = Get(c, "stages");
  const int d = static_cast<int>(p.head_dim);
  const bool persistent = Get(c, "kernel") == 6;
  KernelLaunch k;
  if (IsWarpSpecialisedForward(c)) {
    k.name_expression = persistent ? Expr("AttnFwdTmaPersistent", {d, bn, st, p.compiled_mask()})
                                   : Expr("AttnFwdTma", {d, bn, st, Get(c, "kernel") - 3, p.compiled_mask()});
    k.threads = dflash_attn::kTmaFwdThreads;
    k.tensor_maps = true;
  } else if (IsHopperTier(c)) {
    k.name_expression = Expr("AttnFwdWgmma", {d, bm, bn, st, Get(c, "kernel") - 1, p.compiled_mask()});
    k.threads = static_cast<unsigned>(bm / 64 * 128);
  } else {
    k.name_expression = Expr("AttnFwd", {d, bm, bn, w, st, p.compiled_mask()});
    k.threads = static_cast<unsigned>(w * 32);
  }
  k.grid_x = static_cast<unsigned>(p.heads_q);  // (heads, tiles, batch): attention_schedule.cuh
  k.grid_y = CeilDiv(p.seq_q, bm);
  k.grid_z = static_cast<unsigned>(p.batch);
  if (persistent) {  // one block per SM walks the same tiles in the same order (the launch clamps the grid)
    k.persistent = true;
    k.grid_x *= k.grid_y * k.grid_z;
    k.grid_y = k.grid_z = 1;
  }
  k.shared_bytes = static_cast<unsigned>(ForwardSmemBytes(c, p));
  return {k};
}

std::vector<KernelLaunch> BackwardLaunches(const tuner::Config& c, const ProblemSpec& p) {
  const int bm = Get(c, "block_m"), bn = Get(c, "block_n"), st = Get(c, "stages"), dq = Get(c, "dq_mode");
  const int d = static_cast<int>(p.head_dim);
  std::vector<KernelLaunch> out;
  KernelLaunch pre;
  pre.name_expression = std::string("dflash_attn::AttnBwdPre<") + std::to_string(d) + (dq == 0 ? ",true>" : ",false>");
  pre.grid_x = CeilDiv(p.seq_q, kPreRowsPerBlock);
  pre.grid_y = static_cast<unsigned>(p.heads_q);
  pre.grid_z = static_cast<unsigned>(p.batch);
  pre.threads = 128;
  out.push_back(pre);
  KernelLaunch kv;
  kv.threads = static_cast<unsigned>(bn / 16 * 32);  // AttnBwdWgmma too: one warpgroup per 64 kv rows
  if (IsWarpSpecialisedBackward(c)) {
    const bool bulk_dq = Get(c, "kernel") >= 3;
    kv.name_expression = Get(c, "kernel") == 4 ? Expr("AttnBwdTma", {d, st, bulk_dq, p.compiled_mask(), 1})
                                               : Expr("AttnBwdTma", {d, st, bulk_dq, p.compiled_mask()});
    kv.shared_bytes = static_cast<unsigned>(dflash_attn::BwdTmaSmemBytes(d, st, bulk_dq));
    kv.threads = dflash_attn::kTmaBwdThreads;
    kv.tensor_maps = true;
  } else if (IsHopperTier(c)) {
    kv.name_expression = Expr("AttnBwdWgmma", {d, bm, bn, st, p.compiled_mask()});
    kv.shared_bytes = static_cast<unsigned>(dflash_attn::BwdSmemBytes(d, bm, bn, st));  // the same buffers
  } else if (WarpLayout(c) == 2) {
    kv.name_expression = Expr("AttnBwdKv2d", {d, bm, bn, bn / 16, st, p.compiled_mask()});
    kv.shared_bytes = static_cast<unsigned>(dflash_attn::Bwd2dSmemBytes(d, bm, bn, st));
  } else {
    kv.name_expression = Expr("AttnBwdKv", {d, bm, bn, bn / 16, st, p.compiled_mask()});
    kv.name_expression.pop_back();
    kv.name_expression += dq == 0 ? ",true>" : ",false>";
    kv.shared_bytes = static_cast<unsigned>(dflash_attn::BwdSmemBytes(d, bm, bn, st));
  }
  const int hg = BackwardHeadsPerGroup(c, p);  // (HG, tiles, NG * batch): attention_schedule.cuh
  kv.grid_x = static_cast<unsigned>(hg);
  kv.grid_y = CeilDiv(p.seq_kv, bn);
  kv.grid_z = static_cast<unsigned>(p.heads_kv / hg * p.batch);
  out.push_back(kv);
  if (dq == 0) {
    KernelLaunch cv = pre;
    cv.name_expression = Expr("AttnBwdDqConvert", {d});
    out.push_back(cv);
  } else {
    KernelLaunch q;
    q.name_expression = Expr("AttnBwdDq", {d, bm, kDqTileN, bm / 16, st, p.compiled_mask()});
    q.grid_x = static_cast<unsigned>(p.heads_q);  // (heads, tiles, batch): attention_schedule.cuh
    q.grid_y = CeilDiv(p.seq_q, bm);
    q.grid_z = static_cast<unsigned>(p.batch);
    q.threads = static_cast<unsigned>(bm / 16 * 32);
    q.shared_bytes = static_cast<unsigned>(dflash_attn::BwdDqSmemBytes(d, bm, kDqTileN, st));
    out.push_back(q);
  }
  return out;
}

}  // namespace dflash::attention
