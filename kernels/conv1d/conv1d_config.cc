#include "kernels/conv1d/conv1d_config.h"

#include "kernels/common/space_check.h"

namespace dflash::conv1d {
namespace {

std::string Str(std::int64_t v) { return std::to_string(v); }

}  // namespace

std::vector<tuner::TunableParam> Params() {
  return {
      {"block_c", {1, 4, 32, 64, 128, 256, 512}, "channels per block"},
      {"threads", {128, 256}, "threads per block"},
      {"tpt", {4, 8, 16}, "consecutive tokens per thread (amortises the 3-token halo)"},
      {"vec", {1, 2, 4, 8}, "bf16 elements per vector load/store along the unit-stride dimension"},
  };
}

std::string GeometryInvalidReason(const tuner::Config& config, Layout layout) {
  const std::string not_in_space = kernels::NotInSpaceReason(Params(), config);
  if (!not_in_space.empty()) return not_in_space;
  const std::int64_t block_c = config.at("block_c"), vec = config.at("vec"), tpt = config.at("tpt"),
                     threads = config.at("threads");
  if (layout == Layout::kTokenMajor) {
    if (block_c < 32)
      return "token_major needs block_c >= 32 (narrower tiles read a few bytes per token row), got " + Str(block_c);
    if (block_c % vec != 0) return "block_c=" + Str(block_c) + " is not a multiple of vec=" + Str(vec);
    const std::int64_t lanes = block_c / vec;
    if (lanes > threads || threads % lanes != 0)
      return "block_c/vec=" + Str(lanes) + " channel lanes do not tile threads=" + Str(threads);
  } else {
    if (tpt % vec != 0) return "tpt=" + Str(tpt) + " is not a multiple of vec=" + Str(vec);
    if (threads % block_c != 0 || threads / block_c < 32)
      return "channel_major needs threads/block_c >= 32 (a warp must stay on one channel), got threads=" +
             Str(threads) + " block_c=" + Str(block_c);
  }
  return {};
}

Result<Geometry> GeometryOf(const tuner::Config& config, Layout layout) {
  const std::string why = GeometryInvalidReason(config, layout);
  if (!why.empty())
    return InvalidArgument("conv1d config " + tuner::ConfigLabel(config) + " is invalid for " +
                           std::string(LayoutName(layout)) + ": " + why);
  Geometry g;
  g.layout = layout;
  g.block_c = static_cast<int>(config.at("block_c"));
  g.vec = static_cast<int>(config.at("vec"));
  g.tpt = static_cast<int>(config.at("tpt"));
  g.threads = static_cast<int>(config.at("threads"));
  g.block_t = layout == Layout::kTokenMajor ? (g.threads / (g.block_c / g.vec)) * g.tpt
                                            : (g.threads / g.block_c) * g.tpt;
  return g;
}

std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket) {
  std::string why = GeometryInvalidReason(config, bucket.layout);
  if (!why.empty()) return why;
  const std::int64_t vec = config.at("vec");
  // A contiguous [tokens, channels] tensor has token stride = channels: with channels not a multiple of vec no
  // row after the first is aligned, so the variant would run its scalar path everywhere (a slower vec=1).
  if (bucket.layout == Layout::kTokenMajor && vec > 1 && bucket.channels % vec != 0)
    return "vec=" + Str(vec) + " never vectorizes: channels=" + Str(bucket.channels) + " is not a multiple of it";
  return {};
}

std::string KernelNameExpression(const Geometry& g) {
  const char* kernel = g.layout == Layout::kTokenMajor ? "dflash_conv1d::conv1d_fwd_token_major"
                                                       : "dflash_conv1d::conv1d_fwd_channel_major";
  return std::string(kernel) + "<" + Str(g.block_c) + ", " + Str(g.vec) + ", " + Str(g.tpt) + ", " +
         Str(g.threads) + ">";
}

}  // namespace dflash::conv1d
