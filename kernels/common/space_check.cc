#include "kernels/common/space_check.h"

#include <algorithm>

namespace dflash::kernels {

std::string NotInSpaceReason(std::span<const tuner::TunableParam> params, const tuner::Config& config) {
  for (const tuner::TunableParam& p : params) {
    auto it = config.find(p.name);
    if (it == config.end()) return "missing parameter " + p.name;
    if (std::find(p.values.begin(), p.values.end(), it->second) == p.values.end())
      return p.name + "=" + std::to_string(it->second) + " is not a value of the space";
  }
  if (config.size() != params.size()) return "unknown parameter in config " + tuner::ConfigLabel(config);
  return {};
}

}  // namespace dflash::kernels
