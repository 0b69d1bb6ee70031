// The facts of one random problem instance that a side-by-side benchmark needs to build the SAME problem in
// another system (flex_attention's BlockMask, FLA's cu_seqlens) and to count the same useful FLOPs:
//   attention_fwd / attention_bwd: "anchors" and "valid" [batch][num_blocks] (DFlash), "cu_seqlens" (doc_causal),
//                                  "pairs" (attended (q, kv) pairs summed over batches, one head);
//   gdn:                           "cu_seqlens" [num_seqs + 1].
// They are derived from (problem, seed) exactly as the family's MakeWorkload derives its inputs: attention calls the
// same RandomInputs(spec, seed); gdn repeats the workload's first draw (RandomCuSeqlens(tokens, num_seqs, rng())
// with rng = mt19937_64(seed)), see gdn_workload.cc — keep the two in step.
// Who may call it: kernel_bench. Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::bench {

// {"family", "problem", "seed", ...family facts...}. Unsupported for a family without instance facts.
Result<nlohmann::json> InstanceFacts(const std::string& family, const tuner::Problem& problem, std::uint64_t seed);

// Publishes `facts` (pretty JSON) at `path` with AtomicWriteText (base/atomic_file.h).
Status WriteJsonFile(const std::string& path, const nlohmann::json& facts);

}  // namespace dflash::bench
