#include "trainer/dist/buckets.h"

namespace dflash::trainer::dist {

std::vector<BucketRange> MakeBuckets(const std::vector<torch::Tensor>& tensors, std::int64_t bucket_bytes) {
  std::vector<BucketRange> buckets;
  for (std::size_t i = 0; i < tensors.size();) {
    std::size_t j = i;
    std::int64_t bytes = 0;
    while (j < tensors.size() && (j == i || (tensors[j].scalar_type() == tensors[i].scalar_type() &&
                                             bytes + tensors[j].nbytes() <= static_cast<std::size_t>(bucket_bytes)))) {
      bytes += static_cast<std::int64_t>(tensors[j].nbytes());
      ++j;
    }
    buckets.push_back({i, j});
    i = j;
  }
  return buckets;
}

torch::Tensor Flatten(const std::vector<torch::Tensor>& tensors, BucketRange range) {
  torch::NoGradGuard no_grad;
  if (range.end - range.begin == 1 && tensors[range.begin].is_contiguous()) return tensors[range.begin].view({-1});
  std::vector<torch::Tensor> parts;
  for (std::size_t k = range.begin; k < range.end; ++k) parts.push_back(tensors[k].reshape({-1}));
  return torch::cat(parts);
}

void Unflatten(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors, BucketRange range) {
  torch::NoGradGuard no_grad;
  std::int64_t offset = 0;
  for (std::size_t k = range.begin; k < range.end; ++k) {
    const torch::Tensor& t = tensors[k];
    const torch::Tensor part = flat.narrow(0, offset, t.numel()).view(t.sizes());
    if (!part.is_same(t) && part.data_ptr() != t.data_ptr()) t.copy_(part);
    offset += t.numel();
  }
}

}  // namespace dflash::trainer::dist
