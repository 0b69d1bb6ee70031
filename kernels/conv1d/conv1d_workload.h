// Conv1d workloads: one problem instance on a device with fresh random inputs (x ~ N(0, 1), weights ~
// U(-0.5, 0.5), bias ~ U(-0.5, 0.5) when asked, random packed sequence lengths summing to tokens), output
// poisoning, launch through LaunchConv1d, and the check against the float64 reference.
// Options let tests reach the paths a contiguous tensor never takes: padded rows, misaligned base pointers,
// empty sequences, a bias.
// Who may call it: the family's MakeWorkload and the tests. Thread-safety: a workload belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "kernels/conv1d/conv1d_problem.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"

namespace dflash::conv1d {

struct WorkloadOptions {
  bool bias = false;             // pass a random bias (the target model has none)
  std::int64_t row_pad = 0;      // extra elements after each row (token rows or channel rows, per layout)
  std::int64_t x_offset = 0;     // elements between the buffer start and x (odd values misalign vectors)
  std::int64_t y_offset = 0;     // same for y
  bool allow_empty_seqs = false; // draw cut points with replacement (some sequences empty)
};

// Tolerance of the check: |y - ref| <= kAbsTol + kRelTol * |ref| (bf16 output: half an ulp is 2^-8 relative).
constexpr double kAbsTol = 1e-5;
constexpr double kRelTol = 1.0 / 128.0;

Result<std::unique_ptr<tuner::Workload>> MakeConv1dWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                            std::uint64_t seed,
                                                            const WorkloadOptions& options = {});

// Random cu_seqlens (num_seqs + 1 offsets from 0 to tokens). Without allow_empty every sequence has at least
// one token (needs num_seqs <= tokens).
std::vector<std::int32_t> RandomCuSeqlens(std::int64_t tokens, std::int64_t num_seqs, bool allow_empty,
                                          std::uint64_t seed);

}  // namespace dflash::conv1d
