// The kernel a tuned winner holds for a launch: found by the name expression the launch needs, or an error that says
// which variant holds what. One home for the lookup every row-wise family's launcher starts with.
// Who may call it: the kernel families' launchers (kernels/<family>/<family>_api.cc). Thread-safety: a pure function.
#pragma once

#include <cuda.h>

#include <string>
#include <string_view>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::kernels {

// winner.functions[expression], or InvalidArgument "<what>: variant <label> holds no <family> kernel for <problem>
// (wants <expression>, holds <the expressions it has, or nothing>)".
Result<CUfunction> VariantFunction(const tuner::LoadedVariant& winner, const std::string& expression,
                                   std::string_view what, std::string_view family, const std::string& problem);

}  // namespace dflash::kernels
