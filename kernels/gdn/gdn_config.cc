#include "kernels/gdn/gdn_config.h"

#include <algorithm>

#include "kernels/common/space_check.h"
#include "kernels/gdn/gdn_layout.h"
#include "tuner/arch_limits.h"

namespace dflash::gdn {

std::vector<tuner::TunableParam> Params() {
  return {
      {"chunk", {32, 64}, "rows per chunk of the WY/UT formulation"},
      {"state_bv", {16, 32, 64}, "state columns per block of the state pass"},
      {"out_bv", {32, 64, 128}, "output columns per block of the output kernel"},
      {"warps", {4, 8}, "warps per block (prep, state, output)"},
      {"segment_chunks", {0, 8, 16, 32}, "0: sequential state pass; else chunks per segment of the split pass"},
      {"fused", {0, 1, 2, 3},
       "0: separate state and output kernels; 1, 2: one kernel with 1 or 2 load stages; 3: that kernel on wgmma "
       "(sm_90a)"},
      {"piece_chunks", {0, 64},
       "0: prep, then the state pass; else chunks per piece: prep of piece i+1 overlaps the state pass of piece i"},
      {"pass_reserve", {0, 1, 2},
       "0: the wgmma pass's own shared memory; 1, 2: padded so that at most one / no prep block shares its SM "
       "(fused 3 with pieces)"},
      {"prep_heads", {0, 1, 2},
       "0: prep per (chunk, value head); 1: per (chunk, key head), q and k's products once (wgmma pass, chunk 32); "
       "2: that prep folding T into K2 and P, the fused pass reading v, k and q instead of U, W and qg (sequential only)"},
  };
}

std::string GeometryInvalidReason(const tuner::Config& config) {
  if (std::string why = kernels::NotInSpaceReason(Params(), config); !why.empty()) return why;
  if (config.at("fused") > 0 && config.at("out_bv") != kFusedOutBv) {
    return "out_bv is unused when fused (fused configs carry out_bv " + std::to_string(kFusedOutBv) + ")";
  }
  const bool folded_prep_in_8 = config.at("warps") == 8 && config.at("prep_heads") == 2;
  if (IsHopperTier(config) &&
      (config.at("state_bv") != ::gdn::kWgmmaBv || (config.at("warps") != 4 && !folded_prep_in_8))) {
    return "fused " + std::to_string(config.at("fused")) + " (the wgmma pass) is one warpgroup per " +
           std::to_string(::gdn::kWgmmaBv) + " state columns: state_bv " + std::to_string(::gdn::kWgmmaBv) +
           ", warps 4 (8 only for the folded prep beside it, prep_heads 2)";
  }
  if (config.at("prep_heads") == 1 && (!IsHopperTier(config) || config.at("chunk") != 32)) {
    return "prep_heads 1 (prep per key head) writes the wgmma pass's operands (fused 3) at chunk 32 only";
  }
  if (config.at("prep_heads") == 2 &&
      (config.at("fused") == 0 || config.at("chunk") != 32 || config.at("segment_chunks") > 0)) {
    return "prep_heads 2 (prep per key head, T folded into K2 and P) feeds a fused sequential pass at chunk 32 only "
           "(fused > 0, segment_chunks 0: no W, U or kd for the split pass's transfer)";
  }
  if (config.at("piece_chunks") > 0 && (config.at("fused") == 0 || config.at("segment_chunks") > 0)) {
    return "piece_chunks needs the fused kernel and the sequential state pass (fused > 0, segment_chunks 0)";
  }
  if (config.at("pass_reserve") > 0 && (!IsHopperTier(config) || config.at("piece_chunks") == 0)) {
    return "pass_reserve keeps prep off the wgmma pass's SMs while the pieces overlap (fused 3, piece_chunks > 0)";
  }
  return {};
}

// The fused value of the wgmma pass (sm_90a): one home for IsHopperTier and Geometry::IsWgmmaPass.
static bool IsWgmmaFused(std::int64_t fused) { return fused == kFusedWgmma; }

bool IsHopperTier(const tuner::Config& config) {
  auto it = config.find("fused");
  return it != config.end() && IsWgmmaFused(it->second);
}

std::string ArchInvalidReason(const tuner::Config& config, std::string_view arch) {
  if (IsHopperTier(config) && arch != "sm_90a")
    return "the wgmma pass (fused " + std::to_string(config.at("fused")) + ") needs sm_90a, not " + std::string(arch);
  return "";
}

std::string DominatedReason(const tuner::Config& config) {
  if (config.at("fused") == 0) {
    return "dominated: fused 0 (separate state and output kernels) is slower than the fused kernel";
  }
  if (config.at("chunk") == 64) {  // every fused value and prep form (NOTES.md, Tried and dropped)
    return "dominated: chunk 64 is slower than chunk 32 (prep grows quadratically; the wgmma pass's 64-row step "
           "costs 2.5x a 32-row one)";
  }
  if (config.at("segment_chunks") == 8 || config.at("segment_chunks") == 16) {
    return "dominated: segments of " + std::to_string(config.at("segment_chunks")) +
           " chunks (more combine steps) are slower than segments of 32";
  }
  return {};
}

Result<Geometry> GeometryOf(const tuner::Config& config) {
  const std::string why = GeometryInvalidReason(config);
  if (!why.empty()) return InvalidArgument("gdn config: " + why);
  Geometry g;
  g.chunk = static_cast<int>(config.at("chunk"));
  g.state_bv = static_cast<int>(config.at("state_bv"));
  g.out_bv = static_cast<int>(config.at("out_bv"));
  g.warps = static_cast<int>(config.at("warps"));
  g.segment_chunks = static_cast<int>(config.at("segment_chunks"));
  g.fused = static_cast<int>(config.at("fused"));
  g.piece_chunks = static_cast<int>(config.at("piece_chunks"));
  g.prep_heads = static_cast<int>(config.at("prep_heads"));
  g.pass_reserve = static_cast<int>(config.at("pass_reserve"));
  return g;
}

bool Geometry::IsWgmmaPass() const { return IsWgmmaFused(fused); }
unsigned Geometry::fused_threads() const { return IsWgmmaPass() ? ::gdn::kWgmmaThreads : threads(); }

tuner::Config ConfigOf(const Geometry& g) {
  return {{"chunk", g.chunk}, {"state_bv", g.state_bv}, {"out_bv", g.out_bv}, {"warps", g.warps},
          {"segment_chunks", g.segment_chunks}, {"fused", g.fused}, {"piece_chunks", g.piece_chunks},
          {"prep_heads", g.prep_heads}, {"pass_reserve", g.pass_reserve}};
}

KernelNames KernelNamesOf(const Geometry& g) {
  const std::string c = std::to_string(g.chunk), s = std::to_string(g.state_bv), o = std::to_string(g.out_bv),
                    w = std::to_string(g.warps);
  KernelNames n;
  n.prep = g.prep_heads > 0 ? "gdn::gdn_chunk_prep_key<" + c + ", " + w + (g.prep_heads == 2 ? ", true>" : ">")
                              : "gdn::gdn_chunk_prep<" + c + ", " + w +
                                    (g.IsWgmmaPass() ? ", true, true>" : g.fused ? ", true>" : ", false>");
  n.transfer = "gdn::gdn_chunk_state<" + c + ", " + s + ", " + w + ", true>";
  n.combine = "gdn::gdn_state_combine<" + s + ">";
  if (g.fused == kFusedWgmma) {
    n.fused = "gdn::gdn_chunk_fused_wgmma<" + c + (g.prep_heads == 2 ? ", true>" : ">");
  } else if (g.fused) {
    n.fused = "gdn::gdn_chunk_fused<" + c + ", " + s + ", " + w + ", " + std::to_string(g.fused) +
              (g.prep_heads == 2 ? ", true>" : ">");
  } else {
    n.state = "gdn::gdn_chunk_state<" + c + ", " + s + ", " + w + ", false>";
    n.output = "gdn::gdn_chunk_output<" + c + ", " + o + ", " + w + ">";
  }
  n.recurrent = "gdn::gdn_recurrent<" + std::to_string(kRecurrentBv) + ">";
  return n;
}

std::vector<std::string> KernelNames::All() const {
  std::vector<std::string> all;
  for (const std::string* e : {&prep, &state, &transfer, &combine, &output, &fused, &recurrent}) {
    if (!e->empty()) all.push_back(*e);
  }
  return all;
}

int PrepSharedBytesOf(const Geometry& g) {
  return g.prep_heads > 0 ? ::gdn::PrepKeySharedBytes(g.chunk) : ::gdn::PrepSharedBytes(g.chunk);
}
int StateSharedBytesOf(const Geometry& g) { return ::gdn::StateSharedBytes(g.chunk, g.state_bv); }
int CombineSharedBytesOf(const Geometry& g) { return ::gdn::CombineSharedBytes(g.state_bv); }
int OutputSharedBytesOf(const Geometry& g) { return ::gdn::OutputSharedBytes(g.chunk, g.out_bv); }
int PassReserveSharedBytes(const Geometry& g) {
  if (g.pass_reserve == 0) return 0;
  // The wgmma pass's SM (the sm_90a row of the arch table) and what the runtime keeps per resident block.
  static const tuner::ArchLimits hopper = *tuner::LimitsFor("sm_90a");
  const int per_block = hopper.shared_reserved_per_block();
  const int prep = PrepSharedBytesOf(g) + per_block;
  // The least that leaves room for 2 - pass_reserve prep blocks beside the pass and not for one more.
  return hopper.shared_per_sm - per_block - (3 - g.pass_reserve) * prep + 1;
}
int FusedSharedBytesOf(const Geometry& g) {
  if (g.fused == kFusedWgmma) return std::max(::gdn::FusedWgmmaSharedBytes(g.chunk), PassReserveSharedBytes(g));
  if (g.prep_heads == 2) return ::gdn::FusedFoldSharedBytes(g.chunk, g.state_bv, g.fused);
  return ::gdn::FusedSharedBytes(g.chunk, g.state_bv, g.fused);
}
int MaxSharedBytesOf(const Geometry& g) {
  int m = PrepSharedBytesOf(g);
  if (g.fused) {
    m = std::max(m, FusedSharedBytesOf(g));
    if (g.segment_chunks > 0) m = std::max(m, StateSharedBytesOf(g));  // the transfer pass
  } else {
    m = std::max({m, StateSharedBytesOf(g), OutputSharedBytesOf(g)});
  }
  if (g.segment_chunks > 0) m = std::max(m, CombineSharedBytesOf(g));
  return m;
}

std::vector<KernelShape> KernelShapesOf(const Geometry& g) {
  const KernelNames n = KernelNamesOf(g);
  std::vector<KernelShape> shapes = {{n.prep, g.threads(), PrepSharedBytesOf(g)},
                                     {n.transfer, g.threads(), StateSharedBytesOf(g)},
                                     {n.combine, kCombineThreads, CombineSharedBytesOf(g)},
                                     {n.recurrent, 2u * kRecurrentBv, 0}};
  if (g.fused) {
    shapes.push_back({n.fused, g.fused_threads(), FusedSharedBytesOf(g)});
  } else {
    shapes.push_back({n.state, g.threads(), StateSharedBytesOf(g)});
    shapes.push_back({n.output, g.threads(), OutputSharedBytesOf(g)});
  }
  return shapes;
}

}  // namespace dflash::gdn
