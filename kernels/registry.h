// The registry of kernel families: every family compiled into this binary, by name.
// Owns: nothing but static references to the families' singletons. Thread-safe (immutable after start).
#pragma once

#include <span>
#include <string_view>

#include "tuner/kernel_family.h"

namespace dflash::kernels {

// All registered families, in a stable order.
std::span<const tuner::KernelFamily* const> AllFamilies();
// The family called `name`, or nullptr.
const tuner::KernelFamily* FindFamily(std::string_view name);

}  // namespace dflash::kernels
