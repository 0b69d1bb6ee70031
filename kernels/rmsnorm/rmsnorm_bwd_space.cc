#include "kernels/rmsnorm/rmsnorm_bwd_space.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "kernels/common/space_check.h"

namespace dflash::rmsnorm {
namespace {

std::string Str(std::int64_t v) { return std::to_string(v); }

constexpr std::array<const char*, 5> kBwdFields = {"rows", "cols", "kind", "weight", "dtype"};

// x and dy packed (bf16 pairs), the dw sums in fp32, the weight packed or in fp32; plus kBwdOtherRegisters for
// addresses, the two reductions and the scaling: more than the forward's kOtherRegisters, because ptxas's report
// showed the backward needs it: with 40 the 1024-thread, 8-elements-a-thread variant of 5120 cols spilled on sm_120
// at its 64-register cap; with 48 the 512-thread, 24-elements-a-thread variants of 12288 cols spilled on both archs
// at 128.
constexpr int kBwdOtherRegisters = 64;
int BwdRowRegisters(int elements, const BwdProblemSpec& bucket) {
  return elements + elements + (bucket.weight == WeightDtype::kFp32 ? elements : elements / 2);
}

tuner::Config ConfigOf(int threads, int row_threads, int vec, int row_groups) {
  return {{"row_groups", row_groups}, {"row_threads", row_threads}, {"threads", threads}, {"vec", vec}};
}

}  // namespace

bool BwdServes(std::int64_t cols) {
  return cols >= kColsMultiple && cols % kColsMultiple == 0 && cols <= kMaxBwdCols;
}

Result<BwdProblemSpec> ParseBwdProblem(const tuner::Problem& problem) {
  if (!problem.is_object()) return InvalidArgument("rmsnorm_bwd problem: must be a JSON object, got " + problem.dump());
  for (const auto& [key, value] : problem.items()) {
    if (std::find_if(kBwdFields.begin(), kBwdFields.end(), [&](const char* f) { return key == f; }) ==
        kBwdFields.end())
      return InvalidArgument("rmsnorm_bwd problem: unknown field \"" + key + "\" (known: rows, cols, kind, weight, dtype)");
  }
  // The remaining fields mean what they mean in the forward's problem, which validates them.
  Result<ProblemSpec> fwd = ParseProblem(problem);
  if (!fwd.ok()) return InvalidArgument("rmsnorm_bwd " + fwd.status().message().substr(std::string("rmsnorm ").size()));
  if (!BwdServes(fwd->cols))
    return InvalidArgument("rmsnorm_bwd problem: \"cols\" = " + Str(fwd->cols) + " is more than " + Str(kMaxBwdCols) +
                           " (no config holds such a row in registers without spilling)");
  return BwdProblemSpec{fwd->rows, fwd->cols, fwd->kind, fwd->weight};
}

tuner::Problem ToJson(const BwdProblemSpec& spec) {
  return tuner::Problem{{"rows", spec.rows},
                        {"cols", spec.cols},
                        {"kind", std::string(KindName(spec.kind))},
                        {"weight", std::string(WeightDtypeName(spec.weight))},
                        {"dtype", "bf16"}};
}

BwdProblemSpec BucketOf(const BwdProblemSpec& spec) {
  BwdProblemSpec b = spec;
  b.rows = kMinRowBucket;
  while (b.rows < spec.rows) b.rows <<= 1;
  return b;
}

tuner::Problem MakeBwdProblem(std::int64_t rows, std::int64_t cols, Kind kind, WeightDtype weight) {
  return ToJson(BwdProblemSpec{rows, cols, kind, weight});
}

std::vector<tuner::TunableParam> BwdParams() {
  std::vector<tuner::TunableParam> p = Params();
  p.insert(p.begin(), {"row_groups", {4, 16, 64}, "row groups each block walks (its dw sums stay in registers)"});
  return p;
}

Result<BwdGeometry> BwdGeometryOf(const tuner::Config& config) {
  const std::string not_in_space = kernels::NotInSpaceReason(BwdParams(), config);
  if (!not_in_space.empty())
    return InvalidArgument("rmsnorm_bwd config " + tuner::ConfigLabel(config) + " is invalid: " + not_in_space);
  tuner::Config row = config;
  row.erase("row_groups");
  Result<Geometry> g = GeometryOf(row);
  if (!g.ok()) return InvalidArgument("rmsnorm_bwd " + g.status().message().substr(std::string("rmsnorm ").size()));
  return BwdGeometry{*g, static_cast<int>(config.at("row_groups"))};
}

std::string BwdInvalidReasonFor(const tuner::Config& config, const BwdProblemSpec& bucket) {
  Result<BwdGeometry> geometry = BwdGeometryOf(config);
  if (!geometry.ok()) {
    const std::string& m = geometry.status().message();
    return m.substr(m.find(" is invalid: ") + std::string(" is invalid: ").size());
  }
  const Geometry& g = geometry->row;
  const std::int64_t vectors = bucket.cols / g.vec;
  if (g.row_threads > vectors)
    return "row_threads=" + Str(g.row_threads) + " > cols/vec=" + Str(vectors) +
           ": some threads of every row would hold nothing";
  const int elements = VectorsPerThread(g, bucket.cols) * g.vec;
  if (elements > kMaxBwdElementsPerThread)
    return Str(elements) + " elements per thread > " + Str(kMaxBwdElementsPerThread) + " (cols=" + Str(bucket.cols) +
           ", row_threads=" + Str(g.row_threads) + ", vec=" + Str(g.vec) + ")";
  const int needed = BwdRowRegisters(elements, bucket) + kBwdOtherRegisters;
  const int budget = std::min(255, 65536 / g.threads);
  if (needed > budget)
    return "row data needs ~" + Str(needed) + " registers per thread, more than the " + Str(budget) +
           " a block of " + Str(g.threads) + " threads may hold";
  return {};
}

std::int64_t BwdGridBlocks(const BwdGeometry& g, std::int64_t rows) {
  const std::int64_t groups = (rows + g.row.rows_per_block - 1) / g.row.rows_per_block;
  return (groups + g.row_groups - 1) / g.row_groups;
}

std::int64_t DwPartialRows(const BwdGeometry& g, std::int64_t rows) {
  return BwdGridBlocks(g, rows) * g.row.rows_per_block;
}

std::string BwdKernelNameExpression(const BwdGeometry& g, const BwdProblemSpec& spec) {
  const Geometry& r = g.row;
  return "dflash_rmsnorm::rmsnorm_bwd<" + Str(spec.cols) + ", " + Str(r.vec) + ", " + Str(r.row_threads) + ", " +
         Str(r.threads) + ", 1, " + (spec.kind == Kind::kZeroCentred ? "1" : "0") + ", " +
         (spec.weight == WeightDtype::kFp32 ? "1" : "0") + ">";
}

std::vector<tuner::Config> BwdSeedConfigsFor(const BwdProblemSpec& bucket) {
  // The 16-byte splits of a row, fewest idle vector slots first, then closest to 2 vectors per thread.
  std::vector<std::tuple<std::int64_t, int, int>> splits;  // (idle slots, |vectors per thread - 2|, row_threads)
  for (std::int64_t rt : Params()[0].values) {
    const tuner::Config c = ConfigOf(static_cast<int>(std::max<std::int64_t>(rt, 256)), static_cast<int>(rt), 8, 16);
    if (!BwdInvalidReasonFor(c, bucket).empty()) continue;
    const int vpt = VectorsPerThread(BwdGeometryOf(c)->row, bucket.cols);
    splits.emplace_back(vpt * rt - bucket.cols / 8, std::abs(vpt - 2), static_cast<int>(rt));
  }
  std::sort(splits.begin(), splits.end());
  std::vector<tuner::Config> seeds;
  auto add = [&](int threads, int row_threads, int row_groups) {
    const tuner::Config c = ConfigOf(std::max(threads, row_threads), row_threads, 8, row_groups);
    if (BwdInvalidReasonFor(c, bucket).empty() && std::find(seeds.begin(), seeds.end(), c) == seeds.end())
      seeds.push_back(c);
  };
  if (!splits.empty()) {
    add(256, std::get<2>(splits[0]), 16);
    add(256, std::get<2>(splits[0]), 64);
  }
  if (splits.size() > 1) add(256, std::get<2>(splits[1]), 16);
  return seeds;
}

}  // namespace dflash::rmsnorm
