// The gdn family's problem, space and tuner-facing description (CPU only).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "kernels/gdn/gdn_config.h"
#include "kernels/gdn/gdn_family.h"
#include "kernels/gdn/gdn_layout.h"
#include "kernels/gdn/gdn_problem.h"
#include "tuner/arch_limits.h"

namespace dflash::gdn {
namespace {

TEST(GdnProblem, TargetShapeParsesAndBucketsTokensUpToAPowerOfTwo) {
  Result<ProblemSpec> s = ParseProblem(MakeProblem(16, 48, 5000, 3, true, true));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->heads, 16);
  EXPECT_EQ(s->value_heads, 48);
  const ProblemSpec b = BucketOf(*s);
  EXPECT_EQ(b.tokens, 8192);
  EXPECT_EQ(b.num_seqs, 4);
  EXPECT_TRUE(b.initial_state);
  EXPECT_EQ(BucketOf(*ParseProblem(MakeProblem(16, 48, 3))).tokens, kMinTokenBucket);
}

TEST(GdnProblem, BadProblemsNameTheField) {
  auto code_of = [](const tuner::Problem& p) { return ParseProblem(p).status().code(); };
  EXPECT_EQ(code_of(MakeProblem(16, 40, 100)), ErrorCode::kInvalidArgument);  // 40 % 16
  EXPECT_EQ(code_of(MakeProblem(16, 48, 0)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(MakeProblem(16, 48, 10, 11)), ErrorCode::kInvalidArgument);
  tuner::Problem p = MakeProblem(16, 48, 100);
  p["head_dim"] = 64;
  EXPECT_EQ(code_of(p), ErrorCode::kUnsupported);
  p = MakeProblem(16, 48, 100);
  p["colour"] = 1;
  Result<ProblemSpec> r = ParseProblem(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("colour"), std::string::npos);
}

TEST(GdnConfig, EveryPointOfTheSpaceHasItsKernelsAndSharedMemory) {
  const tuner::KernelFamily& f = ChunkedForwardFamily();
  EXPECT_EQ(f.name(), "gdn");
  const tuner::Problem bucket = *f.Bucket(MakeProblem(16, 48, 8192));
  std::set<std::string> expressions;
  std::size_t valid = 0, fused_duplicates = 0, hopper_shapes = 0, key_prep = 0, folded_split = 0, unpieceable = 0,
              dominated = 0, hopper = 0, unreserved = 0;
  for (const tuner::Config& c : tuner::EnumerateSpace(f)) {
    const std::string why = f.InvalidReason(c, bucket);
    if (c.at("fused") > 0 && c.at("out_bv") != kFusedOutBv) {
      EXPECT_NE(why.find("out_bv is unused"), std::string::npos) << why;
      ++fused_duplicates;
    } else if (c.at("fused") == 3 &&
               (c.at("state_bv") != 64 || (c.at("warps") != 4 && !(c.at("warps") == 8 && c.at("prep_heads") == 2)))) {
      EXPECT_NE(why.find("one warpgroup per 64 state columns"), std::string::npos) << why;
      ++hopper_shapes;
    } else if (c.at("prep_heads") == 1 && (c.at("fused") < 3 || c.at("chunk") != 32)) {
      EXPECT_NE(why.find("prep_heads 1 (prep per key head)"), std::string::npos) << why;
      ++key_prep;
    } else if (c.at("prep_heads") == 2 &&
               (c.at("fused") == 0 || c.at("chunk") != 32 || c.at("segment_chunks") > 0)) {
      EXPECT_NE(why.find("prep_heads 2 (prep per key head, T folded"), std::string::npos) << why;
      ++folded_split;
    } else if (c.at("piece_chunks") > 0 && (c.at("fused") == 0 || c.at("segment_chunks") > 0)) {
      EXPECT_NE(why.find("piece_chunks needs the fused kernel"), std::string::npos) << why;
      ++unpieceable;
    } else if (c.at("pass_reserve") > 0 && (c.at("fused") != 3 || c.at("piece_chunks") == 0)) {
      EXPECT_NE(why.find("pass_reserve keeps prep off"), std::string::npos) << why;
      ++unreserved;
    } else if (c.at("fused") == 0 || c.at("chunk") == 64 || c.at("segment_chunks") == 8 ||
               c.at("segment_chunks") == 16) {
      EXPECT_EQ(why.rfind("dominated: ", 0), 0u) << why;
      EXPECT_EQ(GeometryInvalidReason(c), "") << "dominated configs stay valid geometries (the API runs them)";
      ++dominated;
    }
    EXPECT_EQ(f.ArchInvalidReason(c, "sm_90a"), "");
    EXPECT_EQ(f.ArchInvalidReason(c, "sm_90").empty(), c.at("fused") < 3) << "the wgmma passes are sm_90a only";
    EXPECT_EQ(f.ArchInvalidReason(c, "sm_120").empty(), c.at("fused") < 3);
    if (!why.empty()) continue;
    ++valid;
    Result<Geometry> g = GeometryOf(c);
    ASSERT_TRUE(g.ok());
    const tuner::CompileSpec spec = f.MakeCompileSpec(c, bucket);
    hopper += IsHopperTier(c) ? 1 : 0;
    EXPECT_EQ(spec.main_file, IsHopperTier(c) ? "gdn_kernels_sm90a.cu" : "gdn_kernels.cu");
    // prep, transfer, combine, recurrent and either state + output or the fused kernel
    ASSERT_EQ(spec.name_expressions.size(), g->fused ? 5u : 6u);
    EXPECT_NE(spec.name_expressions[0].find((g->prep_heads > 0 ? "gdn_chunk_prep_key<" : "gdn_chunk_prep<") +
                                            std::to_string(g->chunk)),
              std::string::npos);
    bool has_fused = false, has_wgmma = false;
    for (const auto& e : spec.name_expressions) {
      expressions.insert(e);
      has_fused = has_fused || e.find("gdn_chunk_fused") != std::string::npos;
      has_wgmma = has_wgmma || e.find("gdn_chunk_fused_wgmma<") != std::string::npos;
    }
    EXPECT_EQ(has_fused, g->fused > 0);
    EXPECT_EQ(has_wgmma, g->fused == 3);
    const auto shape = f.BlockShapeOf(c, bucket);
    EXPECT_EQ(shape.threads, std::max(32u * g->warps, kCombineThreads));
    const int main_kernel = g->fused ? FusedSharedBytesOf(*g) : ::gdn::StateSharedBytes(g->chunk, g->state_bv);
    EXPECT_GE(shape.dynamic_shared_bytes, static_cast<std::size_t>(main_kernel));
  }
  // 8192 tokens: every segment and piece length splits. Fused configs (3 of the 4 fused values) carry one out_bv
  // (2 of its 3 values are duplicates: n x 3 / 4 x 2 / 3); the wgmma pass (fused 3) has one state_bv and one warps
  // value of the 6 pairs (its configs with out_bv 64: n x 1 / 4 x 1 / 3 x 5 / 6), less warps 8 with the folded prep
  // (2 chunks x 4 segments x 2 pieces x 3 pass_reserve = 48, which the rules below judge); prep per key head
  // (prep_heads 1) feeds the wgmma pass at chunk 32 only (fused 0: 2 x 3 x 3 x 2 x 4 x 2 = 288, fused 1, 2:
  // 2 x 3 x 2 x 4 x 2 x 2 = 192, fused 3 at chunk 64: 4 segments x 2 pieces = 8).
  const std::size_t n = tuner::EnumerateSpace(f).size();
  EXPECT_EQ(n, 3u * 3456u);  // x 3 pass_reserve values
  EXPECT_EQ(fused_duplicates, n / 2);
  EXPECT_EQ(hopper_shapes, n * 5 / 72 - 48u);
  EXPECT_EQ(key_prep, 3u * (288u + 192u + 8u));
  // the folded prep (prep_heads 2) feeds the fused passes at chunk 32 without a split: fused 0 (288), fused 1, 2 at
  // chunk 64 (3 x 2 x 4 x 2 x 2 = 96) or with segments (3 x 2 x 3 x 2 x 2 = 72), fused 3 at chunk 64 (8) or with
  // segments (3 x 2 = 6), each of the last two at warps 4 and 8.
  EXPECT_EQ(folded_split, 3u * (288u + 96u + 72u + 2u * (8u + 6u)));
  // pieces (piece_chunks 64) with fused 0 (2 chunks x 3 state_bv x 3 out_bv x 2 warps x 4 segments = 144) or a split
  // pass (fused 1, 2: 2 x 3 x 2 x 3 segments x 2 = 72; fused 3: 2 chunks x 3 segments = 6, and with prep per key
  // head at chunk 32: 3).
  EXPECT_EQ(unpieceable, 3u * (144u + 72u + 6u + 3u));
  // pass_reserve 1, 2 beside anything but the wgmma pass with pieces: what is left of the space's two thirds.
  EXPECT_EQ(valid,
            n - fused_duplicates - hopper_shapes - key_prep - folded_split - unpieceable - unreserved - dominated);
  EXPECT_EQ(valid, 78u) << "chunk 32 only: 2 stages x 3 state_bv x 2 warps, and the wgmma pass (one shape) with "
                           "prep per value or key head, each with pieces of 0 or 64 chunks and the sequential pass, "
                           "or segments of 32 chunks; with the folded prep, the sequential pass of each (24 + 2); "
                           "pass_reserve 1 and 2 for the wgmma pass's 3 configs with pieces (+6); the wgmma pass's "
                           "folded prep in 8 warps, with pieces of 0 or 64 chunks, the latter with each "
                           "pass_reserve (+4)";
  EXPECT_EQ(hopper, 18u);
  EXPECT_GT(expressions.size(), 10u);
}

TEST(GdnConfig, SeedsAreTunedPointsOfTheSpace) {
  const tuner::KernelFamily& f = ChunkedForwardFamily();
  const std::vector<tuner::Config> space = tuner::EnumerateSpace(f);
  for (const tuner::Problem& p : {MakeProblem(16, 48, 8192), MakeProblem(16, 48, 32768, 8)}) {
    const tuner::Problem bucket = *f.Bucket(p);
    const std::vector<tuner::Config> seeds = f.SeedConfigs(bucket);
    ASSERT_FALSE(seeds.empty());
    for (const tuner::Config& c : seeds) {
      EXPECT_NE(std::find(space.begin(), space.end(), c), space.end()) << tuner::ConfigLabel(c);
      EXPECT_EQ(f.InvalidReason(c, bucket), "") << tuner::ConfigLabel(c) << ": a seed must not be a skipped config";
    }
  }
}

TEST(GdnConfig, EachKernelIsPrunedAtItsOwnLaunchShape) {
  const tuner::KernelFamily& f = ChunkedForwardFamily();
  const tuner::Problem bucket = *f.Bucket(MakeProblem(16, 48, 8192));
  // The split pass at 8 warps: 256-thread prep, transfer and fused kernels beside the 128-thread combine and the
  // 64-thread recurrent one; each is checked (registers, shared memory) at the shape it is launched with.
  const tuner::Config split{{"chunk", 32}, {"state_bv", 64}, {"out_bv", 64}, {"warps", 8}, {"segment_chunks", 32},
                            {"fused", 2}, {"piece_chunks", 0}, {"prep_heads", 0}, {"pass_reserve", 0}};
  const KernelNames n = KernelNamesOf(*GeometryOf(split));
  EXPECT_EQ(f.BlockShapeOf(split, bucket).threads, 256u);
  EXPECT_EQ(f.KernelBlockShape(split, bucket, n.fused).threads, 256u);
  EXPECT_EQ(f.KernelBlockShape(split, bucket, n.fused).dynamic_shared_bytes,
            static_cast<std::size_t>(FusedSharedBytesOf(*GeometryOf(split))));
  EXPECT_EQ(f.KernelBlockShape(split, bucket, n.prep).dynamic_shared_bytes,
            static_cast<std::size_t>(PrepSharedBytesOf(*GeometryOf(split))));
  EXPECT_EQ(f.KernelBlockShape(split, bucket, n.combine).threads, kCombineThreads);
  EXPECT_EQ(f.KernelBlockShape(split, bucket, n.combine).dynamic_shared_bytes,
            static_cast<std::size_t>(CombineSharedBytesOf(*GeometryOf(split))));
  EXPECT_EQ(f.KernelBlockShape(split, bucket, n.recurrent).threads, 2u * kRecurrentBv);
  EXPECT_EQ(f.KernelBlockShape(split, bucket, "not a kernel of the variant").threads, 256u) << "the largest";

  // The wgmma pass is one warpgroup whatever its folded prep uses: warps 8 launches prep in 256 threads beside it.
  const tuner::Config hopper{{"chunk", 32},       {"state_bv", 64},    {"out_bv", 64},
                             {"warps", 8},        {"segment_chunks", 0}, {"fused", kFusedWgmma},
                             {"piece_chunks", 64}, {"prep_heads", 2},  {"pass_reserve", 2}};
  ASSERT_EQ(f.InvalidReason(hopper, bucket), "");
  const Geometry hg = *GeometryOf(hopper);
  const KernelNames hn = KernelNamesOf(hg);
  EXPECT_EQ(hn.prep, "gdn::gdn_chunk_prep_key<32, 8, true>");
  EXPECT_EQ(hg.fused_threads(), static_cast<unsigned>(::gdn::kWgmmaThreads));
  EXPECT_EQ(f.KernelBlockShape(hopper, bucket, hn.fused).threads, 128u);
  EXPECT_EQ(f.KernelBlockShape(hopper, bucket, hn.prep).threads, 256u);
  tuner::Config unfolded = hopper;
  unfolded["prep_heads"] = 1;
  EXPECT_NE(f.InvalidReason(unfolded, bucket).find("8 only for the folded prep"), std::string::npos);
}

TEST(GdnConfig, PassReserveLeavesRoomForOnePrepBlockOrNone) {
  // A Hopper SM (228 KiB of shared memory, at most 227 KiB for one block), 1 KiB kept per resident block.
  const tuner::ArchLimits hopper = *tuner::LimitsFor("sm_90a");
  const int kSm = hopper.shared_per_sm, kMaxBlock = hopper.max_shared_per_block;
  const int kPerBlock = hopper.shared_reserved_per_block();
  for (int prep_heads : {0, 1, 2}) {
    Geometry g{.chunk = 32, .state_bv = 64, .out_bv = kFusedOutBv, .warps = 4, .fused = kFusedWgmma,
               .piece_chunks = 64, .prep_heads = prep_heads};
    EXPECT_EQ(FusedSharedBytesOf(g), ::gdn::FusedWgmmaSharedBytes(32)) << "pass_reserve 0 asks for its own only";
    const int prep = PrepSharedBytesOf(g) + kPerBlock;
    for (int reserve : {1, 2}) {
      g.pass_reserve = reserve;
      const int pass = FusedSharedBytesOf(g) + kPerBlock;
      const int beside = 2 - reserve;  // prep blocks that still fit on the pass's SM
      EXPECT_LE(FusedSharedBytesOf(g), kMaxBlock);
      EXPECT_LE(pass + beside * prep, kSm) << "prep_heads " << prep_heads << ", reserve " << reserve;
      EXPECT_GT(pass + (beside + 1) * prep, kSm) << "prep_heads " << prep_heads << ", reserve " << reserve;
    }
  }
}

TEST(GdnConfig, SharedMemoryOfTheDefaultVariantFitsSm120) {
  const Geometry g;  // chunk 64, state 32, out 64, 4 warps
  EXPECT_EQ(PrepSharedBytesOf(g), 54272);  // 4 blocks per H200 SM (4 x (54272 + 1 KiB reserved) <= 228 KiB)
  EXPECT_EQ(StateSharedBytesOf(g), 73728);
  EXPECT_EQ(OutputSharedBytesOf(g), 80128);
  EXPECT_LE(MaxSharedBytesOf(g), 101376);
  Geometry big = g;
  big.out_bv = 128;
  EXPECT_GT(OutputSharedBytesOf(big), 101376) << "expected to be pruned on sm_120 (fits sm_90)";
  Geometry fused = g;
  fused.fused = 1;  // prep stages q where v goes later; the fused kernel keeps h in registers
  EXPECT_EQ(PrepSharedBytesOf(fused), PrepSharedBytesOf(g));
  EXPECT_EQ(FusedSharedBytesOf(fused), 128 * 40 * 2 + 3 * 64 * 136 * 2 + 64 * 72 * 2 + 2 * 64 * 40 * 2);
  EXPECT_EQ(MaxSharedBytesOf(fused), FusedSharedBytesOf(fused));
  Geometry two = fused;
  two.fused = 2;  // a second W, kd, qg, P, U stage
  EXPECT_EQ(FusedSharedBytesOf(two) - FusedSharedBytesOf(fused), 3 * 64 * 136 * 2 + 64 * 72 * 2 + 64 * 40 * 2);
  two.chunk = 32;
  EXPECT_LE(FusedSharedBytesOf(two), 101376) << "two stages of 32-row chunks fit sm_120";
  fused.state_bv = 64;
  EXPECT_LE(FusedSharedBytesOf(fused), 101376) << "64-column fused blocks still fit sm_120";
}

TEST(GdnConfig, ConfigsOutsideTheSpaceAreInvalidWithAReason) {
  const tuner::KernelFamily& f = ChunkedForwardFamily();
  const tuner::Problem bucket = *f.Bucket(MakeProblem(16, 48, 1000));  // bucket 1024 tokens = 16 chunks of 64
  tuner::Config c = ConfigOf(Geometry{});
  EXPECT_EQ(f.InvalidReason(c, bucket).rfind("dominated: fused 0", 0), 0u) << "valid geometry, not tuned";
  EXPECT_EQ(GeometryInvalidReason(c), "");
  c["fused"] = 2;
  EXPECT_EQ(f.InvalidReason(c, bucket).rfind("dominated: chunk 64", 0), 0u);
  c["chunk"] = 32;
  EXPECT_EQ(f.InvalidReason(c, bucket), "");
  c["chunk"] = 48;
  EXPECT_NE(f.InvalidReason(c, bucket).find("chunk"), std::string::npos);
  c = ConfigOf(Geometry{});
  c.erase("warps");
  EXPECT_NE(f.InvalidReason(c, bucket).find("warps"), std::string::npos);
  c = ConfigOf(Geometry{});
  c["segment_chunks"] = 16;
  EXPECT_NE(f.InvalidReason(c, bucket).find("no split"), std::string::npos);
  c["fused"] = 1;
  c["chunk"] = 32;  // 32 chunks of 32 in the bucket
  c["segment_chunks"] = 8;
  EXPECT_EQ(f.InvalidReason(c, bucket).rfind("dominated: segments of 8", 0), 0u);
  c = ConfigOf(Geometry{});
  c["fused"] = 1;
  c["chunk"] = 32;
  EXPECT_EQ(f.InvalidReason(c, bucket), "");
  c["out_bv"] = 32;
  EXPECT_NE(f.InvalidReason(c, bucket).find("out_bv is unused"), std::string::npos);
  c["out_bv"] = kFusedOutBv;
  c["fused"] = 3;
  EXPECT_NE(f.InvalidReason(c, bucket).find("fused"), std::string::npos);
  c["fused"] = 2;
  c["piece_chunks"] = 64;  // 1024 tokens = 32 chunks of 32: one piece
  EXPECT_NE(f.InvalidReason(c, bucket).find("one piece"), std::string::npos);
  c["segment_chunks"] = 32;
  EXPECT_NE(f.InvalidReason(c, bucket).find("piece_chunks needs"), std::string::npos);
}

}  // namespace
}  // namespace dflash::gdn
