// CPU tests of the attention families' host side: problem parsing and buckets, the parameter spaces, invalid
// configs with their reasons, launch geometry and the O(rows) backward workspace, the launch argument checks, and
// the CPU reference's basic identities (rows that see nothing are exactly 0 / -inf; packed rows' doc_start hides
// the context below it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "kernels/attention/attention_api.h"
#include "kernels/attention/attention_config.h"
#include "kernels/attention/attention_family.h"
#include "kernels/attention/attention_params.cuh"
#include "kernels/attention/attention_problem.h"
#include "kernels/attention/attention_schedule.cuh"
#include "kernels/attention/reference.h"

namespace dflash::attention {
namespace {

tuner::Problem DflashProblem(int blocks, int ctx, const char* mask = "dflash_full") {
  return {{"mask", mask}, {"batch", 1}, {"heads_q", 32}, {"heads_kv", 8}, {"head_dim", 128},
          {"seq_q", blocks * 16}, {"seq_kv", ctx + blocks * 16}, {"ctx_len", ctx}, {"block_size", 16}};
}

TEST(AttentionProblem, ParsesTheDrafterShapeAndRejectsInconsistentOnes) {
  Result<ProblemSpec> s = ParseProblem(DflashProblem(512, 8192), Direction::kBackward);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->num_blocks(), 512);
  tuner::Problem bad = DflashProblem(512, 8192);
  bad["seq_kv"] = 100;
  EXPECT_EQ(ParseProblem(bad, Direction::kForward).status().code(), ErrorCode::kInvalidArgument);
  bad = DflashProblem(512, 8192);
  bad["heads_kv"] = 5;
  EXPECT_NE(ParseProblem(bad, Direction::kForward).status().message().find("multiple of heads_kv"), std::string::npos);
  bad = DflashProblem(512, 8192);
  bad["colour"] = 1;
  EXPECT_NE(ParseProblem(bad, Direction::kForward).status().message().find("unknown field 'colour'"), std::string::npos);
  tuner::Problem target = {{"mask", "causal"}, {"heads_q", 24}, {"heads_kv", 4}, {"head_dim", 256}, {"seq_q", 8192}};
  EXPECT_TRUE(ParseProblem(target, Direction::kForward).ok());
  EXPECT_EQ(ParseProblem(target, Direction::kBackward).status().code(), ErrorCode::kUnsupported);
  tuner::Problem doc = {{"mask", "doc_causal"}, {"heads_q", 8}, {"head_dim", 128}, {"seq_q", 4096}};
  EXPECT_EQ(ParseProblem(doc, Direction::kForward).status().code(), ErrorCode::kInvalidArgument);  // num_docs
  doc["num_docs"] = 3;
  EXPECT_TRUE(ParseProblem(doc, Direction::kForward).ok());
}

TEST(AttentionProblem, BucketRoundsSizesUpAndKeepsTheDflashStructure) {
  ProblemSpec s = *ParseProblem(DflashProblem(300, 3000, "dflash_sliding"), Direction::kForward);
  ProblemSpec b = BucketOf(s);
  EXPECT_EQ(b.num_blocks(), 512);
  EXPECT_EQ(b.ctx_len, 4096);
  EXPECT_EQ(b.seq_kv, b.ctx_len + b.seq_q);
  EXPECT_EQ(b.window, 2048);
  EXPECT_TRUE(Validate(b, Direction::kForward).ok());
  // Bucketing is idempotent.
  ProblemSpec bb = BucketOf(b);
  EXPECT_EQ(ToJson(bb), ToJson(b));
}

TEST(AttentionProblem, DocBoundIsADflashKeyOfItsOwnAndAbsentFromUnpackedKeys) {
  tuner::Problem packed = DflashProblem(512, 4096, "dflash_sliding");
  packed["doc_bound"] = true;
  Result<ProblemSpec> s = ParseProblem(packed, Direction::kBackward);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->doc_bound);
  EXPECT_EQ(ToJson(BucketOf(*s)).value("doc_bound", false), true);
  EXPECT_EQ(s->compiled_mask(), dflash_attn::kMaskDflashSliding | dflash_attn::kMaskDocBound);
  // Unpacked problems serialise without the field, so the keys warmed before it existed stay valid.
  const ProblemSpec unpacked = *ParseProblem(DflashProblem(512, 4096, "dflash_sliding"), Direction::kBackward);
  EXPECT_FALSE(ToJson(unpacked).contains("doc_bound"));
  EXPECT_EQ(unpacked.compiled_mask(), dflash_attn::kMaskDflashSliding);
  EXPECT_NE(ForwardFamily().Bucket(packed)->dump(), ForwardFamily().Bucket(DflashProblem(512, 4096, "dflash_sliding"))->dump());
  // The kernels of a packed problem are the document-bound instantiations; of an unpacked one, the plain ones.
  const tuner::Config fwd = {{"block_m", 64}, {"block_n", 64}, {"warps", 4}, {"stages", 2}};
  EXPECT_NE(ForwardLaunches(fwd, *s).front().name_expression.find(
                "," + std::to_string(dflash_attn::kMaskDflashSliding | dflash_attn::kMaskDocBound) + ">"),
            std::string::npos);
  EXPECT_NE(ForwardLaunches(fwd, unpacked).front().name_expression.find(
                "," + std::to_string(dflash_attn::kMaskDflashSliding) + ">"),
            std::string::npos);
  tuner::Problem bad = {{"mask", "causal"}, {"heads_q", 8}, {"head_dim", 128}, {"seq_q", 256}, {"doc_bound", true}};
  EXPECT_NE(ParseProblem(bad, Direction::kForward).status().message().find("DFlash masks only"), std::string::npos);
  packed["doc_bound"] = 1;
  EXPECT_NE(ParseProblem(packed, Direction::kForward).status().message().find("true or false"), std::string::npos);
  EXPECT_TRUE(dflash_attn::IsCompiledMask(dflash_attn::kMaskDflashFull | dflash_attn::kMaskDocBound));
  EXPECT_FALSE(dflash_attn::IsCompiledMask(dflash_attn::kMaskCausal | dflash_attn::kMaskDocBound));
}

