#include "tuner/device_lock.h"

#include <cctype>

namespace dflash::tuner {
namespace {

std::string Sanitize(const std::string& id) {
  std::string out;
  out.reserve(id.size());
  for (char c : id) {
    const auto u = static_cast<unsigned char>(c);
    const char l = static_cast<char>(std::tolower(u));
    const bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.' || l == '_' || l == '-';
    out += ok ? l : '-';
  }
  return out;
}

std::string Describe(const gpu::DeviceInfo& d) {
  std::string s = "GPU " + std::to_string(d.ordinal);
  if (!d.name.empty()) s += " (" + d.name + ")";
  if (!d.uuid.empty()) s += " " + d.uuid;
  else if (!d.pci_bus_id.empty()) s += " at PCI " + d.pci_bus_id;
  return s;
}

}  // namespace

Result<std::string> DeviceLockName(const gpu::DeviceInfo& device) {
  if (!device.uuid.empty()) return "gpu-bench-" + Sanitize(device.uuid);
  if (!device.pci_bus_id.empty()) return "gpu-bench-pci-" + Sanitize(device.pci_bus_id);
  return InvalidArgument("cannot name the benchmark lock of " + Describe(device) +
                         ": the driver reported neither a UUID nor a PCI bus id");
}

Result<cache::NamedLock> LockDeviceForBenchmark(const gpu::DeviceInfo& device, std::chrono::milliseconds timeout) {
  DFLASH_ASSIGN_OR_RETURN(std::string name, DeviceLockName(device));
  DFLASH_ASSIGN_OR_RETURN(std::filesystem::path dir, cache::MachineLockDir());
  auto lock = cache::NamedLock::Acquire(dir, name, timeout);
  if (!lock.ok()) return lock.status().WithContext("benchmark lock of " + Describe(device));
  return std::move(lock).value();
}

}  // namespace dflash::tuner
