#include "kernels/common/variant_function.h"

namespace dflash::kernels {

Result<CUfunction> VariantFunction(const tuner::LoadedVariant& winner, const std::string& expression,
                                   std::string_view what, std::string_view family, const std::string& problem) {
  auto it = winner.functions.find(expression);
  if (it != winner.functions.end()) return it->second;
  std::string held;
  for (const auto& [name, f] : winner.functions) held += (held.empty() ? "" : ", ") + name;
  return InvalidArgument(std::string(what) + ": variant " + winner.label + " holds no " + std::string(family) +
                         " kernel for " + problem + " (wants " + expression + ", holds " +
                         (held.empty() ? "nothing" : held) + ")");
}

}  // namespace dflash::kernels
