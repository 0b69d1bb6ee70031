#include "cache/rows.h"

#include <openssl/evp.h>

#include "base/sha256.h"
#include "cache/cubin_elf.h"

#include <ctime>

namespace dflash::cache {

const char* const kEntryColumns =
    "key_digest, family, source_hash, compile_options, arch, nvrtc_version, signature, schema_version, "
    "tool_version, config, kernel_names, cubin, cubin_sha256, median_ms, spread, repetitions, host, gpu_name, "
    "sm_count, driver_version, prov_nvrtc_version, prov_tool_version, created_at, tuning_wall_s, checksum";

const char* const kArtifactColumns =
    "artifact_digest, family, config, source_hash, compile_options, arch, nvrtc_version, schema_version, "
    "tool_version, status, cubin, cubin_sha256, kernel_names, resources, log, compile_ms, created_at, checksum";

Entry EntryFromRow(const Stmt& s) {
  Entry e;
  TuningKey& k = e.key;
  k.family = s.Text(1);
  k.source_hash = s.Text(2);
  k.compile_options = s.Text(3);
  k.arch = s.Text(4);
  k.nvrtc_version = s.Text(5);
  k.signature = s.Text(6);
  k.schema_version = static_cast<int>(s.Int(7));
  k.tool_version = s.Text(8);
  e.config = s.Text(9);
  e.kernel_names = s.Text(10);
  e.cubin = s.Blob(11);
  e.cubin_sha256 = s.Text(12);
  e.timing = {s.Real(13), s.Real(14), static_cast<int>(s.Int(15))};
  Provenance& p = e.provenance;
  p.host = s.Text(16);
  p.gpu_name = s.Text(17);
  p.sm_count = static_cast<int>(s.Int(18));
  p.driver_version = s.Text(19);
  p.nvrtc_version = s.Text(20);
  p.tool_version = s.Text(21);
  p.created_at = s.Int(22);
  p.tuning_wall_s = s.Real(23);
  e.checksum = s.Text(24);
  return e;
}

Status InsertEntry(Db& db, const Entry& e) {
  DFLASH_ASSIGN_OR_RETURN(Stmt s, db.Prepare(std::string("INSERT OR REPLACE INTO entries(") + kEntryColumns +
                                             ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  const TuningKey& k = e.key;
  const Provenance& p = e.provenance;
  s.Bind(1, k.Digest()).Bind(2, k.family).Bind(3, k.source_hash).Bind(4, k.compile_options).Bind(5, k.arch);
  s.Bind(6, k.nvrtc_version).Bind(7, k.signature).Bind(8, std::int64_t{k.schema_version}).Bind(9, k.tool_version);
  s.Bind(10, e.config).Bind(11, e.kernel_names).Bind(12, std::span<const std::uint8_t>(e.cubin));
  s.Bind(13, e.cubin_sha256).Bind(14, e.timing.median_ms).Bind(15, e.timing.spread);
  s.Bind(16, std::int64_t{e.timing.repetitions}).Bind(17, p.host).Bind(18, p.gpu_name);
  s.Bind(19, std::int64_t{p.sm_count}).Bind(20, p.driver_version).Bind(21, p.nvrtc_version).Bind(22, p.tool_version);
  s.Bind(23, p.created_at).Bind(24, p.tuning_wall_s).Bind(25, e.checksum);
  return s.Run();
}

Artifact ArtifactFromRow(const Stmt& s) {
  Artifact a;
  ArtifactKey& k = a.key;
  k.family = s.Text(1);
  k.config = s.Text(2);
  k.source_hash = s.Text(3);
  k.compile_options = s.Text(4);
  k.arch = s.Text(5);
  k.nvrtc_version = s.Text(6);
  k.schema_version = static_cast<int>(s.Int(7));
  k.tool_version = s.Text(8);
  a.status = s.Text(9) == "ok" ? ArtifactStatus::kOk : ArtifactStatus::kCompileFailed;
  a.cubin = s.Blob(10);
  a.cubin_sha256 = s.Text(11);
  a.kernel_names = s.Text(12);
  a.resources = s.Text(13);
  a.log = s.Text(14);
  a.compile_ms = s.Real(15);
  a.created_at = s.Int(16);
  a.checksum = s.Text(17);
  return a;
}

Status InsertArtifact(Db& db, const Artifact& a) {
  DFLASH_ASSIGN_OR_RETURN(Stmt s, db.Prepare(std::string("INSERT OR REPLACE INTO artifacts(") + kArtifactColumns +
                                             ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  const ArtifactKey& k = a.key;
  s.Bind(1, k.Digest()).Bind(2, k.family).Bind(3, k.config).Bind(4, k.source_hash).Bind(5, k.compile_options);
  s.Bind(6, k.arch).Bind(7, k.nvrtc_version).Bind(8, std::int64_t{k.schema_version}).Bind(9, k.tool_version);
  s.Bind(10, std::string_view(ArtifactStatusName(a.status))).Bind(11, std::span<const std::uint8_t>(a.cubin));
  s.Bind(12, a.cubin_sha256).Bind(13, a.kernel_names).Bind(14, a.resources).Bind(15, a.log);
  s.Bind(16, a.compile_ms).Bind(17, a.created_at).Bind(18, a.checksum);
  return s.Run();
}

Status UpsertCandidate(Db& db, const CandidateResult& c) {
  DFLASH_ASSIGN_OR_RETURN(
      Stmt s, db.Prepare("INSERT OR REPLACE INTO candidates(key_digest, config, outcome, median_ms, spread, "
                         "repetitions, reason, gpu_name, created_at) VALUES(?,?,?,?,?,?,?,?,?)"));
  s.Bind(1, c.key_digest).Bind(2, c.config).Bind(3, std::string_view(OutcomeName(c.outcome)));
  s.Bind(4, c.timing.median_ms).Bind(5, c.timing.spread).Bind(6, std::int64_t{c.timing.repetitions});
  s.Bind(7, c.reason).Bind(8, c.gpu_name).Bind(9, c.created_at);
  return s.Run();
}

Status VerifyEntry(const Entry& e, const std::string& stored_digest, const TuningKey* expected) {
  if (e.key.Digest() != stored_digest) return Corruption("key fields do not match the stored key digest");
  if (expected && !(e.key == *expected)) return Corruption("stored key differs from the requested key");
  if (Sha256Hex(e.cubin) != e.cubin_sha256) return Corruption("cubin SHA-256 mismatch (blob damaged)");
  if (RowChecksum(e) != e.checksum) return Corruption("row checksum mismatch (key, config or metadata damaged)");
  return Status::Ok();
}

Status VerifyArtifact(const Artifact& a, const std::string& stored_digest, const ArtifactKey* expected) {
  if (a.key.Digest() != stored_digest) return Corruption("key fields do not match the stored artifact digest");
  if (expected && !(a.key == *expected)) return Corruption("stored artifact key differs from the requested key");
  if (Sha256Hex(a.cubin) != a.cubin_sha256) return Corruption("cubin SHA-256 mismatch (blob damaged)");
  if (RowChecksum(a) != a.checksum) return Corruption("row checksum mismatch (artifact metadata damaged)");
  return Status::Ok();
}

std::string Base64Encode(std::span<const std::uint8_t> bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes.data(), static_cast<int>(bytes.size()));
  out.resize(n);
  return out;
}

Result<std::vector<std::uint8_t>> Base64Decode(const std::string& text) {
  if (text.size() % 4 != 0) return Corruption("base64 text length is not a multiple of 4");
  std::vector<std::uint8_t> out(3 * (text.size() / 4) + 1);
  int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return Corruption("invalid base64");
  std::size_t pad = 0;
  if (!text.empty() && text.back() == '=') ++pad;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++pad;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

nlohmann::json EntryToJson(const Entry& e, bool with_cubin) {
  const TuningKey& k = e.key;
  const Provenance& p = e.provenance;
  nlohmann::json j = {
      {"key_digest", k.Digest()},
      {"key", {{"family", k.family}, {"source_hash", k.source_hash}, {"compile_options", k.compile_options},
               {"arch", k.arch}, {"nvrtc_version", k.nvrtc_version}, {"signature", k.signature},
               {"schema_version", k.schema_version}, {"tool_version", k.tool_version}}},
      {"config", e.config},
      {"kernel_names", e.kernel_names},
      {"cubin_bytes", e.cubin.size()},
      {"cubin_sha256", e.cubin_sha256},
      {"timing", {{"median_ms", e.timing.median_ms}, {"spread", e.timing.spread},
                  {"repetitions", e.timing.repetitions}}},
      {"provenance", {{"host", p.host}, {"gpu_name", p.gpu_name}, {"sm_count", p.sm_count},
                      {"driver_version", p.driver_version}, {"nvrtc_version", p.nvrtc_version},
                      {"tool_version", p.tool_version}, {"created_at", p.created_at},
                      {"tuning_wall_s", p.tuning_wall_s}}},
      {"checksum", e.checksum},
  };
  if (with_cubin) j["cubin_base64"] = Base64Encode(e.cubin);
  return j;
}

Result<Entry> EntryFromJson(const nlohmann::json& j) {
  try {
    Entry e;
    const auto& k = j.at("key");
    e.key.family = k.at("family");
    e.key.source_hash = k.at("source_hash");
    e.key.compile_options = k.at("compile_options");
    e.key.arch = k.at("arch");
    e.key.nvrtc_version = k.at("nvrtc_version");
    e.key.signature = k.at("signature");
    e.key.schema_version = k.at("schema_version");
    e.key.tool_version = k.at("tool_version");
    e.config = j.at("config");
    e.kernel_names = j.at("kernel_names");
    e.cubin_sha256 = j.at("cubin_sha256");
    const auto& t = j.at("timing");
    e.timing = {t.at("median_ms"), t.at("spread"), t.at("repetitions")};
    const auto& p = j.at("provenance");
    e.provenance.host = p.at("host");
    e.provenance.gpu_name = p.at("gpu_name");
    e.provenance.sm_count = p.at("sm_count");
    e.provenance.driver_version = p.at("driver_version");
    e.provenance.nvrtc_version = p.at("nvrtc_version");
    e.provenance.tool_version = p.at("tool_version");
    e.provenance.created_at = p.at("created_at");
    e.provenance.tuning_wall_s = p.at("tuning_wall_s");
    e.checksum = j.at("checksum");
    DFLASH_ASSIGN_OR_RETURN(e.cubin, Base64Decode(j.at("cubin_base64").get<std::string>()));
    return e;
  } catch (const nlohmann::json::exception& ex) {
    return Corruption(std::string("malformed entry record: ") + ex.what());
  }
}

namespace {

std::string KeyColumnOf(const std::string& table) { return table == "entries" ? "key_digest" : "artifact_digest"; }

Status InsertQuarantine(Db& db, const std::string& table, const std::string& key, const std::string& reason,
                        const std::string& row_json, std::span<const std::uint8_t> blob) {
  DFLASH_ASSIGN_OR_RETURN(Stmt ins, db.Prepare("INSERT INTO quarantine(source_table, row_key, reason, quarantined_at, "
                                               "row_json, blob) VALUES(?,?,?,?,?,?)"));
  ins.Bind(1, table).Bind(2, key).Bind(3, reason).Bind(4, static_cast<std::int64_t>(std::time(nullptr)));
  ins.Bind(5, row_json).Bind(6, blob);
  return ins.Run();
}

}  // namespace

Status CheckEntryRow(const Entry& e, const std::string& stored_digest, const TuningKey* expected) {
  DFLASH_RETURN_IF_ERROR(VerifyEntry(e, stored_digest, expected));
  return CheckCubinForArch(e.cubin, e.key.arch);
}

Status CheckArtifactRow(const Artifact& a, const std::string& stored_digest, const ArtifactKey* expected) {
  DFLASH_RETURN_IF_ERROR(VerifyArtifact(a, stored_digest, expected));
  return a.status == ArtifactStatus::kOk ? CheckCubinForArch(a.cubin, a.key.arch) : Status::Ok();
}

Status RecordLostRow(Db& db, const std::string& table, const std::string& key, const std::string& reason) {
  return InsertQuarantine(db, table, key, reason, "{}", {});
}

Status QuarantineRow(Db& db, const std::string& table, const std::string& digest, const std::string& reason,
                     bool only_if_unreadable) {
  if (table != "entries" && table != "artifacts") return InvalidArgument("no table " + table);
  const std::string key_col = KeyColumnOf(table);
  DFLASH_ASSIGN_OR_RETURN(Stmt s, db.Prepare("SELECT * FROM " + table + " WHERE " + key_col + " = ?"));
  s.Bind(1, digest);
  Result<bool> row = s.Step();
  if (row.ok() && !*row) return Status::Ok();  // another process quarantined it first
  if (row.ok() && only_if_unreadable) return Status::Ok();
  if (row.ok()) {
    nlohmann::json j = nlohmann::json::object();
    std::vector<std::uint8_t> blob;
    for (int i = 0; i < sqlite3_column_count(s.get()); ++i) {
      const std::string name = sqlite3_column_name(s.get(), i);
      if (name == "cubin") {
        blob = s.Blob(i);
      } else {
        j[name] = s.Text(i);
      }
    }
    DFLASH_RETURN_IF_ERROR(InsertQuarantine(db, table, digest, reason, j.dump(), blob));
  } else if (row.status().code() == ErrorCode::kCorruption) {
    DFLASH_RETURN_IF_ERROR(InsertQuarantine(db, table, digest, reason + " (the row itself is unreadable)", "{}", {}));
  } else {
    return row.status();
  }
  DFLASH_ASSIGN_OR_RETURN(Stmt del, db.Prepare("DELETE FROM " + table + " WHERE " + key_col + " = ?"));
  del.Bind(1, digest);
  return del.Run();  // a damaged page under the row makes this Corruption: the caller heals the database
}

}  // namespace dflash::cache
