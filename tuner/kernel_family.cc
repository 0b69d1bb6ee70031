// Config <-> JSON, labels, the enumeration of a family's space, and variant function lookup.
#include "tuner/kernel_family.h"

#include <limits>

namespace dflash::tuner {

std::string ConfigToJson(const Config& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : c) j[name] = value;
  return j.dump();  // std::map-backed object: keys sorted; no indent: no spaces
}

Result<Config> ConfigFromJson(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return InvalidArgument("config is not valid JSON: '" + std::string(json) + "'");
  }
  if (!j.is_object()) {
    return InvalidArgument("config must be a JSON object of integers, got '" + std::string(json) + "'");
  }
  Config config;
  for (const auto& [name, value] : j.items()) {
    if (name.empty()) return InvalidArgument("config has an empty parameter name: '" + std::string(json) + "'");
    if (value.is_number_unsigned()) {
      auto u = value.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return InvalidArgument("config parameter '" + name + "' is out of range: " + value.dump());
      }
      config[name] = static_cast<std::int64_t>(u);
    } else if (value.is_number_integer()) {
      config[name] = value.get<std::int64_t>();
    } else {
      return InvalidArgument("config parameter '" + name + "' must be an integer, got " + value.dump());
    }
  }
  return config;
}

std::string ConfigLabel(const Config& c) {
  std::string out;
  for (const auto& [name, value] : c) {
    if (!out.empty()) out += ',';
    out += name;
    out += '=';
    out += std::to_string(value);
  }
  return out;
}

std::vector<Config> EnumerateSpace(const KernelFamily& family) {
  const std::vector<TunableParam> params = family.params();
  // Odometer over the params in the family's order: the last param varies fastest.
  std::vector<Config> space;
  for (const TunableParam& p : params) {
    if (p.values.empty()) return space;  // a param without values: the product is empty
  }
  std::vector<std::size_t> index(params.size(), 0);
  for (;;) {
    Config c;
    for (std::size_t i = 0; i < params.size(); ++i) c[params[i].name] = params[i].values[index[i]];
    space.push_back(std::move(c));
    std::size_t i = params.size();
    while (i > 0) {
      --i;
      if (++index[i] < params[i].values.size()) break;
      index[i] = 0;
      if (i == 0) return space;
    }
    if (params.empty()) return space;
  }
}

Result<CUfunction> LoadedVariant::Function(const std::string& name_expression) const {
  auto it = functions.find(name_expression);
  if (it == functions.end()) {
    return NotFound("kernel '" + name_expression + "' is not in variant " + label);
  }
  return it->second;
}

}  // namespace dflash::tuner
