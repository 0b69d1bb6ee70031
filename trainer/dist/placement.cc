#include "trainer/dist/placement.h"

#include <string>

namespace dflash::trainer::dist {

Result<Placement> PlaceModels(int drafter_device, int local_world_size, int offset, int device_count) {
  const std::string flag = "--target-device-offset " + std::to_string(offset);
  if (offset < 0) return InvalidArgument(flag + ": must be >= 0 (0: the target on the drafter's GPU)");
  if (drafter_device < 0 || drafter_device >= device_count) {
    return InvalidArgument("cuda:" + std::to_string(drafter_device) + " is not a GPU of this host (" +
                           std::to_string(device_count) + " GPU(s))");
  }
  if (offset > 0 && offset < local_world_size) {
    return InvalidArgument(flag + ": the target of local rank 0 would run on cuda:" + std::to_string(offset) +
                           ", the GPU of local rank " + std::to_string(offset) + "'s drafter; use 0 or at least " +
                           "LOCAL_WORLD_SIZE=" + std::to_string(local_world_size));
  }
  const int target = drafter_device + offset;
  if (target >= device_count) {
    return InvalidArgument(flag + ": the target of the drafter on cuda:" + std::to_string(drafter_device) +
                           " would run on cuda:" + std::to_string(target) + ", but this host has " +
                           std::to_string(device_count) + " GPU(s)");
  }
  return Placement{drafter_device, target};
}

}  // namespace dflash::trainer::dist
