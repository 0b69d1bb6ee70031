// dflash-tune cache administration: verify-cache, list, show, stats, evict, export, import.
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cache/bundle.h"
#include "cache/rows.h"
#include "cli_common.h"
#include "tuner/gpu_runtime.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::cli {
namespace {

using nlohmann::json;

// Parses "30d", "12h", "45m", "90s" or plain seconds.
std::optional<std::int64_t> ParseAge(const std::string& text) {
  if (text.empty()) return std::nullopt;
  std::int64_t mult = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'd': mult = 86400; digits.pop_back(); break;
    case 'h': mult = 3600; digits.pop_back(); break;
    case 'm': mult = 60; digits.pop_back(); break;
    case 's': digits.pop_back(); break;
    default: break;
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits) * mult;
}

// --load: every entry whose arch is the GPU's is loaded by the driver (cuModuleLoadData) and its kernels resolved.
std::function<Status(const cache::Entry&)> GpuLoadCheck(int* skipped_other_arch, std::string* gpu_note) {
  if (gpu::DeviceCount() == 0) {
    *gpu_note = "no GPU present: --load checked nothing";
    return nullptr;
  }
  auto ctx = gpu::Context::Primary(0);
  if (!ctx.ok()) {
    *gpu_note = "cannot use GPU 0: " + ctx.status().message();
    return nullptr;
  }
  auto shared = std::make_shared<gpu::Context>(std::move(*ctx));
  *gpu_note = "loaded on GPU 0 (" + shared->info().name + ", " + shared->info().arch() + ")";
  return [shared, skipped_other_arch](const cache::Entry& e) -> Status {
    if (!tuner::RunsOn(e.key.arch, shared->info().cc())) {
      ++*skipped_other_arch;
      return Status::Ok();
    }
    DFLASH_ASSIGN_OR_RETURN(gpu::Module m, gpu::Module::Load(e.cubin, e.key.ReadableName()));
    json names = json::parse(e.kernel_names, nullptr, false);
    if (!names.is_object()) return Corruption("kernel_names is not a JSON object");
    for (auto& [expr, lowered] : names.items()) {
      auto f = m.Function(lowered.get<std::string>());
      if (!f.ok()) return f.status();
    }
    return Status::Ok();
  };
}

int VerifyCache(const GlobalOptions& g, bool repair, bool load) {
  auto c = OpenCache(g, /*create=*/false);
  if (!c.ok()) return FailCache(g, "open the cache", c.status());
  int other_arch = 0;
  std::string gpu_note;
  std::function<Status(const cache::Entry&)> check;
  if (load) check = GpuLoadCheck(&other_arch, &gpu_note);
  auto report = (*c)->Verify(repair, check);
  if (!report.ok()) {
    // Not even the row-by-row reading could run (e.g. the schema page itself is damaged).
    return FailCache(g, "verify the cache", report.status());
  }
  const bool healthy = report->ok();
  if (g.json) {
    json problems = json::array();
    for (const auto& p : report->problems) problems.push_back({{"table", p.table}, {"row", p.row}, {"what", p.what}});
    json out = {{"cache_dir", (*c)->dir().string()}, {"ok", healthy}, {"entries_checked", report->entries_checked},
                {"artifacts_checked", report->artifacts_checked},
                {"candidates_checked", report->candidates_checked}, {"problems", problems},
                {"repaired", report->repaired}, {"read_only", (*c)->read_only()}};
    if (report->salvage) {
      const auto& sv = *report->salvage;
      out["salvage"] = {{"route", sv.route}, {"rows_saved", sv.rows_saved}, {"lost", sv.lost}, {"damaged", sv.damaged},
                        {"quarantined", sv.dropped}, {"kept_aside", sv.kept_aside.string()}};
    }
    if (load) {
      out["loaded"] = report->loaded;
      out["load_note"] = gpu_note;
    }
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "cache " << (*c)->dir().string() << (((*c)->read_only()) ? " (read-only)" : "") << "\n";
    std::cout << "checked " << report->entries_checked << " entries, " << report->artifacts_checked
              << " artifacts, " << report->candidates_checked << " candidates; "
              << (healthy ? "integrity_check ok" : "see below") << "\n";
    if (load) std::cout << "--load: " << gpu_note << "; " << report->loaded << " entries loaded\n";
    for (const auto& p : report->problems) {
      std::cout << "PROBLEM " << p.table << (p.row.empty() ? "" : " " + p.row.substr(0, 16)) << ": " << p.what << "\n";
    }
    if (report->salvage) {
      const auto& sv = *report->salvage;
      std::cout << sv.Summary() << "\n";
      for (const auto& part : sv.damaged) std::cout << "DAMAGED " << part << "\n";
      for (const auto& lost : sv.lost) std::cout << "LOST " << lost << "\n";
      for (const auto& q : sv.dropped) std::cout << "QUARANTINED " << q << "\n";
      std::cout << "the next verify is clean; the next warmup re-tunes what was lost\n";
    } else if (repair && report->repaired > 0) {
      std::cout << "repaired: " << report->repaired << " rows moved to quarantine; the next verify is clean\n";
    }
    std::cout << (healthy ? "healthy" : std::to_string(report->problems.size()) + " problem(s) found") << "\n";
  }
  if (healthy) return kExitOk;
  // Problems that --repair fixed still count for this run (the caller learns the cache was damaged).
  return kExitProblems;
}

