#include "kernels/attention/attention_problem.h"

#include <set>

#include "kernels/attention/attention_params.cuh"

namespace dflash::attention {
namespace {

constexpr const char* kMaskNames[] = {"none", "causal", "doc_causal", "dflash_full", "dflash_sliding"};

Result<std::int64_t> GetInt(const tuner::Problem& p, const char* key, std::int64_t def, bool required) {
  auto it = p.find(key);
  if (it == p.end()) {
    if (required) return InvalidArgument(std::string("attention problem: missing field '") + key + "'");
    return def;
  }
  if (!it->is_number_integer()) {
    return InvalidArgument(std::string("attention problem: field '") + key + "' must be an integer, got " + it->dump());
  }
  return it->get<std::int64_t>();
}

}  // namespace

bool ProblemSpec::is_dflash() const {
  return mask == dflash_attn::kMaskDflashFull || mask == dflash_attn::kMaskDflashSliding;
}

int ProblemSpec::compiled_mask() const { return mask | (doc_bound ? dflash_attn::kMaskDocBound : 0); }

std::string_view MaskName(int mask) {
  return mask >= 0 && mask < dflash_attn::kNumMaskKinds ? kMaskNames[mask] : "?";
}

Result<int> ParseMaskName(std::string_view name) {
  for (int i = 0; i < dflash_attn::kNumMaskKinds; ++i)
    if (name == kMaskNames[i]) return i;
  return InvalidArgument("attention problem: unknown mask '" + std::string(name) +
                         "' (none, causal, doc_causal, dflash_full, dflash_sliding)");
}

Status Validate(const ProblemSpec& s, Direction direction) {
  auto bad = [](const std::string& m) { return InvalidArgument("attention problem: " + m); };
  if (s.batch < 1 || s.batch > 65535) return bad("batch must be in 1..65535");
  if (s.heads_kv < 1 || s.heads_q < 1 || s.heads_q > 65535) return bad("heads_q, heads_kv must be >= 1");
  if (s.heads_q % s.heads_kv != 0) return bad("heads_q must be a multiple of heads_kv (GQA)");
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) return bad("head_dim must be 64, 128 or 256");
  if (direction == Direction::kBackward && s.head_dim == 256)
    return {ErrorCode::kUnsupported, "attention problem: the backward supports head_dim 64 and 128 (256 is forward only)"};
  if (s.seq_q < 1 || s.seq_kv < 1 || s.seq_q > kMaxSeq || s.seq_kv > kMaxSeq)
    return bad("seq_q and seq_kv must be in 1..2^20");
  if (s.doc_bound && !s.is_dflash()) return bad("doc_bound is for the DFlash masks only");
  switch (s.mask) {
    case dflash_attn::kMaskNone:
    case dflash_attn::kMaskCausal:
      break;
    case dflash_attn::kMaskDocCausal:
      if (s.seq_q != s.seq_kv) return bad("doc_causal needs seq_q == seq_kv");
      if (s.num_docs < 1 || s.num_docs > s.seq_q) return bad("num_docs must be in 1..seq_q");
      break;
    case dflash_attn::kMaskDflashFull:
    case dflash_attn::kMaskDflashSliding:
      if (s.block_size < 1 || s.block_size > 256) return bad("block_size must be in 1..256");
      if (s.seq_q % s.block_size != 0) return bad("DFlash needs seq_q = num_blocks * block_size");
      if (s.ctx_len < 0 || s.seq_kv != s.ctx_len + s.seq_q) return bad("DFlash needs seq_kv = ctx_len + seq_q");
      if (s.mask == dflash_attn::kMaskDflashSliding && s.window < 1) return bad("window must be >= 1");
      break;
    default:
      return bad("unknown mask kind " + std::to_string(s.mask));
  }
  return Status::Ok();
}

