#include "kernels/presets.h"

#include <fstream>
#include <tuple>

#include "kernels/attention/attention_family.h"
#include "kernels/attention/attention_params.cuh"
#include "kernels/attention/attention_problem.h"
#include "kernels/conv1d/conv1d_family.h"
#include "kernels/gdn/gdn_family.h"
#include "kernels/gdn/gdn_problem.h"
#include "kernels/registry.h"

namespace dflash::kernels {
namespace {

// Qwen3.6-27B text config (the fields the kernels need), ../shared/spec/dflash-training.md §1.
nlohmann::json Qwen36_27B() {
  return {{"model_type", "qwen3_5_text"},   {"hidden_size", 5120},         {"intermediate_size", 17408},
          {"num_hidden_layers", 64},        {"full_attention_interval", 4}, {"num_attention_heads", 24},
          {"num_key_value_heads", 4},       {"head_dim", 256},             {"linear_num_key_heads", 16},
          {"linear_num_value_heads", 48},   {"linear_key_head_dim", 128},  {"linear_value_head_dim", 128},
          {"linear_conv_kernel_dim", 4},    {"vocab_size", 248320}};
}

nlohmann::json Qwen36_27B_Drafter() {
  return {{"hidden_size", 5120}, {"num_hidden_layers", 5}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
          {"head_dim", 128},     {"block_size", 16},       {"sliding_window", 2048}};
}

// The tiny model of the tests: both layer kinds, small dims.
nlohmann::json TinyTarget() {
  return {{"model_type", "qwen3_5_text"},  {"hidden_size", 256},         {"intermediate_size", 512},
          {"num_hidden_layers", 8},        {"full_attention_interval", 4}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2},      {"head_dim", 64},             {"linear_num_key_heads", 1},
          {"linear_num_value_heads", 2},   {"linear_key_head_dim", 128}, {"linear_value_head_dim", 128},
          {"linear_conv_kernel_dim", 4},   {"vocab_size", 1024}};
}

nlohmann::json TinyDrafter() {
  return {{"hidden_size", 256}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 64},     {"block_size", 16},       {"sliding_window", 256}};
}

// HF multimodal configs nest the text model under "text_config".
const nlohmann::json& TextConfig(const nlohmann::json& c) {
  return c.contains("text_config") ? c.at("text_config") : c;
}

Result<std::int64_t> Field(const nlohmann::json& c, const char* name) {
  if (!c.contains(name) || !c.at(name).is_number_integer()) {
    return InvalidArgument(std::string("model config has no integer field '") + name + "'");
  }
  return c.at(name).get<std::int64_t>();
}

Result<nlohmann::json> ReadJson(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) return NotFound("cannot open " + p.string());
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(p.string() + " is not a JSON object");
  return j;
}

// Documents per packed row assumed for the packed problems (document-causal attention, conv1d, gated delta rule;
// their buckets round the count up, so rows of up to 8 documents share the warmed keys).
constexpr std::int64_t kPackedDocs = 8;

}  // namespace

std::vector<std::string> PresetNames() { return {"dflash-27b", "tiny"}; }

Result<TrainingShapes> PresetShapes(const std::string& name) {
  TrainingShapes s;
  if (name == "dflash-27b") {
    s.target = Qwen36_27B();
    s.drafter = Qwen36_27B_Drafter();
    s.max_length = 4096;
    s.num_anchors = 512;
  } else if (name == "tiny") {
    s.target = TinyTarget();
    s.drafter = TinyDrafter();
    s.max_length = 512;
    s.num_anchors = 16;
  } else {
    return InvalidArgument("unknown preset '" + name + "' (known: dflash-27b, tiny)");
  }
  return s;
}

Result<TrainingShapes> ShapesFromConfigFile(const std::filesystem::path& file) {
  DFLASH_ASSIGN_OR_RETURN(nlohmann::json j, ReadJson(file));
  const std::filesystem::path base = file.parent_path();
  TrainingShapes s;
  if (!j.contains("target_config") || !j["target_config"].is_string()) {
    return InvalidArgument(file.string() + ": needs \"target_config\": \"path/to/config.json\"");
  }
  DFLASH_ASSIGN_OR_RETURN(s.target, ReadJson(base / j["target_config"].get<std::string>()));
  if (j.contains("drafter_config")) {
    DFLASH_ASSIGN_OR_RETURN(s.drafter, ReadJson(base / j["drafter_config"].get<std::string>()));
  }
  for (auto [name, field] : {std::pair{"max_length", &s.max_length}, {"batch_size", &s.batch_size},
                             {"num_anchors", &s.num_anchors}}) {
    if (!j.contains(name)) continue;
    if (!j[name].is_number_integer() || j[name].get<std::int64_t>() < 1) {
      return InvalidArgument(file.string() + ": \"" + name + "\" must be a positive integer");
    }
    *field = j[name].get<std::int64_t>();
  }
  if (j.contains("rows")) {
    const std::string rows = j["rows"].is_string() ? j["rows"].get<std::string>() : "";
    if (rows != "both" && rows != "pad" && rows != "pack") {
      return InvalidArgument(file.string() + ": \"rows\" must be \"both\", \"pad\" or \"pack\"");
    }
    s.padded_rows = rows != "pack";
    s.packed_rows = rows != "pad";
  }
  return s;
}