TEST(AttentionConfig, SpacesHaveTheTunablesTheIssueAsksFor) {
  std::set<std::string> fwd, bwd;
  for (const auto& p : ForwardFamily().params()) fwd.insert(p.name);
  for (const auto& p : BackwardFamily().params()) bwd.insert(p.name);
  EXPECT_EQ(fwd, (std::set<std::string>{"block_m", "block_n", "warps", "stages", "kernel"}));
  EXPECT_EQ(bwd, (std::set<std::string>{"block_m", "block_n", "stages", "dq_mode", "warp_layout", "head_groups", "kernel"}));
  EXPECT_EQ(ForwardFamily().name(), "attention_fwd");
  EXPECT_EQ(BackwardFamily().name(), "attention_bwd");
}

// The seeds (earlier winners the search measures first) are points of the space, valid for the drafter's and
// the causal shapes, so a budgeted warmup really starts from them.
TEST(AttentionConfig, SeedsAreValidPointsOfTheSpace) {
  const tuner::Problem causal = {{"mask", "causal"}, {"heads_q", 32}, {"heads_kv", 8}, {"head_dim", 128},
                                 {"seq_q", 8192}};
  for (const tuner::KernelFamily* f : {&ForwardFamily(), &BackwardFamily()}) {
    const std::vector<tuner::Config> space = tuner::EnumerateSpace(*f);
    for (const tuner::Problem& p : {DflashProblem(512, 8192), DflashProblem(512, 8192, "dflash_sliding"), causal}) {
      const tuner::Problem bucket = *f->Bucket(p);
      const std::vector<tuner::Config> seeds = f->SeedConfigs(bucket);
      EXPECT_FALSE(seeds.empty()) << f->name();
      for (const tuner::Config& c : seeds) {
        EXPECT_NE(std::find(space.begin(), space.end(), c), space.end()) << f->name() << " " << tuner::ConfigLabel(c);
        EXPECT_EQ(f->InvalidReason(c, bucket), "") << f->name() << " " << tuner::ConfigLabel(c) << " " << p.dump();
      }
    }
  }
}

