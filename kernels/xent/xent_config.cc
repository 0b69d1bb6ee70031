#include "kernels/xent/xent_config.h"

#include <algorithm>

namespace dflash::xent {
namespace {

std::string Str(std::int64_t v) { return std::to_string(v); }

tuner::Config ConfigOf(int threads, int vec, int unroll, int split) {
  return {{"threads", threads}, {"vec", vec}, {"unroll", unroll}, {"split", split}};
}

}  // namespace

std::vector<tuner::TunableParam> Params() {
  return {
      {"threads", {128, 256, 512, 1024}, "threads per block"},
      {"vec", {1, 4}, "floats per vector load (4: float4)"},
      {"unroll",
       {2, 4, 8},
       "vectors per thread per tile (loads in flight; registers that keep tile 0 for the gradient)"},
      {"split", {1, 2, 4, 8}, "blocks per row (a thread block cluster when > 1)"},
  };
}

std::string GeometryInvalidReason(const tuner::Config& config) {
  for (const auto& p : Params()) {
    auto it = config.find(p.name);
    if (it == config.end()) return "missing parameter " + p.name;
    if (std::find(p.values.begin(), p.values.end(), it->second) == p.values.end())
      return p.name + "=" + Str(it->second) + " is not a value of the space";
  }
  if (config.size() != Params().size()) return "unknown parameter in config " + tuner::ConfigLabel(config);
  if (config.at("vec") == 1 && config.at("split") != 1)
    return "vec=1 only with split=1 (a cluster exists to keep a row in registers; scalar tiles hold a quarter of "
           "what float4 tiles hold)";
  return {};
}

Result<Geometry> GeometryOf(const tuner::Config& config) {
  const std::string why = GeometryInvalidReason(config);
  if (!why.empty()) return InvalidArgument("xent config " + tuner::ConfigLabel(config) + " is invalid: " + why);
  Geometry g;
  g.threads = static_cast<int>(config.at("threads"));
  g.vec = static_cast<int>(config.at("vec"));
  g.unroll = static_cast<int>(config.at("unroll"));
  g.split = static_cast<int>(config.at("split"));
  return g;
}

std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket) {
  std::string why = GeometryInvalidReason(config);
  if (!why.empty()) return why;
  const std::int64_t threads = config.at("threads"), vec = config.at("vec"), unroll = config.at("unroll"),
                     split = config.at("split");
  const std::int64_t slice = ((bucket.vocab + vec - 1) / vec + split - 1) / split;  // vectors per block
  // The smallest block without a cluster stays valid for every vocab, so no bucket is left without a variant.
  const bool smallest = threads == 128 && split == 1;
  if (threads > slice && !smallest)
    return "threads=" + Str(threads) + " exceed the " + Str(slice) +
           " vectors of a block's slice (vocab=" + Str(bucket.vocab) + ", vec=" + Str(vec) + ", split=" + Str(split) +
           "): some threads would load nothing";
  if (unroll > 2 && threads * (unroll / 2) >= slice)
    return "unroll=" + Str(unroll) + " holds no more than unroll=" + Str(unroll / 2) + " for a slice of " + Str(slice) +
           " vectors (vocab=" + Str(bucket.vocab) + ")";
  return {};
}

std::string KernelNameExpression(const Geometry& g, bool grad) {
  const std::string tail = Str(g.threads) + ", " + Str(g.vec) + ", " + Str(g.unroll) + ", ";
  const char* flag = grad ? "true" : "false";
  if (g.split == 1) return "dflash_xent::xent_rows<" + tail + flag + ">";
  return "dflash_xent::xent_rows_split<" + tail + Str(g.split) + ", " + flag + ">";
}

std::vector<tuner::Config> SeedConfigs() {
  // A 248320-word row in the registers of a cluster of 8 blocks of 1024 threads (8 float4 each: 262144 floats), the
  // same over 4 blocks (two tiles each, the second re-read from L2), 8 blocks of 512 threads; then the one-block
  // geometries for a small vocab (1024 words: 128 threads x 2 float4 or 256 threads x 1 tile).
  return {ConfigOf(1024, 4, 8, 8), ConfigOf(1024, 4, 8, 4), ConfigOf(512, 4, 8, 8), ConfigOf(1024, 4, 4, 8),
          ConfigOf(512, 4, 4, 1),  ConfigOf(128, 4, 2, 1),  ConfigOf(256, 4, 2, 1)};
}

}  // namespace dflash::xent