Result<std::vector<WorkItem>> ProblemsFor(const TrainingShapes& shapes, std::vector<std::string>* notes) {
  std::vector<WorkItem> items;
  const nlohmann::json& t = TextConfig(shapes.target);
  // dflash-train launches every kernel on one row at a time (batch 1), whatever its batch size: the keys are those
  // of one row of max_length tokens.
  const std::int64_t tokens = shapes.max_length;
  // Target gated-delta-net layers: conv1d over q|k|v channels (absent in dense Qwen3 targets).
  if (t.contains("linear_num_key_heads")) {
    DFLASH_ASSIGN_OR_RETURN(std::int64_t hk, Field(t, "linear_num_key_heads"));
    DFLASH_ASSIGN_OR_RETURN(std::int64_t hv, Field(t, "linear_num_value_heads"));
    DFLASH_ASSIGN_OR_RETURN(std::int64_t dk, Field(t, "linear_key_head_dim"));
    DFLASH_ASSIGN_OR_RETURN(std::int64_t dv, Field(t, "linear_value_head_dim"));
    if (t.contains("linear_conv_kernel_dim") && t["linear_conv_kernel_dim"] != 4) {
      return Unsupported("linear_conv_kernel_dim other than 4 is not supported by the conv1d family");
    }
    const std::int64_t channels = 2 * hk * dk + hv * dv;
    if (shapes.padded_rows) {
      items.push_back({&conv1d::Family(), conv1d::MakeProblem(tokens, channels, 1),
                       "target gated-delta-net conv1d"});
    }
    if (shapes.packed_rows) {
      items.push_back({&conv1d::Family(), conv1d::MakeProblem(tokens, channels, kPackedDocs),
                       "target gated-delta-net conv1d, packed"});
    }
    // The gated delta rule itself (training: no initial state, no final state needed).
    if (dk == gdn::kHeadDim && dv == gdn::kHeadDim && hv % hk == 0) {
      for (const auto& [wanted, seqs, what] : {std::tuple{shapes.padded_rows, std::int64_t{1}, ""},
                                               std::tuple{shapes.packed_rows, kPackedDocs, ", packed"}}) {
        if (!wanted) continue;
        items.push_back({&gdn::ChunkedForwardFamily(),
                         gdn::MakeProblem(static_cast<int>(hk), static_cast<int>(hv), tokens, seqs,
                                          /*initial_state=*/false, /*final_state=*/false),
                         std::string("target gated-delta-net chunked forward") + what});
      }
    } else if (notes) {
      notes->push_back("gdn: head dims " + std::to_string(dk) + "/" + std::to_string(dv) +
                       " are not supported (the family is written for 128); skipped");
    }
  }
  // Target full-attention layers (forward only): causal over each sample, document-causal for packed batches.
  if (t.contains("num_attention_heads")) {
    attention::ProblemSpec a;
    DFLASH_ASSIGN_OR_RETURN(a.heads_q, Field(t, "num_attention_heads"));
    a.heads_kv = t.value("num_key_value_heads", a.heads_q);
    a.head_dim = t.value("head_dim", 128);
    a.mask = dflash_attn::kMaskCausal;
    a.batch = 1;
    a.seq_q = a.seq_kv = shapes.max_length;
    if (shapes.padded_rows) {
      items.push_back({&attention::ForwardFamily(), attention::ToJson(a), "target attention, causal"});
    }
    a.mask = dflash_attn::kMaskDocCausal;
    a.batch = 1;
    a.seq_q = a.seq_kv = tokens;
    a.num_docs = kPackedDocs;
    if (shapes.packed_rows) {
      items.push_back({&attention::ForwardFamily(), attention::ToJson(a), "target attention, packed (doc-causal)"});
    }
  }
  // Drafter attention (forward + backward): the full layer, and the sliding layer when the drafter has one.
  if (!shapes.drafter.is_null()) {
    const nlohmann::json& d = shapes.drafter;
    attention::ProblemSpec a;
    DFLASH_ASSIGN_OR_RETURN(a.heads_q, Field(d, "num_attention_heads"));
    a.heads_kv = d.value("num_key_value_heads", a.heads_q);
    a.head_dim = d.value("head_dim", d.value("hidden_size", 0) / std::max<std::int64_t>(a.heads_q, 1));
    a.batch = 1;
    a.block_size = d.value("block_size", 16);
    a.ctx_len = shapes.max_length;
    a.seq_q = shapes.num_anchors * a.block_size;
    a.seq_kv = a.ctx_len + a.seq_q;
    std::vector<std::pair<int, std::string>> masks = {{dflash_attn::kMaskDflashFull, "full"}};
    if (d.contains("sliding_window") && d["sliding_window"].is_number_integer()) {
      a.window = d["sliding_window"].get<std::int64_t>();
      masks.push_back({dflash_attn::kMaskDflashSliding, "sliding"});
    }
    for (const auto& [mask, name] : masks) {
      a.mask = mask;
      for (const bool packed : {false, true}) {
        if (!(packed ? shapes.packed_rows : shapes.padded_rows)) continue;
        a.doc_bound = packed;  // packed rows: the blocks' context bounded by their document's start
        const std::string what = "drafter attention, " + name + (packed ? ", packed" : "");
        items.push_back({&attention::ForwardFamily(), attention::ToJson(a), what + ", fwd"});
        items.push_back({&attention::BackwardFamily(), attention::ToJson(a), what + ", bwd"});
      }
    }
  }
  return items;
}

Result<WorkItem> ParseProblemArg(const std::string& arg) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos) return InvalidArgument("--problem wants FAMILY=JSON, got '" + arg + "'");
  const std::string name = arg.substr(0, eq);
  const tuner::KernelFamily* f = FindFamily(name);
  if (!f) return InvalidArgument("unknown kernel family '" + name + "' (see `dflash-tune families`)");
  nlohmann::json j = nlohmann::json::parse(arg.substr(eq + 1), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("--problem " + name + ": not a JSON object");
  return WorkItem{f, j, "--problem " + name};
}

}  // namespace dflash::kernels