TEST(AttentionConfig, InvalidConfigsSayWhy) {
  const ProblemSpec s = *ParseProblem(DflashProblem(512, 8192), Direction::kForward);
  EXPECT_NE(ForwardInvalidReason({{"block_m", 64}, {"block_n", 64}, {"warps", 8}, {"stages", 2}}, s).find("16 * warps"),
            std::string::npos);
  EXPECT_EQ(ForwardInvalidReason({{"block_m", 64}, {"block_n", 64}, {"warps", 4}, {"stages", 2}}, s), "");
  EXPECT_NE(BackwardInvalidReason({{"block_m", 64}, {"block_n", 96}, {"stages", 1}, {"dq_mode", 0}}, s), "");
  EXPECT_EQ(BackwardInvalidReason({{"block_m", 64}, {"block_n", 64}, {"stages", 1}, {"dq_mode", 0}}, s), "");
  // The 2-D warp layout: (block_n / 32) * (block_m / 32) warps must equal the launch's block_n / 16, dQ by atomics.
  EXPECT_EQ(BackwardInvalidReason({{"block_m", 64}, {"block_n", 128}, {"stages", 1}, {"dq_mode", 0}, {"warp_layout", 2}}, s), "");
  EXPECT_NE(BackwardInvalidReason({{"block_m", 32}, {"block_n", 128}, {"stages", 1}, {"dq_mode", 0}, {"warp_layout", 2}}, s)
                .find("block_m 64"), std::string::npos);
  EXPECT_NE(BackwardInvalidReason({{"block_m", 64}, {"block_n", 128}, {"stages", 1}, {"dq_mode", 1}, {"warp_layout", 2}}, s)
                .find("dq_mode 0"), std::string::npos);
  EXPECT_NE(BackwardInvalidReason({{"block_m", 64}, {"block_n", 128}, {"stages", 1}, {"dq_mode", 0}, {"warp_layout", 3}}, s),
            "");
  // Three query-tile buffers: the warp-specialised kernel 2 only (kernel 3's dQ tile would not fit beside them).
  auto tma = [](int kernel, int stages) {
    return tuner::Config{{"block_m", 64}, {"block_n", 128}, {"stages", stages}, {"dq_mode", 0}, {"kernel", kernel}};
  };
  EXPECT_EQ(BackwardInvalidReason(tma(2, 3), s), "");
  EXPECT_NE(BackwardInvalidReason(tma(3, 3), s).find("kernel 2 only"), std::string::npos);
  EXPECT_NE(BackwardInvalidReason({{"block_m", 64}, {"block_n", 128}, {"stages", 3}, {"dq_mode", 0}}, s)
                .find("kernel 2 only"), std::string::npos);
  // A sequence longer than the tile-class table allows is refused for the config, not silently wrong.
  ProblemSpec longs = s;
  longs.mask = 0;
  longs.seq_q = longs.seq_kv = 2048 * 32 + 1;
  EXPECT_NE(ForwardInvalidReason({{"block_m", 64}, {"block_n", 32}, {"warps", 4}, {"stages", 2}}, longs)
                .find("tile-class table"), std::string::npos);
}

