#include "kernels/rmsnorm/rmsnorm_config.h"

#include <algorithm>
#include <tuple>

#include "kernels/common/space_check.h"

namespace dflash::rmsnorm {
namespace {

std::string Str(std::int64_t v) { return std::to_string(v); }

tuner::Config ConfigOf(int threads, int row_threads, int vec) {
  return {{"row_threads", row_threads}, {"threads", threads}, {"vec", vec}};
}

}  // namespace

std::vector<tuner::TunableParam> Params() {
  return {
      {"row_threads", {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}, "threads that share one row"},
      {"threads", {128, 256, 512, 1024}, "threads per block (threads / row_threads rows per block)"},
      {"vec", {4, 8}, "bf16 elements per vector load/store (8 = 16 bytes)"},
  };
}

std::string GeometryInvalidReason(const tuner::Config& config) {
  const std::string not_in_space = kernels::NotInSpaceReason(Params(), config);
  if (!not_in_space.empty()) return not_in_space;
  if (config.at("row_threads") > config.at("threads"))
    return "row_threads=" + Str(config.at("row_threads")) + " > threads=" + Str(config.at("threads")) +
           " (a row lies within one block)";
  return {};
}

Result<Geometry> GeometryOf(const tuner::Config& config) {
  const std::string why = GeometryInvalidReason(config);
  if (!why.empty()) return InvalidArgument("rmsnorm config " + tuner::ConfigLabel(config) + " is invalid: " + why);
  Geometry g;
  g.threads = static_cast<int>(config.at("threads"));
  g.row_threads = static_cast<int>(config.at("row_threads"));
  g.vec = static_cast<int>(config.at("vec"));
  g.rows_per_block = g.threads / g.row_threads;
  return g;
}

int RowRegisters(int elements, const ProblemSpec& bucket) {
  const int packed = elements / 2;  // bf16 pairs
  const int loading = packed * (1 + (bucket.residual ? 1 : 0) + (bucket.gate ? 1 : 0));
  const int scaling = packed * (1 + (bucket.gate ? 1 : 0)) + (bucket.weight == WeightDtype::kFp32 ? elements : packed);
  return std::max(loading, scaling);
}

int VectorsPerThread(const Geometry& g, std::int64_t cols) {
  const std::int64_t vectors = cols / g.vec;
  return static_cast<int>((vectors + g.row_threads - 1) / g.row_threads);
}

std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket) {
  const std::string why = GeometryInvalidReason(config);
  if (!why.empty()) return why;
  const Geometry g = *GeometryOf(config);
  const std::int64_t vectors = bucket.cols / g.vec;
  if (g.row_threads > vectors)
    return "row_threads=" + Str(g.row_threads) + " > cols/vec=" + Str(vectors) +
           ": some threads of every row would hold nothing";
  const int elements = VectorsPerThread(g, bucket.cols) * g.vec;
  if (elements > kMaxElementsPerThread)
    return Str(elements) + " elements per thread > " + Str(kMaxElementsPerThread) + " (cols=" + Str(bucket.cols) +
           ", row_threads=" + Str(g.row_threads) + ", vec=" + Str(g.vec) + ")";
  const int needed = RowRegisters(elements, bucket) + kOtherRegisters;
  const int budget = std::min(255, 65536 / g.threads);
  if (needed > budget)
    return "row data needs ~" + Str(needed) + " registers per thread, more than the " + Str(budget) +
           " a block of " + Str(g.threads) + " threads may hold";
  return {};
}

int MinBlocksPerSm(const Geometry& g, const ProblemSpec& bucket) {
  if (g.vec <= 0 || g.row_threads <= 0 || g.threads <= 0) return 1;  // an invalid config: its static_asserts fail
  const int elements = VectorsPerThread(g, bucket.cols) * g.vec;
  if (RowRegisters(elements, bucket) + kOtherRegisters > 64) return 1;
  return std::max(1, 1024 / g.threads);
}

std::string KernelNameExpression(const Geometry& g, const ProblemSpec& spec) {
  return "dflash_rmsnorm::rmsnorm_fwd<" + Str(spec.cols) + ", " + Str(g.vec) + ", " + Str(g.row_threads) + ", " +
         Str(g.threads) + ", " + Str(MinBlocksPerSm(g, spec)) + ", " + (spec.kind == Kind::kZeroCentred ? "1" : "0") +
         ", " + (spec.residual ? "1" : "0") +
         ", " + (spec.gate ? "1" : "0") + ", " + (spec.weight == WeightDtype::kFp32 ? "1" : "0") + ">";
}

std::vector<tuner::Config> SeedConfigsFor(const ProblemSpec& bucket) {
  // The 16-byte splits of a row, fewest idle vector slots first, then closest to 4 vectors per thread.
  std::vector<std::tuple<std::int64_t, int, int>> splits;  // (idle slots, |vectors per thread - 4|, row_threads)
  const std::vector<tuner::TunableParam> params = Params();
  for (std::int64_t rt : params[0].values) {
    const tuner::Config c = ConfigOf(static_cast<int>(std::max<std::int64_t>(rt, 256)), static_cast<int>(rt), 8);
    if (!InvalidReasonFor(c, bucket).empty()) continue;
    const int vpt = VectorsPerThread(*GeometryOf(c), bucket.cols);
    splits.emplace_back(vpt * rt - bucket.cols / 8, std::abs(vpt - 4), static_cast<int>(rt));
  }
  std::sort(splits.begin(), splits.end());
  std::vector<tuner::Config> seeds;
  auto add = [&](int threads, int row_threads) {
    const tuner::Config c = ConfigOf(std::max(threads, row_threads), row_threads, 8);
    if (InvalidReasonFor(c, bucket).empty() && std::find(seeds.begin(), seeds.end(), c) == seeds.end())
      seeds.push_back(c);
  };
  if (!splits.empty()) {
    add(256, std::get<2>(splits[0]));
    add(128, std::get<2>(splits[0]));
  }
  if (splits.size() > 1) add(256, std::get<2>(splits[1]));
  return seeds;
}

}  // namespace dflash::rmsnorm
