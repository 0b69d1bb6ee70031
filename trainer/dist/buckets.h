// Gradient buckets: how a list of tensors is cut into the flat buffers one all-reduce each sums (consecutive tensors
// of one dtype, at most `bucket_bytes` per bucket unless a single tensor is larger), and the flatten / write-back
// of one bucket. Shared by Communicator::AllReduceSumInPlace and GradientSync.
// Who may call: trainer/dist and tests. Thread-safety: pure (Unflatten writes the given tensors).
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dflash::trainer::dist {

struct BucketRange {
  std::size_t begin = 0, end = 0;  // tensors [begin, end)
};

// Buckets over `tensors` in their order; every tensor in exactly one bucket.
std::vector<BucketRange> MakeBuckets(const std::vector<torch::Tensor>& tensors, std::int64_t bucket_bytes);

// The bucket's tensors as one contiguous 1-D tensor (the tensor itself when it is alone and contiguous).
torch::Tensor Flatten(const std::vector<torch::Tensor>& tensors, BucketRange range);
// Writes `flat` back into the bucket's tensors (nothing to do where Flatten returned the tensor itself).
void Unflatten(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors, BucketRange range);

}  // namespace dflash::trainer::dist