TEST(AttentionConfig, LaunchesCoverEveryRowAndNameTheMaskKind) {
  const ProblemSpec s = *ParseProblem(DflashProblem(37, 500), Direction::kBackward);  // 592 x 1092: no tile multiple
  auto f = ForwardLaunches({{"block_m", 128}, {"block_n", 64}, {"warps", 8}, {"stages", 2}}, s);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].name_expression, "dflash_attn::AttnFwd<128,128,64,8,2,3>");
  // Grid (heads, tiles, batch): every head of a tile starts together (attention_schedule.cuh).
  EXPECT_EQ(f[0].grid_y * 128u >= 592u && (f[0].grid_y - 1) * 128u < 592u, true);
  EXPECT_EQ(f[0].grid_x, 32u);
  EXPECT_EQ(f[0].grid_z, 1u);
  EXPECT_LE(f[0].shared_bytes, 101376u);
  // The persistent forward: one launch over every (batch, tile, head); the launch clamps the grid to the SMs.
  auto fp = ForwardLaunches({{"block_m", 128}, {"block_n", 128}, {"warps", 4}, {"stages", 2}, {"kernel", 6}}, s);
  ASSERT_EQ(fp.size(), 1u);
  EXPECT_EQ(fp[0].name_expression, "dflash_attn::AttnFwdTmaPersistent<128,128,2,3>");
  EXPECT_TRUE(fp[0].persistent);
  EXPECT_TRUE(fp[0].tensor_maps);
  EXPECT_EQ(fp[0].grid_x, 32u * 5u * static_cast<unsigned>(s.batch));  // 592 rows: 5 query tiles of 128
  EXPECT_EQ(fp[0].grid_y * fp[0].grid_z, 1u);
  EXPECT_EQ(fp[0].shared_bytes, static_cast<unsigned>(dflash_attn::FwdTmaPersistentSmemBytes(128, 128, 2)));
  EXPECT_FALSE(f[0].persistent);
  auto b = BackwardLaunches({{"block_m", 64}, {"block_n", 64}, {"stages", 1}, {"dq_mode", 0}}, s);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1].name_expression, "dflash_attn::AttnBwdKv<128,64,64,4,1,3,true>");
  EXPECT_EQ(b[1].grid_y, (1092u + 63u) / 64u);
  EXPECT_EQ(b[1].grid_x, 8u);  // one block per kv head: the GQA group is reduced inside
  EXPECT_EQ(b[2].name_expression, "dflash_attn::AttnBwdDqConvert<128>");
  auto b1 = BackwardLaunches({{"block_m", 64}, {"block_n", 64}, {"stages", 1}, {"dq_mode", 1}}, s);
  EXPECT_EQ(b1[2].name_expression, "dflash_attn::AttnBwdDq<128,64,64,4,1,3>");
  EXPECT_EQ(b1[2].grid_x, 32u);
  EXPECT_EQ(b1[2].grid_y, (592u + 63u) / 64u);
  auto b2 = BackwardLaunches({{"block_m", 64}, {"block_n", 128}, {"stages", 2}, {"dq_mode", 0}, {"warp_layout", 2}}, s);
  ASSERT_EQ(b2.size(), 3u);
  EXPECT_EQ(b2[1].name_expression, "dflash_attn::AttnBwdKv2d<128,64,128,8,2,3>");
  EXPECT_EQ(b2[1].threads, 256u);
  EXPECT_EQ(b2[1].shared_bytes, static_cast<unsigned>((2 * 128 * 128 + 2 * 2 * 64 * 128 + 2 * 64 * 128) * 2 +
                                                      2 * 64 * 24 + dflash_attn::kMaxTiles));
  EXPECT_EQ(b2[2].name_expression, "dflash_attn::AttnBwdDqConvert<128>");
  // The warp-specialised backward: 384 threads, tensor maps, its own shared-memory carve-up.
  const tuner::Config ws = {{"block_m", 64}, {"block_n", 128}, {"stages", 2}, {"dq_mode", 0}, {"kernel", 2}};
  EXPECT_EQ(BackwardInvalidReason(ws, s), "");
  auto b3 = BackwardLaunches(ws, s);
  ASSERT_EQ(b3.size(), 3u);
  EXPECT_EQ(b3[1].name_expression, "dflash_attn::AttnBwdTma<128,2,0,3>");
  EXPECT_EQ(b3[1].threads, 384u);
  EXPECT_TRUE(b3[1].tensor_maps);
  EXPECT_FALSE(b3[0].tensor_maps);
  EXPECT_EQ(b3[1].grid_y, (1092u + 127u) / 128u);
  EXPECT_EQ(b3[1].shared_bytes, static_cast<unsigned>((2 * 128 * 128 + 2 * 2 * 64 * 128 + 2 * 64 * 128) * 2 +
                                                      2 * 64 * 24 + 2 * 16 + 16 + dflash_attn::kMaxTiles + 8 * 7));
  tuner::Config ws_bad = ws;
  ws_bad["block_n"] = 64;
  EXPECT_NE(BackwardInvalidReason(ws_bad, s).find("fixed tile"), std::string::npos);
  ws_bad = ws;
  ws_bad["stages"] = 1;
  EXPECT_NE(BackwardInvalidReason(ws_bad, s).find("stages 2"), std::string::npos);
}