Result<ProblemSpec> ParseProblem(const tuner::Problem& p, Direction direction) {
  if (!p.is_object()) return InvalidArgument("attention problem must be a JSON object, got " + p.dump());
  static const std::set<std::string> kKnown = {"mask", "batch", "heads_q", "heads_kv", "head_dim", "seq_q", "seq_kv",
                                               "num_docs", "block_size", "ctx_len", "window", "doc_bound",
                                               "dtype"};
  for (const auto& [k, v] : p.items())
    if (!kKnown.count(k)) return InvalidArgument("attention problem: unknown field '" + k + "'");
  if (p.contains("dtype") && p.at("dtype") != "bf16") return InvalidArgument("attention problem: dtype must be bf16");
  ProblemSpec s;
  auto m = p.find("mask");
  if (m == p.end() || !m->is_string()) return InvalidArgument("attention problem: field 'mask' (a string) is required");
  DFLASH_ASSIGN_OR_RETURN(s.mask, ParseMaskName(m->get<std::string>()));
  DFLASH_ASSIGN_OR_RETURN(s.batch, GetInt(p, "batch", 1, false));
  DFLASH_ASSIGN_OR_RETURN(s.heads_q, GetInt(p, "heads_q", 0, true));
  DFLASH_ASSIGN_OR_RETURN(s.heads_kv, GetInt(p, "heads_kv", s.heads_q, false));
  DFLASH_ASSIGN_OR_RETURN(s.head_dim, GetInt(p, "head_dim", 0, true));
  DFLASH_ASSIGN_OR_RETURN(s.seq_q, GetInt(p, "seq_q", 0, true));
  DFLASH_ASSIGN_OR_RETURN(s.seq_kv, GetInt(p, "seq_kv", s.seq_q, false));
  DFLASH_ASSIGN_OR_RETURN(s.num_docs, GetInt(p, "num_docs", 0, s.mask == dflash_attn::kMaskDocCausal));
  DFLASH_ASSIGN_OR_RETURN(s.block_size, GetInt(p, "block_size", 16, false));
  DFLASH_ASSIGN_OR_RETURN(s.ctx_len, GetInt(p, "ctx_len", 0, s.is_dflash()));
  DFLASH_ASSIGN_OR_RETURN(s.window, GetInt(p, "window", 2048, false));
  if (auto d = p.find("doc_bound"); d != p.end()) {
    if (!d->is_boolean()) return InvalidArgument("attention problem: field 'doc_bound' must be true or false");
    s.doc_bound = d->get<bool>();
  }
  DFLASH_RETURN_IF_ERROR(Validate(s, direction));
  return s;
}

tuner::Problem ToJson(const ProblemSpec& s) {
  tuner::Problem j = {{"mask", std::string(MaskName(s.mask))}, {"batch", s.batch}, {"heads_q", s.heads_q},
                      {"heads_kv", s.heads_kv}, {"head_dim", s.head_dim}, {"seq_q", s.seq_q},
                      {"seq_kv", s.seq_kv}, {"dtype", "bf16"}};
  if (s.mask == dflash_attn::kMaskDocCausal) j["num_docs"] = s.num_docs;
  if (s.is_dflash()) {
    j["block_size"] = s.block_size;
    j["ctx_len"] = s.ctx_len;
  }
  if (s.mask == dflash_attn::kMaskDflashSliding) j["window"] = s.window;
  if (s.doc_bound) j["doc_bound"] = true;  // absent when false: unpacked keys are the same as before the field
  return j;
}

std::int64_t RoundUpPow2(std::int64_t v, std::int64_t floor) {
  std::int64_t r = 1;
  while (r < v || r < floor) r <<= 1;
  return r;
}

ProblemSpec BucketOf(const ProblemSpec& s) {
  ProblemSpec b = s;
  if (s.is_dflash()) {
    b.seq_q = RoundUpPow2(s.num_blocks(), 8) * s.block_size;
    b.ctx_len = RoundUpPow2(s.ctx_len, 128);
    b.seq_kv = b.ctx_len + b.seq_q;
  } else {
    b.seq_q = RoundUpPow2(s.seq_q, 128);
    b.seq_kv = s.mask == dflash_attn::kMaskDocCausal ? b.seq_q : RoundUpPow2(s.seq_kv, 128);
    if (s.mask == dflash_attn::kMaskDocCausal) b.num_docs = RoundUpPow2(s.num_docs, 1);
  }
  return b;
}

}  // namespace dflash::attention
