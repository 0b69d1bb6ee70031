// The attention workloads' correctness rule for one output tensor (the tuning gate): the kernel's max-abs error
// against the float64 reference must stay within twice the error of the "plain bf16" emulation of the same math
// (FlashAttention's test convention) plus an absolute term for the output's own bf16 resolution: twice the largest
// rounding error bf16 can make at the reference's largest magnitude (FlashAttention-3's `2 * (ref + 0.3 - 0.3 -
// ref).abs().max()`, without the + 0.3 offset so that the term scales with the tensor), plus 1e-4.
// Why the absolute term: on a sampled row set the plain error can be small by chance (few-term sums, e.g. a block
// row of a DFlash layer that 16 queries see), and a correct kernel, which rounds P and dS to bf16 once where the
// emulation rounds them differently, then misses 2x by a fraction of an ulp (without the term every variant of the
// sliding 4096/512 backward failed the gate with seed 7 this way: attention_tolerance_test.cc keeps that instance).
// Who may call it: the attention workloads and tests. Thread-safety: a tally belongs to one thread.
#pragma once

#include <string>

namespace dflash::attention {

// Half the spacing of bf16 values at |x|: the largest rounding error of float -> bf16 (round to nearest) there.
double Bf16HalfUlp(double x);

// Max-abs error of one tensor, of its plain-bf16 yardstick, and the reference's max magnitude, over the checked
// elements.
class ErrorTally {
 public:
  explicit ErrorTally(const char* name) : name_(name) {}
  void Add(double got, double ref, double plain);
  double tolerance() const { return 2 * base_ + 2 * Bf16HalfUlp(max_ref_) + 1e-4; }
  bool ok() const { return !nan_ && err_ <= tolerance(); }
  // "dK err 0.0028 > tolerance 0.0064 (plain bf16 0.0012, max |ref| 0.54)" (" NaN" appended when one was seen).
  std::string ToString() const;

 private:
  const char* name_;
  double err_ = 0, base_ = 0, max_ref_ = 0;
  bool nan_ = false;
};

}  // namespace dflash::attention
