// InitGenerator: the random generator the models draw their initial weights from, on the device the weights live
// on. Drawing a full-size model on the GPU takes well under a second; on the CPU (and copied over) it takes seconds
// per billion parameters, which dominated dflash-train's start-up at the 27B shape. The CPU and CUDA generators are
// different algorithms: the same seed gives the same weights on every device of one type, not across types.
// Who may call: model initialisation (TargetModel::RandomInit, Drafter::Create). Thread-safety: pure function; the
// generator it returns is not shared.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace dflash::trainer {

// A fresh generator for `device` (CPU or CUDA; a CUDA device without an index means device 0) seeded with `seed`.
at::Generator InitGenerator(std::uint64_t seed, c10::Device device);

}  // namespace dflash::trainer
