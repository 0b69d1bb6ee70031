// The check that a config is a point of a family's tuning space: every parameter present, with one of its values,
// and no other key. One home for what each family's config validation starts with.
// Who may call it: the kernel families' config validation (kernels/<family>/<family>_config.cc).
// Thread-safety: a pure function.
#pragma once

#include <span>
#include <string>

#include "tuner/kernel_family.h"

namespace dflash::kernels {

// Empty when `config` has exactly the parameters of `params`, each with a value of the space; otherwise the reason
// ("missing parameter vec", "vec=3 is not a value of the space", "unknown parameter in config a=1,...").
std::string NotInSpaceReason(std::span<const tuner::TunableParam> params, const tuner::Config& config);

}  // namespace dflash::kernels
