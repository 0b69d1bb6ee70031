// Placement of a rank's two models on the GPUs of its host. By default the target and the drafter share one GPU;
// with --target-device-offset K they run in pairs: the drafter on cuda:D (D = LOCAL_RANK in a multi-rank run, else
// the --device's index) and the frozen target on cuda:(D + K), the target's features moved GPU to GPU. K must keep
// every target on the host (D + K < GPUs) and off every other local rank's GPU: K = 0 or K >= LOCAL_WORLD_SIZE
// (local rank L's target on cuda:L+K would otherwise be local rank L+K's drafter GPU).
// Who may call: the Trainer and tests. Thread-safety: pure.
#pragma once

#include "base/status.h"

namespace dflash::trainer::dist {

struct Placement {
  int drafter_device = 0;
  int target_device = 0;
  bool paired() const { return drafter_device != target_device; }
};

// InvalidArgument (naming --target-device-offset) for offset < 0, a target beyond the host's `device_count` GPUs, or
// an offset that makes two ranks share a GPU; drafter_device must be one of the host's GPUs.
Result<Placement> PlaceModels(int drafter_device, int local_world_size, int offset, int device_count);

}  // namespace dflash::trainer::dist
