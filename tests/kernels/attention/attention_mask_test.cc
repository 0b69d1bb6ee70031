// CPU tests of kernels/attention/attention_mask.cuh: the per-element visibility and the tile classification the
// kernels use, against dense masks built here straight from the spec text (dflash-training.md section 4; packed
// rows: trainer/ops/ops.h DraftMask::doc_start, block j's context also kv >= doc_start[j]).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/attention_mask.cuh"
#include "kernels/attention/attention_params.cuh"

namespace {

using dflash_attn::MaskParams;

struct MaskCase {
  int kind = dflash_attn::kMaskNone;
  int batch = 1, seq_q = 0, seq_kv = 0;
  std::vector<int> cu;                  // doc-causal
  std::vector<int> anchors;             // DFlash [batch][num_blocks]
  std::vector<unsigned char> valid;     // DFlash [batch][num_blocks]
  std::vector<int> doc_start;           // DFlash [batch][num_blocks] (packed rows), empty: no bound
  int block_size = 16, ctx = 0, window = 2048;
  int num_blocks() const { return kind >= dflash_attn::kMaskDflashFull ? seq_q / block_size : 0; }
  MaskParams Params() const {
    MaskParams m{};
    m.kind = kind;
    m.seq_q = seq_q;
    m.seq_kv = seq_kv;
    m.cu_seqlens = cu.empty() ? nullptr : cu.data();
    m.num_docs = cu.empty() ? 0 : static_cast<int>(cu.size()) - 1;
    m.anchors = anchors.empty() ? nullptr : anchors.data();
    m.block_valid = valid.empty() ? nullptr : valid.data();
    m.doc_start = doc_start.empty() ? nullptr : doc_start.data();
    m.num_blocks = num_blocks();
    m.block_size = block_size;
    m.ctx_len = ctx;
    m.window = window;
    return m;
  }
};

// The dense mask of batch b, [seq_q][seq_kv], written from the definitions (not from the header under test).
std::vector<std::uint8_t> Dense(const MaskCase& c, int b) {
  std::vector<std::uint8_t> m(static_cast<std::size_t>(c.seq_q) * c.seq_kv, 0);
  auto set = [&](int q, int kv) {
    if (q >= 0 && q < c.seq_q && kv >= 0 && kv < c.seq_kv) m[static_cast<std::size_t>(q) * c.seq_kv + kv] = 1;
  };
  switch (c.kind) {
    case dflash_attn::kMaskNone:
      std::fill(m.begin(), m.end(), 1);
      break;
    case dflash_attn::kMaskCausal:
      for (int q = 0; q < c.seq_q; ++q)
        for (int kv = 0; kv < c.seq_kv; ++kv)
          if (kv <= q + (c.seq_kv - c.seq_q)) set(q, kv);
      break;
    case dflash_attn::kMaskDocCausal:
      for (std::size_t d = 0; d + 1 < c.cu.size(); ++d)
        for (int q = c.cu[d]; q < c.cu[d + 1]; ++q)
          for (int kv = c.cu[d]; kv <= q; ++kv) set(q, kv);
      break;
    default: {  // DFlash: query row r of block j = r / 16 sees context kv < a_j and its own block
      const bool sliding = c.kind == dflash_attn::kMaskDflashSliding;
      for (int j = 0; j < c.num_blocks(); ++j) {
        if (!c.valid[b * c.num_blocks() + j]) continue;  // invalid blocks see nothing
        const int a = c.anchors[b * c.num_blocks() + j];
        for (int r = j * c.block_size; r < (j + 1) * c.block_size; ++r) {
          const int off = r % c.block_size;
          for (int kv = 0; kv < c.ctx; ++kv) {
            bool vis = kv < a;
            if (sliding) vis = vis && kv >= a + off - (c.window - 1);
            if (!c.doc_start.empty()) vis = vis && kv >= c.doc_start[b * c.num_blocks() + j];
            if (vis) set(r, kv);
          }
          for (int k = 0; k < c.block_size; ++k)
            if (!sliding || k <= off) set(r, c.ctx + j * c.block_size + k);
        }
      }
    }
  }
  return m;
}

MaskCase RandomDflash(std::mt19937& rng, int kind, int batch, int blocks, int ctx, int window, bool with_invalid) {
  MaskCase c;
  c.kind = kind;
  c.batch = batch;
  c.seq_q = blocks * 16;
  c.ctx = ctx;
  c.seq_kv = ctx + blocks * 16;
  c.window = window;
  for (int b = 0; b < batch; ++b) {
    const int invalid = with_invalid ? std::uniform_int_distribution<int>(0, blocks / 2)(rng) : 0;
    std::vector<int> a;
    for (int j = 0; j < blocks - invalid; ++j) a.push_back(std::uniform_int_distribution<int>(0, ctx)(rng));
    std::sort(a.begin(), a.end());
    for (int j = 0; j < blocks; ++j) {
      c.anchors.push_back(j < blocks - invalid ? a[j] : 0);
      c.valid.push_back(j < blocks - invalid ? 1 : 0);
    }
  }
  return c;
}

// `c` with per-block document starts: the start of the random document holding each anchor (cut points, half on
// multiples of 32 so that whole tiles lie on either side), or for about one block in four any value in
// [-3, ctx + 20] (also past the anchor, unsorted).
MaskCase WithDocStarts(std::mt19937& rng, MaskCase c) {
  std::uniform_int_distribution<int> pos(1, std::max(1, c.ctx - 1)), any(-3, c.ctx + 20), pick(0, 3);
  for (int b = 0; b < c.batch; ++b) {
    std::vector<int> cuts{0};
    for (int i = 0; i < 5; ++i) cuts.push_back(i % 2 ? pos(rng) / 32 * 32 : pos(rng));
    std::sort(cuts.begin(), cuts.end());
    for (int j = 0; j < c.num_blocks(); ++j) {
      int start = 0;
      for (int cut : cuts)
        if (cut <= c.anchors[b * c.num_blocks() + j]) start = cut;
      c.doc_start.push_back(pick(rng) == 0 ? any(rng) : start);
    }
  }
  return c;
}

std::vector<MaskCase> AllCases() {
  std::mt19937 rng(20261129);
  std::vector<MaskCase> cs;
  for (auto [q, kv] : std::vector<std::pair<int, int>>{{1, 1}, {77, 77}, {130, 61}, {61, 250}, {200, 200}}) {
    MaskCase n;
    n.seq_q = q;
    n.seq_kv = kv;
    cs.push_back(n);
    MaskCase c = n;
    c.kind = dflash_attn::kMaskCausal;
    cs.push_back(c);
  }
  for (auto cu : std::vector<std::vector<int>>{{0, 50, 50, 120, 190}, {5, 17, 90, 160}, {0, 1, 2, 3}, {0, 200}}) {
    MaskCase d;
    d.kind = dflash_attn::kMaskDocCausal;
    d.seq_q = d.seq_kv = 200;
    d.cu = cu;
    cs.push_back(d);
  }
  for (int kind : {dflash_attn::kMaskDflashFull, dflash_attn::kMaskDflashSliding}) {
    cs.push_back(RandomDflash(rng, kind, 2, 9, 300, 40, true));
    cs.push_back(RandomDflash(rng, kind, 1, 12, 500, 2048, false));
    cs.push_back(RandomDflash(rng, kind, 2, 7, 150, 17, true));
    cs.push_back(RandomDflash(rng, kind, 1, 5, 64, 1, false));
  }
  // Packed rows: every DFlash case above again with per-block document starts.
  const std::size_t unpacked = cs.size();
  for (std::size_t i = 0; i < unpacked; ++i)
    if (cs[i].kind >= dflash_attn::kMaskDflashFull) cs.push_back(WithDocStarts(rng, cs[i]));
  // Edge anchors: 0 (sees no context) and ctx (sees all of it).
  MaskCase e = RandomDflash(rng, dflash_attn::kMaskDflashSliding, 1, 4, 100, 30, false);
  e.anchors = {0, 0, 99, 100};
  cs.push_back(e);
  e.kind = dflash_attn::kMaskDflashFull;
  cs.push_back(e);
  // Document starts on tile edges, at / past the anchor, negative and in the middle of a tile.
  e.doc_start = {0, 64, 64, 100};
  cs.push_back(e);
  e.kind = dflash_attn::kMaskDflashSliding;
  e.doc_start = {-5, 1, 96, 37};
  cs.push_back(e);
  return cs;
}

std::string Describe(const MaskCase& c) {
  return "kind=" + std::to_string(c.kind) + " q=" + std::to_string(c.seq_q) + " kv=" + std::to_string(c.seq_kv) +
         " ctx=" + std::to_string(c.ctx) + " window=" + std::to_string(c.window) +
         (c.doc_start.empty() ? "" : " with doc_start");
}

TEST(AttentionMask, IsVisibleMatchesDenseMaskFromSpecForEveryKind) {
  for (const MaskCase& c : AllCases()) {
    const MaskParams m = c.Params();
    for (int b = 0; b < c.batch; ++b) {
      const auto dense = Dense(c, b);
      for (int q = 0; q < c.seq_q; ++q)
        for (int kv = 0; kv < c.seq_kv; ++kv)
          ASSERT_EQ(dflash_attn::IsVisible(m, b, q, kv), dense[static_cast<std::size_t>(q) * c.seq_kv + kv] != 0)
              << Describe(c) << " b=" << b << " q=" << q << " kv=" << kv;
    }
  }
}

TEST(AttentionMask, RowSpanCountsEqualDenseRowSums) {
  for (const MaskCase& c : AllCases()) {
    const MaskParams m = c.Params();
    for (int b = 0; b < c.batch; ++b) {
      const auto dense = Dense(c, b);
      for (int q = 0; q < c.seq_q; ++q) {
        int sum = 0;
        for (int kv = 0; kv < c.seq_kv; ++kv) sum += dense[static_cast<std::size_t>(q) * c.seq_kv + kv];
        ASSERT_EQ(dflash_attn::SpanCount(dflash_attn::RowVisibleSpan(m, b, q)), sum) << Describe(c) << " q=" << q;
      }
    }
  }
}

TEST(AttentionMask, TileClassIsExactlyEmptyPartialOrFullForAllTileShapes) {
  for (const MaskCase& c : AllCases()) {
    const MaskParams m = c.Params();
    for (int b = 0; b < c.batch; ++b) {
      const auto dense = Dense(c, b);
      for (int bm : {16, 32, 64, 128})
        for (int bn : {16, 32, 64, 128})
          for (int q0 = 0; q0 < c.seq_q; q0 += bm)
            for (int k0 = 0; k0 < c.seq_kv; k0 += bn) {
              bool any = false, all = k0 + bn <= c.seq_kv;
              for (int q = q0; q < std::min(q0 + bm, c.seq_q); ++q)
                for (int kv = k0; kv < std::min(k0 + bn, c.seq_kv); ++kv) {
                  bool v = dense[static_cast<std::size_t>(q) * c.seq_kv + kv] != 0;
                  any |= v;
                  all &= v;
                }
              const int want = !any ? dflash_attn::kTileEmpty : all ? dflash_attn::kTileFull : dflash_attn::kTilePartial;
              ASSERT_EQ(dflash_attn::ClassifyTile(m, b, q0, q0 + bm, k0, k0 + bn), want)
                  << Describe(c) << " b=" << b << " bm=" << bm << " bn=" << bn << " q0=" << q0 << " k0=" << k0;
            }
    }
  }
}

// A hand-written DFlash case: blocks of 16 after ctx context rows, one per anchor.
MaskCase SmallDflash(int kind, int ctx, std::vector<int> anchors, std::vector<unsigned char> valid) {
  MaskCase c;
  c.kind = kind;
  c.seq_q = 16 * static_cast<int>(anchors.size());
  c.ctx = ctx;
  c.seq_kv = ctx + c.seq_q;
  c.anchors = std::move(anchors);
  c.valid = std::move(valid);
  return c;
}

TEST(AttentionMask, AnchorPositionItselfIsNotVisibleButItsBlockIs) {
  MaskCase c = SmallDflash(dflash_attn::kMaskDflashFull, 100, {40, 70}, {1, 1});
  const MaskParams m = c.Params();
  EXPECT_TRUE(dflash_attn::IsVisible(m, 0, 0, 39));
  EXPECT_FALSE(dflash_attn::IsVisible(m, 0, 0, 40));   // strictly below the anchor
  EXPECT_TRUE(dflash_attn::IsVisible(m, 0, 0, 115));   // own block, bidirectional (row 0 sees block slot 15)
  EXPECT_FALSE(dflash_attn::IsVisible(m, 0, 0, 116));  // the next block
  EXPECT_TRUE(dflash_attn::IsVisible(m, 0, 16, 69));
  EXPECT_FALSE(dflash_attn::IsVisible(m, 0, 16, 115));
}

TEST(AttentionMask, InvalidBlocksSeeNothingAndAreNeverFullTiles) {
  MaskCase c = SmallDflash(dflash_attn::kMaskDflashSliding, 64, {30, 0}, {1, 0});
  const MaskParams m = c.Params();
  for (int q = 16; q < 32; ++q) EXPECT_EQ(dflash_attn::SpanCount(dflash_attn::RowVisibleSpan(m, 0, q)), 0);
  EXPECT_EQ(dflash_attn::ClassifyTile(m, 0, 16, 32, 0, 96), dflash_attn::kTileEmpty);
  EXPECT_EQ(dflash_attn::ClassifyTile(m, 0, 0, 32, 0, 16), dflash_attn::kTilePartial);
}

TEST(AttentionMask, SlidingWindowLowerBoundGrowsWithSlotOffset) {
  MaskCase c = SmallDflash(dflash_attn::kMaskDflashSliding, 5000, {4000}, {1});
  c.window = 2048;
  const MaskParams m = c.Params();
  // slot 0: kv >= 4000 - 2047; slot 5: kv >= 4000 + 5 - 2047.
  EXPECT_TRUE(dflash_attn::IsVisible(m, 0, 0, 1953));
  EXPECT_FALSE(dflash_attn::IsVisible(m, 0, 0, 1952));
  EXPECT_TRUE(dflash_attn::IsVisible(m, 0, 5, 1958));
  EXPECT_FALSE(dflash_attn::IsVisible(m, 0, 5, 1957));
  // inside the block: causal
  EXPECT_TRUE(dflash_attn::IsVisible(m, 0, 5, 5005));
  EXPECT_FALSE(dflash_attn::IsVisible(m, 0, 5, 5006));
}

TEST(AttentionMask, DocStartBoundsOnlyTheContextOfItsBlock) {
  MaskCase c = SmallDflash(dflash_attn::kMaskDflashFull, 128, {100, 120}, {1, 1});
  c.doc_start = {64, 130};  // block 1: its document starts past its anchor
  const MaskParams m = c.Params();
  EXPECT_FALSE(dflash_attn::IsVisible(m, 0, 3, 63));
  EXPECT_TRUE(dflash_attn::IsVisible(m, 0, 3, 64));
  EXPECT_TRUE(dflash_attn::IsVisible(m, 0, 3, 99));
  EXPECT_TRUE(dflash_attn::IsVisible(m, 0, 3, 128 + 15));  // own block unchanged
  EXPECT_EQ(dflash_attn::SpanCount(dflash_attn::RowVisibleSpan(m, 0, 20)), 16);  // block 1: only its own block
  // kv tile [0, 64) is below block 0's document and outside block 1's context: empty for both blocks' rows;
  // [64, 96) is inside block 0's document and context: full for block 0's rows.
  EXPECT_EQ(dflash_attn::ClassifyTile(m, 0, 0, 32, 0, 64), dflash_attn::kTileEmpty);
  EXPECT_EQ(dflash_attn::ClassifyTile(m, 0, 0, 16, 64, 96), dflash_attn::kTileFull);
  EXPECT_EQ(dflash_attn::ClassifyTile(m, 0, 0, 32, 64, 96), dflash_attn::kTilePartial);
  EXPECT_EQ(dflash_attn::ClassifyTile(m, 0, 16, 32, 64, 128), dflash_attn::kTileEmpty);
  c.doc_start.clear();  // without the bound block 1 sees [0, 120)
  EXPECT_EQ(dflash_attn::ClassifyTile(c.Params(), 0, 16, 32, 64, 128), dflash_attn::kTilePartial);
}

}  // namespace