// The head-grouped dK/dV launch: groups sized to the 32 MiB working set, and the kernel's (x, z) -> (batch, head)
// map (attention_schedule.cuh) visits every (batch, kv head) exactly once per kv tile, group after group.
TEST(AttentionConfig, HeadGroupedLaunchCoversEveryHeadOnceGroupByGroup) {
  const tuner::Config grouped = {{"block_m", 64}, {"block_n", 128}, {"stages", 1}, {"dq_mode", 0},
                                 {"warp_layout", 2}, {"head_groups", 1}};
  tuner::Problem causal = {{"mask", "causal"}, {"batch", 3}, {"heads_q", 32}, {"heads_kv", 32}, {"head_dim", 128},
                           {"seq_q", 8192}, {"seq_kv", 8192}};
  const ProblemSpec c = *ParseProblem(causal, Direction::kBackward);
  EXPECT_EQ(BackwardHeadsPerGroup(grouped, c), 4);  // 8 MiB of Q, dO, dQ rows per head
  tuner::Config plain = grouped;
  plain["head_groups"] = 0;
  EXPECT_EQ(BackwardHeadsPerGroup(plain, c), 32);
  tuner::Config separate = grouped;
  separate["warp_layout"] = 1;
  separate["dq_mode"] = 1;
  EXPECT_EQ(BackwardHeadsPerGroup(separate, c), 8);  // no accumulator: 4 MiB per head
  const ProblemSpec d = *ParseProblem(DflashProblem(512, 8192), Direction::kBackward);
  EXPECT_EQ(BackwardHeadsPerGroup(grouped, d), 1);  // 4 query heads x 8 MiB per kv head
  EXPECT_EQ(BackwardInvalidReason(grouped, d), "");
  separate["head_groups"] = 2;
  EXPECT_NE(BackwardInvalidReason(separate, d), "");

  for (const ProblemSpec& s : {c, d}) {
    const std::vector<KernelLaunch> l = BackwardLaunches(grouped, s);
    ASSERT_EQ(l.size(), 3u);
    const KernelLaunch& kv = l[1];
    EXPECT_EQ(kv.grid_x * kv.grid_z, static_cast<unsigned>(s.heads_kv * s.batch));
    std::vector<int> seen(static_cast<std::size_t>(s.batch * s.heads_kv), 0);
    int last_group = -1;
    for (unsigned z = 0; z < kv.grid_z; ++z)
      for (unsigned x = 0; x < kv.grid_x; ++x) {
        int b = -1, h = -1;
        dflash_attn::GroupedHeadOf(static_cast<int>(s.heads_kv), static_cast<int>(kv.grid_x), static_cast<int>(x),
                                   static_cast<int>(z), b, h);
        ASSERT_TRUE(b >= 0 && b < s.batch && h >= 0 && h < s.heads_kv) << b << " " << h;
        ++seen[static_cast<std::size_t>(b * s.heads_kv + h)];
        const int group = b * static_cast<int>(s.heads_kv) + h / static_cast<int>(kv.grid_x);
        EXPECT_GE(group, last_group);  // blocks issue in z order: groups one after another
        last_group = group;
      }
    for (int n : seen) EXPECT_EQ(n, 1);
  }
  // head_groups 0: the (heads, tiles, batch) grid, which GroupedHeadOf reads as one group per batch.
  const KernelLaunch kv0 = BackwardLaunches(plain, c)[1];
  EXPECT_EQ(kv0.grid_x, 32u);
  EXPECT_EQ(kv0.grid_z, 3u);
  int b = -1, h = -1;
  dflash_attn::GroupedHeadOf(32, 32, 5, 2, b, h);
  EXPECT_EQ(b, 2);
  EXPECT_EQ(h, 5);
}

TEST(AttentionApi, BackwardWorkspaceIsRowsNotScores) {
  // The 512-anchor drafter shape: a dense fallback would hold 32 x 8192 x 16384 fp32 scores (16 GiB) per matrix;
  // our extra memory is delta (+ the fp32 dQ accumulator), both O(rows), under 0.2 GiB.
  const ProblemSpec s = *ParseProblem(DflashProblem(512, 8192), Direction::kBackward);
  const double gib = 1024.0 * 1024 * 1024;
  const std::size_t atomic = BackwardWorkspaceBytes(s, {{"dq_mode", 0}});
  const std::size_t separate = BackwardWorkspaceBytes(s, {{"dq_mode", 1}});
  EXPECT_LT(atomic / gib, 0.2);
  EXPECT_EQ(separate, 32u * 8192u * 4u);
  EXPECT_GE(atomic, 32u * 8192u * 4u + 32u * 8192u * 128u * 4u);
}

TEST(AttentionApi, DocStartGoesWithADocBoundProblemOnlyAndMustBeAligned) {
  AttentionArgs a;
  const CUdeviceptr fake = 0x10000;  // never dereferenced: the argument checks fail first
  a.q = a.k = a.v = a.o = TensorRef::Bshd(fake, 256, 8, 128);
  a.lse = fake;
  a.anchors = fake;
  a.problem = *ParseProblem(DflashProblem(16, 128), Direction::kForward);
  const tuner::LoadedVariant none;
  auto expect_refused = [&](const char* why) {
    const Status st = LaunchForward(none, a, nullptr);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
  };
  a.doc_start = fake;  // an unpacked problem's kernels would ignore it: refused, never silently dropped
  expect_refused("needs a problem with doc_bound");
  a.problem.doc_bound = true;
  a.doc_start = 0;
  expect_refused("needs doc_start");
  a.doc_start = fake + 2;
  expect_refused("4-byte aligned");
}