int List(const GlobalOptions& g) {
  auto c = OpenCache(g, false, true);
  if (!c.ok()) return FailCache(g, "open the cache", c.status());
  std::int64_t unreadable = 0;
  auto rows = (*c)->List(&unreadable);
  if (!rows.ok()) return FailCache(g, "list the cache", rows.status());
  if (unreadable > 0) {
    std::cerr << "dflash-tune: " << unreadable << " entries of cache " << (*c)->dir().string()
              << " cannot be read (damaged database); run `dflash-tune --cache-dir " << (*c)->dir().string()
              << " verify-cache --repair`\n";
  }
  if (g.json) {
    json out = json::array();
    for (const auto& r : *rows) {
      out.push_back({{"entry", r.key_digest}, {"family", r.family}, {"arch", r.arch}, {"signature", r.signature},
                     {"config", r.config}, {"gpu", r.gpu_name}, {"median_ms", r.median_ms},
                     {"cubin_bytes", r.cubin_bytes}, {"created_at", r.created_at}});
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> t = {{"entry", "family", "arch", "problem", "config", "median ms", "gpu"}};
  for (const auto& r : *rows) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.4f", r.median_ms);
    t.push_back({r.key_digest.substr(0, 12), r.family, r.arch, r.signature, r.config, ms, r.gpu_name});
  }
  PrintTable(t);
  std::cout << rows->size() << " entries\n";
  return kExitOk;
}

int Show(const GlobalOptions& g, const std::string& prefix) {
  auto c = OpenCache(g, false, true);
  if (!c.ok()) return FailCache(g, "open the cache", c.status());
  auto e = (*c)->Show(prefix);
  if (!e.ok()) return FailCache(g, "show " + prefix, e.status());
  json j = cache::EntryToJson(*e, false);
  auto cands = (*c)->Candidates(e->key.Digest());
  json cj = json::array();
  if (cands.ok()) {
    for (const auto& r : *cands) {
      cj.push_back({{"config", r.config}, {"outcome", cache::OutcomeName(r.outcome)},
                    {"median_ms", r.timing.median_ms}, {"spread", r.timing.spread},
                    {"repetitions", r.timing.repetitions}, {"reason", r.reason}});
    }
  }
  j["candidates"] = cj;
  if (g.json) {
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "entry      " << j["key_digest"].get<std::string>() << "\n"
            << "family     " << e->key.family << "\n"
            << "arch       " << e->key.arch << "  (nvrtc " << e->key.nvrtc_version << ", tool " << e->key.tool_version
            << ", schema " << e->key.schema_version << ")\n"
            << "problem    " << e->key.signature << "\n"
            << "config     " << e->config << "\n"
            << "kernels    " << e->kernel_names << "\n"
            << "cubin      " << FormatBytes(static_cast<std::int64_t>(e->cubin.size())) << " sha256 "
            << e->cubin_sha256 << "\n"
            << "timing     median " << e->timing.median_ms << " ms, spread " << e->timing.spread << ", "
            << e->timing.repetitions << " reps\n"
            << "tuned on   " << e->provenance.gpu_name << " (" << e->provenance.sm_count << " SMs, driver "
            << e->provenance.driver_version << ") at " << e->provenance.host << ", "
            << FormatTime(e->provenance.created_at) << ", " << e->provenance.tuning_wall_s << " s\n";
  std::vector<std::vector<std::string>> t = {{"candidate", "outcome", "median ms", "reason"}};
  for (const auto& r : cj) {
    t.push_back({r["config"], r["outcome"], std::to_string(r["median_ms"].get<double>()), r["reason"]});
  }
  if (t.size() > 1) PrintTable(t);
  return kExitOk;
}

int Stats(const GlobalOptions& g) {
  auto c = OpenCache(g, false);
  if (!c.ok()) return FailCache(g, "open the cache", c.status());
  auto s = (*c)->Stats();
  if (!s.ok()) return FailCache(g, "read the cache's stats", s.status());
  if (g.json) {
    std::cout << json{{"cache_dir", (*c)->dir().string()}, {"entries", s->entries}, {"artifacts", s->artifacts},
                      {"candidates", s->candidates}, {"quarantined_rows", s->quarantined_rows},
                      {"entry_bytes", s->entry_bytes}, {"artifact_bytes", s->artifact_bytes},
                      {"file_bytes", s->file_bytes}, {"hits", s->hits}, {"misses", s->misses},
                      {"quarantined", s->quarantined}, {"read_only", (*c)->read_only()}}
                     .dump(2)
              << "\n";
    return kExitOk;
  }
  PrintTable({{"cache", (*c)->dir().string() + ((*c)->read_only() ? " (read-only)" : "")},
              {"entries", std::to_string(s->entries) + " (" + FormatBytes(s->entry_bytes) + " of cubins)"},
              {"artifacts", std::to_string(s->artifacts) + " (" + FormatBytes(s->artifact_bytes) + ")"},
              {"candidates", std::to_string(s->candidates)},
              {"quarantined rows", std::to_string(s->quarantined_rows)},
              {"on disk", FormatBytes(s->file_bytes)},
              {"hits / misses", std::to_string(s->hits) + " / " + std::to_string(s->misses)},
              {"quarantined (reads)", std::to_string(s->quarantined)}});
  return kExitOk;
}

}  // namespace

void AddCacheCommands(CLI::App& app, GlobalOptions& g, Action* run) {
  auto* verify = app.add_subcommand("verify-cache", "Prove the cache is sound: integrity_check, every checksum, "
                                                    "cubin sanity (exit 0 healthy, 1 problems, 2 unopenable)");
  auto repair = std::make_shared<bool>(false);
  auto load = std::make_shared<bool>(false);
  verify->add_flag("--repair", *repair, "Quarantine bad rows so the next verify is clean");
  verify->add_flag("--load", *load, "Also load every cubin for the present GPU's arch with the CUDA driver");
  verify->callback([&g, run, repair, load] { *run = [&g, repair, load] { return VerifyCache(g, *repair, *load); }; });

  app.add_subcommand("list", "List the cache's entries (tuned winners)")->callback([&g, run] {
    *run = [&g] { return List(g); };
  });

  auto* show = app.add_subcommand("show", "Show one entry and all its candidates' results");
  auto prefix = std::make_shared<std::string>();
  show->add_option("entry", *prefix, "Entry digest or a unique prefix of it (from `list`)")->required();
  show->callback([&g, run, prefix] { *run = [&g, prefix] { return Show(g, *prefix); }; });

  app.add_subcommand("stats", "Entries, bytes, hit/miss/quarantine counters")->callback([&g, run] {
    *run = [&g] { return Stats(g); };
  });

  auto* evict = app.add_subcommand("evict", "Remove entries (and compiled artifacts) by family, arch, age or "
                                            "stale toolchain");
  struct EvictArgs {
    std::string family, arch, older_than;
    bool stale = false, all = false;
  };
  auto ea = std::make_shared<EvictArgs>();
  evict->add_option("--family", ea->family, "Only this kernel family");
  evict->add_option("--arch", ea->arch, "Only this arch (e.g. sm_120)");
  evict->add_option("--older-than", ea->older_than, "Only entries created longer ago than this (30d, 12h, 90s)");
  evict->add_flag("--stale", ea->stale, "Only entries whose NVRTC, tool or schema version is not the current one");
  evict->add_flag("--all", ea->all, "Everything");
  evict->callback([&g, run, ea] {
    *run = [&g, ea]() -> int {
      cache::EvictFilter f;
      f.all = ea->all;
      if (!ea->family.empty()) f.family = ea->family;
      if (!ea->arch.empty()) f.arch = ea->arch;
      if (!ea->older_than.empty()) {
        f.older_than_s = ParseAge(ea->older_than);
        if (!f.older_than_s) return Fail("--older-than: '" + ea->older_than + "' is not an age like 30d, 12h or 90s");
      }
      if (ea->stale) f.stale_nvrtc = tuner::NvrtcVersion();
      auto c = OpenCache(g, false);
      if (!c.ok()) return FailCache(g, "open the cache", c.status());
      auto n = (*c)->Evict(f);
      if (!n.ok()) return FailCache(g, "evict", n.status());
      if (g.json) {
        std::cout << json{{"removed_entries", *n}}.dump() << "\n";
      } else {
        std::cout << "removed " << *n << " entries\n";
      }
      return kExitOk;
    };
  });

  auto* exp = app.add_subcommand("export", "Write every sound entry into a portable, checksummed bundle file");
  auto out_path = std::make_shared<std::string>();
  exp->add_option("bundle", *out_path, "Bundle file to write")->required();
  exp->callback([&g, run, out_path] {
    *run = [&g, out_path]() -> int {
      auto c = OpenCache(g, false, true);
      if (!c.ok()) return FailCache(g, "open the cache", c.status());
      auto r = cache::ExportBundle(**c, *out_path);
      if (!r.ok()) return FailCache(g, "export to " + *out_path, r.status());
      if (g.json) {
        std::cout << json{{"exported", r->exported}, {"skipped_bad", r->skipped_bad}}.dump() << "\n";
      } else {
        std::cout << "exported " << r->exported << " entries to " << *out_path
                  << (r->skipped_bad ? " (" + std::to_string(r->skipped_bad) + " damaged entries left out)" : "")
                  << "\n";
      }
      return kExitOk;
    };
  });

  auto* imp = app.add_subcommand("import", "Merge a bundle into the cache (verifies everything; keeps the faster "
                                           "entry per key)");
  auto in_path = std::make_shared<std::string>();
  imp->add_option("bundle", *in_path, "Bundle file to read")->required();
  imp->callback([&g, run, in_path] {
    *run = [&g, in_path]() -> int {
      auto c = OpenCache(g, true);
      if (!c.ok()) return FailCache(g, "open the cache", c.status());
      auto r = cache::ImportBundle(**c, *in_path);
      if (!r.ok()) return FailCache(g, "import " + *in_path, r.status());
      if (g.json) {
        std::cout << json{{"imported", r->imported}, {"replaced", r->replaced}, {"kept_ours", r->kept_ours},
                          {"rejected", r->rejected}}
                         .dump(2)
                  << "\n";
      } else {
        std::cout << "imported " << r->imported << ", replaced " << r->replaced << " (bundle faster), kept "
                  << r->kept_ours << " (ours faster), rejected " << r->rejected.size() << "\n";
        for (const auto& why : r->rejected) std::cout << "REJECTED " << why << "\n";
      }
      return r->rejected.empty() ? kExitOk : kExitProblems;
    };
  });
}

}  // namespace dflash::cli