// The fp32 dQ accumulator's tiled layout (attention_params.cuh): every (row < seq_q, column) gets its own slot inside
// DqAccumRows(seq_q) x D, and the backward kernels' reduction pattern holds: one warp's float2 reductions for an
// 8-row x 8-column mma accumulator tile (lane l: row r0 + l / 4, columns c0 + 2 (l % 4), +1) fill one contiguous,
// 256-byte-aligned run of 64 floats (one instruction, two cache lines), and 8 rows on / 8 columns on are the
// constant steps 8 D / 64 the kernels add as immediates.
TEST(AttentionDqAccumulator, TiledLayoutIsABijectionAndEachWarpReductionIsOneSegment) {
  for (const int D : {64, 128, 256}) {
    for (const int seq_q : {1, 7, 8, 63, 100, 1000}) {
      const long long rows = dflash_attn::DqAccumRows(seq_q);
      ASSERT_GE(rows, seq_q);
      ASSERT_LT(rows, seq_q + 8);
      ASSERT_EQ(rows % 8, 0);
      std::vector<int> hits(static_cast<std::size_t>(rows * D), 0);
      for (int r = 0; r < seq_q; ++r)
        for (int c = 0; c < D; ++c) {
          const long long o = dflash_attn::DqAccumOffset(r, c, D);
          ASSERT_GE(o, 0);
          ASSERT_LT(o, rows * D) << "row " << r << " col " << c;
          ++hits[static_cast<std::size_t>(o)];
        }
      for (std::size_t i = 0; i < hits.size(); ++i) {
        // Slots of rows past seq_q (in the last tile row) stay unused; no slot is used twice.
        ASSERT_LE(hits[i], 1) << "D " << D << " seq_q " << seq_q << " slot " << i;
      }
    }
    for (int r0 = 0; r0 < 64; r0 += 8)
      for (int c0 = 0; c0 < D; c0 += 8) {
        std::vector<long long> offs;
        for (int l = 0; l < 32; ++l) {
          const long long o = dflash_attn::DqAccumOffset(r0 + l / 4, c0 + 2 * (l % 4), D);
          EXPECT_EQ(dflash_attn::DqAccumOffset(r0 + l / 4, c0 + 2 * (l % 4) + 1, D), o + 1) << "float2 not contiguous";
          EXPECT_EQ(dflash_attn::DqAccumOffset(r0 + l / 4 + 8, c0 + 2 * (l % 4), D), o + 8 * D) << "8 rows on";
          EXPECT_EQ(dflash_attn::DqAccumOffset(r0 + l / 4, c0 + 2 * (l % 4) + 8, D), o + 64) << "8 columns on";
          offs.push_back(o);
        }
        std::sort(offs.begin(), offs.end());
        EXPECT_EQ(offs.front() % 64, 0) << "tile not 256-byte aligned";
        for (int l = 1; l < 32; ++l) EXPECT_EQ(offs[l], offs[l - 1] + 2) << "tile not one contiguous run";
      }
  }
}
