#include "tuner/loaded_kernel.h"

#include <nlohmann/json.hpp>

namespace dflash::tuner {

Result<std::unique_ptr<LoadedKernel>> LoadedKernel::Load(std::span<const std::uint8_t> cubin,
                                                         const std::string& kernel_names_json, const Config& config,
                                                         const std::string& label) {
  nlohmann::json names = nlohmann::json::parse(kernel_names_json, nullptr, false);
  if (!names.is_object()) return Corruption("kernel names of " + label + " are not a JSON object");
  std::unique_ptr<LoadedKernel> k(new LoadedKernel());
  DFLASH_ASSIGN_OR_RETURN(k->module_, gpu::Module::Load(cubin, label));
  k->variant_.module = &k->module_;
  k->variant_.config = config;
  k->variant_.label = label;
  for (auto& [expression, lowered] : names.items()) {
    if (!lowered.is_string()) return Corruption("kernel name of " + expression + " in " + label + " is not a string");
    DFLASH_ASSIGN_OR_RETURN(CUfunction f, k->module_.Function(lowered.get<std::string>()));
    k->variant_.functions[expression] = f;
  }
  return k;
}

}  // namespace dflash::tuner