TEST(AttentionReference, DocStartHidesTheContextBelowItFromItsBlockOnly) {
  for (const char* mask : {"dflash_full", "dflash_sliding"}) {
    tuner::Problem pj = DflashProblem(6, 300, mask);
    if (std::string(mask) == "dflash_sliding") pj["window"] = 120;
    pj["doc_bound"] = true;
    ProblemSpec s = *ParseProblem(pj, Direction::kBackward);
    s.heads_q = s.heads_kv = 1;
    HostInputs in = RandomInputs(s, 21);
    ASSERT_EQ(in.doc_start.size(), in.anchors.size());
    HostInputs unpacked = in;
    unpacked.doc_start.clear();
    EXPECT_LT(VisiblePairs(in), VisiblePairs(unpacked)) << mask << ": the random document starts cut nothing";
    // Block j with a document start inside its context: its rows ignore new K / V rows below the start, and
    // see them without the bound.
    int j = -1;
    for (int c = 0; c < 5; ++c)
      if (in.valid[c] && in.doc_start[c] > 0 && in.doc_start[c] < in.anchors[c]) j = c;
    ASSERT_GE(j, 0) << mask << ": no block with a document start inside its context (seed)";
    const int q = j * 16 + 3, below = in.doc_start[j] - 1;
    HostInputs changed = in, changed_unpacked = unpacked;
    for (HostInputs* h : {&changed, &changed_unpacked})
      for (int i = 0; i < s.head_dim; ++i) {
        h->k[h->Off(0, 0, below, s.seq_kv, 1) + i] = FloatToBf16(3.0f);
        h->v[h->Off(0, 0, below, s.seq_kv, 1) + i] = FloatToBf16(-5.0f);
      }
    // Without the bound, row q (slot 3) sees kv `below` < anchor when it is inside the window (spec section 4).
    const bool seen_unpacked = std::string(mask) == "dflash_full" || below >= in.anchors[j] + 3 - (s.window - 1);
    EXPECT_EQ(ForwardRow(in, 0, 0, q, Precision::kFloat64).o, ForwardRow(changed, 0, 0, q, Precision::kFloat64).o);
    if (seen_unpacked) {
      EXPECT_NE(ForwardRow(unpacked, 0, 0, q, Precision::kFloat64).o,
                ForwardRow(changed_unpacked, 0, 0, q, Precision::kFloat64).o);
    }
  }
}

TEST(AttentionReference, RowsThatSeeNothingAreZeroWithMinusInfinityLse) {
  ProblemSpec s = *ParseProblem(DflashProblem(4, 64), Direction::kBackward);
  s.heads_q = 2;
  s.heads_kv = 1;
  HostInputs in = RandomInputs(s, 7);
  ASSERT_EQ(in.valid.back(), 0);  // the last block is padding
  for (Precision p : {Precision::kFloat64, Precision::kPlainBf16}) {
    RowForward r = ForwardRow(in, 0, 1, 3 * 16 + 5, p);
    EXPECT_TRUE(std::isinf(r.lse) && r.lse < 0);
    for (double x : r.o) EXPECT_EQ(x, 0.0);
    RowCache cache(in, p);
    for (double x : DqRow(in, cache, 0, 1, 3 * 16 + 5, p)) EXPECT_EQ(x, 0.0);
  }
  // A visible row's probabilities sum to one: O of a V that is all ones... checked via LSE finiteness here.
  EXPECT_FALSE(std::isinf(ForwardRow(in, 0, 0, 0, Precision::kFloat64).lse));
}

TEST(AttentionReference, PlainBf16ErrorIsNonZeroButSmall) {
  ProblemSpec s = *ParseProblem(DflashProblem(4, 200), Direction::kBackward);
  s.heads_q = 4;
  s.heads_kv = 1;
  HostInputs in = RandomInputs(s, 11);
  double worst = 0;
  for (int q = 0; q < 48; ++q) {
    RowForward e = ForwardRow(in, 0, 2, q, Precision::kFloat64), p = ForwardRow(in, 0, 2, q, Precision::kPlainBf16);
    for (std::size_t i = 0; i < e.o.size(); ++i) worst = std::max(worst, std::abs(e.o[i] - p.o[i]));
  }
  EXPECT_GT(worst, 1e-5);  // the yardstick is a real bf16 computation
  EXPECT_LT(worst, 5e-2);
}

}  // namespace
}  // namespace dflash::attention
