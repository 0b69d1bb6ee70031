#include "trainer/dist/rank_env.h"

#include <charconv>
#include <cstdlib>

namespace dflash::trainer::dist {
namespace {

// The integer value of `name` in [lo, hi]; nullopt when unset.
Result<std::optional<int>> IntVar(const EnvLookup& env, const char* name, long lo, long hi) {
  const std::optional<std::string> text = env(name);
  if (!text) return std::optional<int>();
  long value = 0;
  const char* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (text->empty() || ec != std::errc() || ptr != end) {
    return InvalidArgument(std::string(name) + "='" + *text + "' is not an integer");
  }
  if (value < lo || value > hi) {
    return InvalidArgument(std::string(name) + "=" + *text + " is outside " + std::to_string(lo) + ".." +
                           std::to_string(hi));
  }
  return std::optional<int>(static_cast<int>(value));
}

}  // namespace

std::optional<std::string> ProcessEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

Result<RankEnv> ReadRankEnv(const EnvLookup& env) {
  constexpr long kMaxRanks = 1 << 20;
  DFLASH_ASSIGN_OR_RETURN(auto world, IntVar(env, "WORLD_SIZE", 1, kMaxRanks));
  DFLASH_ASSIGN_OR_RETURN(auto rank, IntVar(env, "RANK", 0, kMaxRanks - 1));
  DFLASH_ASSIGN_OR_RETURN(auto local_world, IntVar(env, "LOCAL_WORLD_SIZE", 1, kMaxRanks));
  DFLASH_ASSIGN_OR_RETURN(auto local_rank, IntVar(env, "LOCAL_RANK", 0, kMaxRanks - 1));
  DFLASH_ASSIGN_OR_RETURN(auto port, IntVar(env, "MASTER_PORT", 1, 65535));
  const std::optional<std::string> addr = env("MASTER_ADDR");
  RankEnv out;
  if (!world) {
    if (rank && *rank != 0) return InvalidArgument("RANK=" + std::to_string(*rank) + " is set but WORLD_SIZE is not");
    return out;  // a single process
  }
  out.world_size = *world;
  if (!rank) return InvalidArgument("WORLD_SIZE=" + std::to_string(*world) + " is set but RANK is not");
  if (*rank >= *world) {
    return InvalidArgument("RANK=" + std::to_string(*rank) + " must be below WORLD_SIZE=" + std::to_string(*world));
  }
  out.rank = *rank;
  out.local_world_size = local_world.value_or(out.world_size);
  out.local_rank = local_rank.value_or(out.rank);
  if (out.local_rank >= out.local_world_size) {
    return InvalidArgument("LOCAL_RANK=" + std::to_string(out.local_rank) + " must be below LOCAL_WORLD_SIZE=" +
                           std::to_string(out.local_world_size));
  }
  if (out.world_size == 1) return out;
  if (!addr || addr->empty()) {
    return InvalidArgument("MASTER_ADDR is not set (the host of rank 0; WORLD_SIZE=" + std::to_string(*world) + ")");
  }
  if (!port) return InvalidArgument("MASTER_PORT is not set (a free TCP port on MASTER_ADDR)");
  out.master_addr = *addr;
  out.master_port = *port;
  return out;
}

}  // namespace dflash::trainer::dist
