// enclave-audit: the compliance officer's CLI. Verifies the audit log offline with the log's
// public key, shows timelines, proves single entries to third parties, writes compliance
// reports (HTML/JSON), re-checks the archived evidence of past attestation verdicts, and
// runs a C2SP witness of logs (`witness serve`, docs/formats/witness.md);
// `init`, `append` and `evidence record` create and feed a log for tests and demos (the
// broker appends through the library).
// Thin: the work is in audit/. Exit codes: docs/formats/audit-log.md, "enclave-audit".
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "cli.h"
#include "enclave/attest/bundle.h"
#include "enclave/attest/policy.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/audit/evidence_archive.h"
#include "enclave/audit/log_writer.h"
#include "enclave/audit/proof.h"
#include "enclave/audit/report.h"
#include "enclave/audit/verify.h"
#include "enclave/audit/witness.h"
#include "enclave/audit/witness_client.h"
#include "enclave/audit/witness_policy.h"
#include "enclave/audit/witness_server.h"
#include "enclave/common/exit_codes.h"
#include "enclave/common/files.h"

namespace enclave {
namespace {

using cli::Args;
using cli::FlagSpec;
using nlohmann::json;
using namespace audit;

const FlagSpec kJson{"json", "", "print the result as JSON"};
const FlagSpec kLog{"log", "DIR", "audit log directory (holds audit.log)", true};
const FlagSpec kKey{"key", "LOG.pub", "the log's public key file (obtained out of band)", true};
const FlagSpec kSigningKey{"signing-key", "LOG.key", "the log's Ed25519 signing key file (mode 0600)", true};

std::string Short(const std::string& hex) { return hex.size() > 12 ? hex.substr(0, 12) : hex; }

std::string StripDigest(std::string s) {
  if (s.rfind("sha256:", 0) == 0) s.erase(0, 7);
  return s;
}

std::string Field(const json& f, const char* name) {
  auto it = f.find(name);
  return it != f.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// --- init / append ---

Status Init(const Args& args) {
  ASSIGN_OR_RETURN(LogSigningKey key, LogSigningKey::Generate());
  RETURN_IF_ERROR(key.Save(args.Get("signing-key")));
  RETURN_IF_ERROR(key.public_key().Save(args.Get("public-key"), false));
  RETURN_IF_ERROR(LogWriter::Create(args.Get("log"), key));
  const std::string id = HexEncode(key.public_key().log_id);
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"log", args.Get("log")}, {"log_id", id}, {"public_key", args.Get("public-key")},
                    {"signing_key", args.Get("signing-key")}});
  } else {
    std::printf("created audit log %s (log id %s)\nsigning key %s (keep it with the broker, mode 0600)\n"
                "public key  %s (give it to auditors)\n",
                args.Get("log").c_str(), id.c_str(), args.Get("signing-key").c_str(), args.Get("public-key").c_str());
  }
  return OkStatus();
}

// The writer cut a crash's unacknowledged tail when it opened the log: say so.
void ReportRecovery(const char* verb, const LogWriter& writer) {
  if (writer.recovery().truncated_bytes == 0) return;
  std::fprintf(stderr, "enclave-audit %s: recovered the log: cut %llu unacknowledged bytes (%s)\n", verb,
               static_cast<unsigned long long>(writer.recovery().truncated_bytes), writer.recovery().detail.c_str());
}

Status Append(const Args& args) {
  if (args.Has("event") == args.Has("events-file")) return InvalidInput("give exactly one of --event and --events-file");
  std::vector<std::string> lines;
  std::vector<size_t> line_numbers;  // in the events file, for messages
  if (args.Has("event")) {
    lines.push_back(args.Get("event"));
    line_numbers.push_back(1);
  } else {
    const std::string path = args.Get("events-file");
    std::ifstream file;
    if (path != "-") {
      file.open(path);
      if (!file) return NotFound(path + ": cannot open");
    }
    std::istream& in = path == "-" ? std::cin : file;
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
      if (line.empty() || line[0] == '#') continue;  // '#': a comment line
      lines.push_back(line);
      line_numbers.push_back(n);
    }
  }
  std::vector<Event> events;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = args.Has("event") ? "--event" : args.Get("events-file") + ":" + std::to_string(line_numbers[i]);
    ASSIGN_OR_RETURN(json j, ParseStrictJson(lines[i], where));
    auto e = EventFromJson(j);
    if (!e.ok()) return e.status().Annotate(where);
    // Every event must fit the log before the first is appended (no partial append): sized
    // with the largest index and a writer's timestamp when it has none.
    Event sized = *e;
    if (sized.time.empty()) sized.time = FormatTimestampMs(NowMs());
    if (auto bytes = SerializeEntry(sized, UINT64_MAX); !bytes.ok()) return bytes.status().Annotate(where);
    events.push_back(std::move(*e));
  }
  ASSIGN_OR_RETURN(LogSigningKey key, LogSigningKey::Load(args.Get("signing-key")));
  ASSIGN_OR_RETURN(auto writer, LogWriter::Open(args.Get("log"), std::move(key)));
  ReportRecovery("append", *writer);
  json indexes = json::array();
  for (Event& e : events) {
    ASSIGN_OR_RETURN(uint64_t idx, writer->Append(std::move(e)));
    indexes.push_back(idx);
  }
  const SignedTreeHead sth = writer->LatestTreeHead();
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"appended", indexes}, {"tree_head", sth.ToJson()}});
  } else {
    std::printf("appended %zu entr%s (%s); tree size now %llu, root %s\n", events.size(),
                events.size() == 1 ? "y" : "ies", indexes.dump().c_str(),
                static_cast<unsigned long long>(sth.head.tree_size), HexEncode(sth.head.root).c_str());
  }
  return OkStatus();
}

// --- verify ---

std::string DefaultCosignedPath(const Args& args) { return args.Get("log") + "/cosigned-checkpoint"; }

Status Verify(const Args& args) {
  ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(args.Get("key")));
  std::optional<AuditorState> state;
  const std::string state_path = args.Get("state");
  if (args.Has("state")) {
    ASSIGN_OR_RETURN(state, AuditorState::Load(state_path));
  } else if (args.Has("no-update")) {
    return InvalidInput("--no-update needs --state");
  }
  std::optional<WitnessPolicy> policy;
  if (args.Has("witness-policy")) {
    ASSIGN_OR_RETURN(policy, WitnessPolicy::Load(args.Get("witness-policy")));
  } else if (args.Has("cosigned")) {
    return InvalidInput("--cosigned needs --witness-policy");
  }
  VerifyOptions opts;
  if (state) opts.trusted = &*state;
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(args.Get("log"), key, opts));
  // With a witness policy the newest head accepted is the newest one the quorum cosigned.
  std::optional<WitnessedCheckpoint> witnessed;
  const std::string cosigned_path = args.Get("cosigned", DefaultCosignedPath(args));
  if (policy) {
    ASSIGN_OR_RETURN(witnessed, LoadWitnessedCheckpoint(v, key, *policy, cosigned_path));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bool updated = false;
  const SignedTreeHead accepted = witnessed ? witnessed->head : v.latest;
  if (args.Has("state") && !args.Has("no-update") &&
      !(state && state->tree_head.head.tree_size > accepted.head.tree_size)) {
    const AuditorState next{key.log_id, accepted};
    RETURN_IF_ERROR(next.Save(state_path));
    updated = true;
  }
  if (args.json()) {
    cli::PrintJson({{"ok", true},
                    {"log", v.path},
                    {"log_id", HexEncode(key.log_id)},
                    {"entries", v.entries},
                    {"tree_heads", v.tree_heads.size()},
                    {"file_bytes", v.file_bytes},
                    {"latest_tree_head", v.latest.ToJson()},
                    {"accepted_tree_head", accepted.ToJson()},
                    {"witnessed", witnessed ? WitnessedCheckpointJson(*witnessed, *policy, cosigned_path) : json(nullptr)},
                    {"previously_accepted", v.previously_accepted ? v.previously_accepted->ToJson() : json(nullptr)},
                    {"state_file", args.Has("state") ? json(state_path) : json(nullptr)},
                    {"state_updated", updated},
                    {"seconds", seconds}});
    return OkStatus();
  }
  std::printf("OK: %s verified with log key %s\n", v.path.c_str(), Short(HexEncode(key.log_id)).c_str());
  std::printf("  entries          %llu (every entry well-formed, in sequence)\n",
              static_cast<unsigned long long>(v.entries));
  std::printf("  tree heads       %zu, every signature valid, every root recomputed from the entries\n",
              v.tree_heads.size());
  std::printf("  latest head      size %llu, signed %s, root %s\n",
              static_cast<unsigned long long>(v.latest.head.tree_size),
              FormatTimestampMs(v.latest.head.timestamp_ms).c_str(), HexEncode(v.latest.head.root).c_str());
  if (v.previously_accepted) {
    std::printf("  consistency      extends the tree head accepted earlier (size %llu, signed %s): no edit, "
                "deletion, rollback or fork\n",
                static_cast<unsigned long long>(v.previously_accepted->head.tree_size),
                FormatTimestampMs(v.previously_accepted->head.timestamp_ms).c_str());
  } else if (args.Has("state")) {
    std::printf("  consistency      first run with this state file: the latest head is trusted on first use\n");
  } else {
    std::printf("  consistency      not checked (no --state): truncation or a fork presented whole cannot be "
                "seen without remembering an earlier tree head\n");
  }
  if (witnessed) {
    std::string by;
    for (const CosignedBy& c : witnessed->cosigned_by) {
      by += (by.empty() ? "" : ", ") + c.name + " (" + FormatTimestampMs(c.timestamp * 1000) + ")";
    }
    std::printf("  witnessed        tree size %llu (root %s) cosigned by %s; quorum %s met (%s)\n",
                static_cast<unsigned long long>(witnessed->head.head.tree_size),
                HexEncode(witnessed->head.head.root).c_str(), by.empty() ? "no one" : by.c_str(),
                policy->Describe().c_str(), cosigned_path.c_str());
    if (!witnessed->not_cosigned.empty()) {
      std::string names;
      for (const std::string& n : witnessed->not_cosigned) names += (names.empty() ? "" : ", ") + n;
      std::printf("  not cosigned by  %s\n", names.c_str());
    }
    if (witnessed->unwitnessed_entries > 0) {
      std::printf("  not witnessed    the %llu entries after it are signed by the log only: not accepted until the "
                  "quorum cosigns a checkpoint that holds them\n",
                  static_cast<unsigned long long>(witnessed->unwitnessed_entries));
    }
  }
  if (updated) std::printf("  state            %s now holds tree size %llu\n", state_path.c_str(),
                           static_cast<unsigned long long>(accepted.head.tree_size));
  std::printf("  took             %.2f s for %llu bytes\n", seconds, static_cast<unsigned long long>(v.file_bytes));
  return OkStatus();
}

// --- show ---

std::string Details(const Entry& e) {
  const json& f = e.event.fields;
  switch (e.event.type) {
    case EventType::kHostEnrolled: {
      std::string s = "enrolled";
      if (f.contains("ek_cert_sha256")) s += ", EK cert " + Short(StripDigest(Field(f, "ek_cert_sha256")));
      if (f.contains("ak_public_sha256")) s += ", AK " + Short(StripDigest(Field(f, "ak_public_sha256")));
      return s;
    }
    case EventType::kAttestationVerdict: {
      std::string s = Field(f, "verdict") == "accepted" ? "ACCEPTED" : "REJECTED";
      std::string failed;
      for (const json& c : f["checks"]) {
        if (!c["ok"].get<bool>()) failed += (failed.empty() ? "" : "; ") + c["check"].get<std::string>() + ": " +
                                            c["reason"].get<std::string>();
      }
      if (!failed.empty()) s += " (" + failed + ")";
      else s += " (" + std::to_string(f["checks"].size()) + " checks passed)";
      return s;
    }
    case EventType::kKeyReleased: {
      std::string s = "key for dataset " + Field(f, "dataset_id") + ", lease " + Field(f, "lease_id") + ", job " +
                      Short(StripDigest(Field(f, "job_digest")));
      if (f.contains("expires")) s += ", expires " + Field(f, "expires");
      return s;
    }
    case EventType::kReleaseRefused: {
      std::string ds;
      for (const json& d : f["datasets"]) ds += (ds.empty() ? "" : ",") + d.get<std::string>();
      return "REFUSED release of " + ds + " to job " + Field(f, "job_id") + " under policy " + Field(f, "policy_id") +
             ": " + Field(f, "reason");
    }
    case EventType::kLeaseRenewed: return "lease " + Field(f, "lease_id") + " renewed until " + Field(f, "expires");
    case EventType::kRevoked:
      return "revoked " + Field(f, "subject") + " " + Field(f, "subject_id") + ": " + Field(f, "reason");
    case EventType::kPolicyActivated:
      return "policy " + Field(f, "policy_id") + " (" + Short(StripDigest(Field(f, "policy_digest"))) +
             ") signed by " + Field(f, "signer");
    case EventType::kJobStarted: {
      std::string ds;
      for (const json& d : f["datasets"]) ds += (ds.empty() ? "" : ",") + d.get<std::string>();
      return "job " + Short(StripDigest(Field(f, "job_digest"))) + " started on datasets " + ds;
    }
    case EventType::kJobFinished: {
      std::string s = "job " + Short(StripDigest(Field(f, "job_digest"))) + " finished, model " +
                      Short(StripDigest(Field(f, "model_digest")));
      if (f.contains("metrics")) {
        for (auto it = f["metrics"].begin(); it != f["metrics"].end(); ++it) {
          char buf[64];
          std::snprintf(buf, sizeof buf, " %s=%.4g", it.key().c_str(), it.value().get<double>());
          s += buf;
        }
      }
      return s;
    }
  }
  return "";
}

bool Matches(const Args& args, const Entry& e, int64_t since, int64_t until) {
  const json& f = e.event.fields;
  if (args.Has("type") && EventTypeName(e.event.type) != args.Get("type")) return false;
  if (args.Has("since") && e.time_ms < since) return false;
  if (args.Has("until") && e.time_ms >= until) return false;
  const std::string subject = Field(f, "subject"), subject_id = Field(f, "subject_id");
  if (args.Has("host")) {
    const std::string h = args.Get("host");
    if (Field(f, "host") != h && !(subject == "host" && subject_id == h)) return false;
  }
  if (args.Has("dataset")) {
    const std::string d = args.Get("dataset");
    bool hit = Field(f, "dataset_id") == d || (subject == "dataset" && subject_id == d);
    if (f.contains("datasets")) {
      for (const json& x : f["datasets"]) hit = hit || x == d;
    }
    if (!hit) return false;
  }
  if (args.Has("job")) {
    const std::string j = StripDigest(args.Get("job"));
    const std::string have = StripDigest(Field(f, "job_digest"));
    const bool by_subject = subject == "job" && subject_id == args.Get("job");
    if (!by_subject && (have.empty() || have.rfind(j, 0) != 0)) return false;
  }
  return true;
}

Status Show(const Args& args) {
  if (args.Has("job") && args.Get("job").empty()) return InvalidInput("--job needs a digest (or a prefix of one)");
  if (args.Has("type")) RETURN_IF_ERROR(ParseEventType(args.Get("type")).status());
  int64_t since = 0, until = 0;
  if (args.Has("since")) {
    auto t = ParseRfc3339Utc(args.Get("since"));
    if (!t.ok()) return t.status().Annotate("--since");
    since = *t;
  }
  if (args.Has("until")) {
    auto t = ParseRfc3339Utc(args.Get("until"));
    if (!t.ok()) return t.status().Annotate("--until");
    until = *t;
  }
  ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(args.Get("key")));
  struct Row {
    uint64_t index;
    Entry entry;
    std::string raw;
  };
  std::vector<Row> rows;
  VerifyOptions opts;
  opts.on_entry = [&](uint64_t index, uint64_t, ByteSpan bytes, const Entry& e) -> Status {
    if (Matches(args, e, since, until)) rows.push_back({index, e, std::string(bytes.begin(), bytes.end())});
    return OkStatus();
  };
  // Fail-closed: nothing is shown from a log that does not verify.
  ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(args.Get("log"), key, opts));
  if (args.json()) {
    json entries = json::array();
    for (const Row& r : rows) {
      entries.push_back({{"index", r.index}, {"entry", json::parse(r.raw)}});
    }
    cli::PrintJson({{"ok", true}, {"verified", true}, {"total_entries", v.entries},
                    {"latest_tree_head", v.latest.ToJson()}, {"shown", rows.size()}, {"entries", entries}});
    return OkStatus();
  }
  std::printf("%s: %llu entries, verified (latest signed tree head: size %llu, %s)\n\n", v.path.c_str(),
              static_cast<unsigned long long>(v.entries), static_cast<unsigned long long>(v.latest.head.tree_size),
              FormatTimestampMs(v.latest.head.timestamp_ms).c_str());
  std::printf("%6s  %-24s  %-19s  %-22s  %-18s  %s\n", "INDEX", "TIME (UTC)", "EVENT", "ACTOR", "HOST", "DETAILS");
  for (const Row& r : rows) {
    std::string host = Field(r.entry.event.fields, "host");
    std::printf("%6llu  %-24s  %-19s  %-22s  %-18s  %s\n", static_cast<unsigned long long>(r.index),
                r.entry.event.time.c_str(), std::string(EventTypeName(r.entry.event.type)).c_str(),
                r.entry.event.actor.c_str(), host.empty() ? "-" : host.c_str(), Details(r.entry).c_str());
  }
  std::printf("\n%zu of %llu entries shown\n", rows.size(), static_cast<unsigned long long>(v.entries));
  return OkStatus();
}

// --- prove / verify-proof / checkpoint / verifier-key ---

Status WriteOut(const Args& args, const std::string& text) {
  if (!args.Has("out")) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return OkStatus();
  }
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(args.Get("out"), args.Has("force")));
  RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  return out.Commit();
}

Status Prove(const Args& args) {
  ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(args.Get("key")));
  if (args.Has("entry") == args.Has("consistency")) return InvalidInput("give exactly one of --entry and --consistency");
  std::optional<uint64_t> size;
  if (args.Has("tree-size")) {
    ASSIGN_OR_RETURN(uint64_t s, args.GetU64("tree-size", 0));
    size = s;
  }
  json proof;
  std::string what;
  if (args.Has("consistency")) {
    ASSIGN_OR_RETURN(uint64_t old_size, args.GetU64("consistency", 0));
    if (!size) {
      ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(args.Get("log"), key));
      size = v.latest.head.tree_size;
    }
    ASSIGN_OR_RETURN(Proof p, ProveConsistency(args.Get("log"), key, old_size, *size));
    proof = p.ToJson();
    what = "the consistency proof from tree size " + std::to_string(old_size) + " to " + std::to_string(*size) + " (" +
           std::to_string(p.path.size()) + " hashes)";
  } else {
    ASSIGN_OR_RETURN(uint64_t index, args.GetU64("entry", 0));
    auto p = ProveInclusion(args.Get("log"), key, index, size);
    if (!p.ok() && p.status().code() == Code::kNotFound &&
        p.status().message().find("legacy head") != std::string::npos) {
      // A head of a version 1 log before its first chained head: the old proof form,
      // which carries that head's own signature (section 8, "enclave-audit-inclusion-proof").
      ASSIGN_OR_RETURN(InclusionBundle b, ProveEntry(args.Get("log"), key, index, size));
      proof = b.ToJson();
      what = "the inclusion proof (legacy form) of entry " + std::to_string(index) + " in the tree of size " +
             std::to_string(b.tree_head.head.tree_size);
    } else {
      if (!p.ok()) return p.status();
      proof = p->ToJson();
      what = "the inclusion proof of entry " + std::to_string(index) + " in the tree of size " +
             std::to_string(p->new_size) + " (" + std::to_string(p->path.size()) + " hashes)";
    }
  }
  RETURN_IF_ERROR(WriteOut(args, proof.dump(2) + "\n"));
  if (!args.Has("out")) return OkStatus();
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"out", args.Get("out")}, {"proof", proof}});
  } else {
    std::printf("wrote %s to %s\n", what.c_str(), args.Get("out").c_str());
  }
  return OkStatus();
}

Status VerifyLegacyProof(const Args& args, const json& j, const std::string& path) {
  if (!args.Has("key")) return InvalidInput(path + ": a legacy inclusion proof is checked with --key");
  ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(args.Get("key")));
  ASSIGN_OR_RETURN(InclusionBundle b, InclusionBundle::FromJson(j, path));
  auto entry = VerifyInclusionBundle(b, key);
  if (!entry.ok()) return entry.status().Annotate(path);
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"proof", "inclusion"}, {"signed", true}, {"leaf_index", b.index},
                    {"tree_head", b.tree_head.ToJson()}, {"entry", json::parse(b.entry)}});
    return OkStatus();
  }
  std::printf("OK: entry %llu is in log %s: included in the tree of size %llu signed %s (root %s)\n",
              static_cast<unsigned long long>(b.index), Short(HexEncode(key.log_id)).c_str(),
              static_cast<unsigned long long>(b.tree_head.head.tree_size),
              FormatTimestampMs(b.tree_head.head.timestamp_ms).c_str(), HexEncode(b.tree_head.head.root).c_str());
  std::printf("  %s  %s  %s  %s\n", entry->event.time.c_str(), std::string(EventTypeName(entry->event.type)).c_str(),
              entry->event.actor.c_str(), Details(*entry).c_str());
  return OkStatus();
}

Status VerifyProofVerb(const Args& args) {
  if (args.Has("key") == args.Has("unsigned")) return InvalidInput("give exactly one of --key and --unsigned");
  const std::string path = args.Get("proof");
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, 16u << 20));
  ASSIGN_OR_RETURN(json j, ParseStrictJson(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                                           path));
  if (j.is_object() && j.contains("format") && j["format"] == "enclave-audit-inclusion-proof") {
    return VerifyLegacyProof(args, j, path);
  }
  ASSIGN_OR_RETURN(Proof p, Proof::FromJson(j, path));
  std::optional<LogPublicKey> key;
  if (args.Has("key")) {
    ASSIGN_OR_RETURN(key, LogPublicKey::Load(args.Get("key")));
  }
  auto r = VerifyProof(p, key ? &*key : nullptr);
  if (!r.ok()) return r.status().Annotate(path);
  const bool inclusion = p.kind == ProofKind::kInclusion;
  if (args.json()) {
    json out = {{"ok", true}, {"proof", inclusion ? "inclusion" : "consistency"}, {"signed", r->signed_by_log}};
    if (inclusion) {
      out["leaf_index"] = p.leaf_index;
      out["leaf_hash"] = HexEncode(p.leaf_hash);
      out["tree_size"] = p.new_size;
      out["root"] = HexEncode(p.new_root);
      if (r->entry) out["entry"] = json::parse(*p.entry);
    } else {
      out["old_size"] = p.old_size;
      out["old_root"] = HexEncode(p.old_root);
      out["new_size"] = p.new_size;
      out["new_root"] = HexEncode(p.new_root);
    }
    cli::PrintJson(out);
    return OkStatus();
  }
  const std::string by = r->signed_by_log ? "signed by log " + Short(HexEncode(key->log_id))
                                          : "UNSIGNED: the roots are the proof's own, not shown to come from any log";
  if (inclusion) {
    std::printf("OK: leaf %llu (hash %s) is in the tree of size %llu, root %s (%s)\n",
                static_cast<unsigned long long>(p.leaf_index), HexEncode(p.leaf_hash).c_str(),
                static_cast<unsigned long long>(p.new_size), HexEncode(p.new_root).c_str(), by.c_str());
    if (r->entry) {
      std::printf("  %s  %s  %s  %s\n", r->entry->event.time.c_str(),
                  std::string(EventTypeName(r->entry->event.type)).c_str(), r->entry->event.actor.c_str(),
                  Details(*r->entry).c_str());
    }
  } else {
    std::printf("OK: the tree of size %llu (root %s) is a prefix of the tree of size %llu (root %s) (%s)\n",
                static_cast<unsigned long long>(p.old_size), HexEncode(p.old_root).c_str(),
                static_cast<unsigned long long>(p.new_size), HexEncode(p.new_root).c_str(), by.c_str());
  }
  return OkStatus();
}

Status CheckpointVerb(const Args& args) {
  ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(args.Get("key")));
  ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(args.Get("log"), key));
  const SignedTreeHead* head = nullptr;
  uint64_t size = v.latest.head.tree_size;
  if (args.Has("tree-size")) {
    ASSIGN_OR_RETURN(size, args.GetU64("tree-size", 0));
  }
  for (const TreeHeadAt& t : v.tree_heads) {
    if (t.sth.head.tree_size == size && t.sth.chained) head = &t.sth;
  }
  if (head == nullptr) {
    return NotFound(v.path + ": no chained (checkpoint-signed) tree head of size " + std::to_string(size) +
                    " (latest: " + std::to_string(v.latest.head.tree_size) + ")");
  }
  ASSIGN_OR_RETURN(std::string note, FormatCheckpointNote(key, *head));
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"tree_size", head->head.tree_size}, {"tree_head", head->ToJson()},
                    {"checkpoint", note}, {"verifier_key", NoteVerifierKey(key)}});
    return OkStatus();
  }
  return WriteOut(args, note);
}

Status VerifierKeyVerb(const Args& args) {
  ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(args.Get("key")));
  const std::string vkey = NoteVerifierKey(key);
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"verifier_key", vkey}, {"origin", CheckpointOrigin(key.log_id)},
                    {"log_id", HexEncode(key.log_id)}});
    return OkStatus();
  }
  return WriteOut(args, vkey + "\n");
}

// --- witness keygen / verifier-key / serve, cosign ---

Status WitnessKeygen(const Args& args) {
  ASSIGN_OR_RETURN(WitnessSigningKey key, WitnessSigningKey::Generate(args.Get("name")));
  RETURN_IF_ERROR(key.Save(args.Get("key")));
  const std::string vkey = key.public_key().VerifierKey();
  if (args.Has("vkey-out")) {
    ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(args.Get("vkey-out"), false));
    const std::string line = vkey + "\n";
    RETURN_IF_ERROR(out.Write(line.data(), line.size()));
    RETURN_IF_ERROR(out.Commit());
  }
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"name", key.public_key().name}, {"key", args.Get("key")}, {"verifier_key", vkey}});
  } else {
    std::printf("%s\n", vkey.c_str());
  }
  return OkStatus();
}

Status WitnessVerifierKey(const Args& args) {
  ASSIGN_OR_RETURN(WitnessSigningKey key, WitnessSigningKey::Load(args.Get("key")));
  const std::string vkey = key.public_key().VerifierKey();
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"name", key.public_key().name}, {"verifier_key", vkey}});
    return OkStatus();
  }
  return WriteOut(args, vkey + "\n");
}

// "HOST:PORT" or "[IPV6]:PORT".
Status ParseListen(const std::string& listen, WitnessServerOptions* o) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return InvalidInput("--listen must be HOST:PORT, got '" + listen + "'");
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  auto port = ParseCanonicalDecimal(listen.substr(colon + 1));
  if (host.empty() || !port.ok() || *port > 65535) return InvalidInput("--listen must be HOST:PORT, got '" + listen + "'");
  o->host = host;
  o->port = static_cast<int>(*port);
  return OkStatus();
}

Status WitnessServe(const Args& args) {
  WitnessServerOptions options;
  RETURN_IF_ERROR(ParseListen(args.Get("listen"), &options));
  ASSIGN_OR_RETURN(uint64_t threads, args.GetU64("threads", 4));
  if (threads < 1 || threads > 64) return InvalidInput("--threads must be 1..64");
  options.threads = static_cast<int>(threads);
  ASSIGN_OR_RETURN(uint64_t timeout, args.GetU64("timeout", 10));
  if (timeout < 1 || timeout > 600) return InvalidInput("--timeout must be 1..600 seconds");
  options.read_timeout_s = options.write_timeout_s = static_cast<int>(timeout);
  ASSIGN_OR_RETURN(WitnessSigningKey key, WitnessSigningKey::Load(args.Get("key")));
  const std::string vkey = key.public_key().VerifierKey();
  ASSIGN_OR_RETURN(std::vector<WitnessedLog> logs, LoadWitnessedLogs(args.Get("log-key")));
  // SIGTERM and SIGINT go to one waiting thread, which stops the server; every thread made
  // after this inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  WitnessOptions wopts;
  wopts.log_line = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  ASSIGN_OR_RETURN(std::unique_ptr<Witness> witness,
                   Witness::Open(args.Get("state"), std::move(key), logs, std::move(wopts)));
  ASSIGN_OR_RETURN(std::unique_ptr<WitnessServer> server, WitnessServer::Create(*witness, options));
  std::atomic<bool> finished{false};
  std::thread waiter([&server, &finished, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (!finished) server->Stop();
  });
  // The one line a supervisor (or a test) reads to learn where the witness listens.
  const std::string host = options.host.find(':') != std::string::npos ? "[" + options.host + "]" : options.host;
  cli::PrintJsonLine({{"listening", "http://" + host + ":" + std::to_string(server->port())},
                      {"port", server->port()},
                      {"verifier_key", vkey},
                      {"logs", logs.size()}});
  std::fflush(stdout);
  Status run = server->Run();
  finished = true;
  pthread_kill(waiter.native_handle(), SIGTERM);  // blocked here: it wakes the waiter, if still waiting
  waiter.join();
  return run;
}

Status Cosign(const Args& args) {
  ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(args.Get("key")));
  ASSIGN_OR_RETURN(WitnessPolicy policy, WitnessPolicy::Load(args.Get("witness-policy")));
  ASSIGN_OR_RETURN(uint64_t timeout, args.GetU64("timeout", 10));
  if (timeout < 1 || timeout > 600) return InvalidInput("--timeout must be 1..600 seconds");
  size_t with_url = 0;
  for (const PolicyWitness& w : policy.witnesses()) with_url += w.url.empty() ? 0 : 1;
  if (with_url == 0) return InvalidInput(args.Get("witness-policy") + ": no witness has a URL to submit to");
  ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(args.Get("log"), key));
  ASSIGN_OR_RETURN(std::string note, FormatCheckpointNote(key, v.latest));
  const std::string out_path = args.Get("out", DefaultCosignedPath(args));
  // The size cosigned last time is the first guess of each witness's size (a 409 corrects it).
  uint64_t hint = 0;
  if (auto prev = ReadWholeFile(out_path, kMaxNoteBytes + 1); prev.ok()) {
    auto cp = VerifyCheckpointNote(std::string_view(reinterpret_cast<const char*>(prev->data()), prev->size()), key,
                                   out_path);
    if (cp.ok() && cp->tree_size <= v.latest.head.tree_size) hint = cp->tree_size;
  }
  WitnessClientOptions copts;
  copts.timeout_s = static_cast<int>(timeout);
  CosignResult r = CosignCheckpoint(policy, note, v.leaf_hashes, hint, copts);
  json outcomes = json::array();
  bool refused = false;
  std::string failures;
  for (const WitnessOutcome& o : r.outcomes) {
    json j = {{"name", o.name}, {"ok", o.status.ok()}, {"old_size", o.old_size}};
    if (o.cosignature) j["timestamp"] = o.cosignature->timestamp;
    if (!o.status.ok()) {
      j["error"] = {{"code", CodeName(o.status.code())}, {"message", o.status.message()}};
      refused = refused || o.status.code() == Code::kAuthFailed;
      failures += "; " + o.name + ": " + std::string(CodeName(o.status.code()));
    }
    outcomes.push_back(j);
    if (!args.json()) {
      std::fprintf(o.status.ok() ? stdout : stderr, "  %-16s %s\n", o.name.c_str(),
                   o.status.ok() ? ("cosigned (from size " + std::to_string(o.old_size) + ")").c_str()
                                 : o.status.ToString().c_str());
    }
  }
  const uint64_t size = v.latest.head.tree_size;
  if (!r.quorum) {
    const std::string m = "the checkpoint of size " + std::to_string(size) + " did not get the cosignatures of " +
                          policy.Describe() + " (" + out_path + " unchanged)" + failures;
    // A refusal as inconsistent is evidence against the log; silence is only unavailability.
    return refused ? AuthFailed(m) : Unavailable(m);
  }
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(out_path, true));
  RETURN_IF_ERROR(out.Write(r.cosigned_note.data(), r.cosigned_note.size()));
  RETURN_IF_ERROR(out.Commit());
  if (args.json()) {
    cli::PrintJson({{"ok", !refused}, {"tree_size", size}, {"out", out_path}, {"quorum", policy.Describe()},
                    {"witnesses", outcomes}, {"cosigned_checkpoint", r.cosigned_note}});
  } else {
    std::printf("cosigned: the checkpoint of size %llu has the cosignatures of %s; wrote %s\n",
                static_cast<unsigned long long>(size), policy.Describe().c_str(), out_path.c_str());
  }
  // The quorum cosigned, but a witness holds a checkpoint of this log that this one does not
  // extend: the log key signed two histories. Written, and still a failure.
  if (refused) {
    return AuthFailed("the quorum cosigned, but a witness refused the checkpoint as inconsistent with what it "
                      "cosigned before: the log forked" + failures);
  }
  return OkStatus();
}

// --- report ---

Status Report(const Args& args) {
  const std::string format = args.Get("format", "html");
  if (format != "html" && format != "json") return InvalidInput("--format must be html or json");
  ReportOptions opts;
  for (const char* flag : {"from", "to"}) {
    if (!args.Has(flag)) continue;
    auto t = ParseRfc3339Utc(args.Get(flag));
    if (!t.ok()) return t.status().Annotate(std::string("--") + flag);
    (std::string(flag) == "from" ? opts.from_ms : opts.to_ms) = *t;
  }
  ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(args.Get("key")));
  std::optional<AuditorState> state;
  if (args.Has("state")) {
    ASSIGN_OR_RETURN(state, AuditorState::Load(args.Get("state")));
    if (!state) return NotFound(args.Get("state") + ": no such auditor state file (run verify --state first)");
    opts.trusted = &*state;
    opts.state_path = args.Get("state");
  }
  // The witness flags of `verify`, with its checks (BuildReport calls the same library).
  std::optional<WitnessPolicy> policy;
  if (args.Has("witness-policy")) {
    ASSIGN_OR_RETURN(policy, WitnessPolicy::Load(args.Get("witness-policy")));
    opts.witness_policy = &*policy;
    opts.witness_policy_path = args.Get("witness-policy");
    opts.cosigned_path = args.Get("cosigned", DefaultCosignedPath(args));
  } else if (args.Has("cosigned")) {
    return InvalidInput("--cosigned needs --witness-policy");
  }
  // Open the output first (refuses to overwrite without --force), write it only after the
  // log verified in full: a failure leaves nothing under the final name.
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(args.Get("out"), args.Has("force")));
  ASSIGN_OR_RETURN(json report, BuildReport(args.Get("log"), key, opts));
  const std::string text = format == "json" ? report.dump(2) + "\n" : RenderReportHtml(report);
  RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  RETURN_IF_ERROR(out.Commit());
  const json& sum = report["summary"];
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"out", args.Get("out")}, {"format", format}, {"verdict", report["verdict"]},
                    {"summary", sum}, {"latest_tree_head", report["log"]["latest_tree_head"]}});
  } else {
    std::printf("wrote %s report %s\n  %s\n  %llu entries in the period, "
                "%llu jobs, %llu key releases, %llu failed attestations, %llu revocations\n",
                format.c_str(), args.Get("out").c_str(), report["verdict"]["text"].get<std::string>().c_str(),
                static_cast<unsigned long long>(sum["entries_in_period"]), static_cast<unsigned long long>(sum["jobs"]),
                static_cast<unsigned long long>(sum["key_releases"]),
                static_cast<unsigned long long>(sum["failed_attestations"]),
                static_cast<unsigned long long>(sum["revocations"]));
  }
  return OkStatus();
}

// --- evidence record / evidence verify ---

Result<std::string> ReadText(const std::string& path, size_t limit) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> b, ReadWholeFile(path, limit));
  return std::string(b.begin(), b.end());
}

Result<int64_t> UnixSeconds(const Args& args, const std::string& flag, int64_t fallback) {
  ASSIGN_OR_RETURN(uint64_t v, args.GetU64(flag, static_cast<uint64_t>(fallback)));
  if (v == 0 || v > static_cast<uint64_t>(INT64_MAX)) return InvalidInput("--" + flag + " out of range");
  return static_cast<int64_t>(v);
}

// The broker's recording step for tests and demos: appraise the given files as the
// broker would and append the verdict with its archived inputs.
Status EvidenceRecord(const Args& args) {
  VerdictInputs in;
  in.actor = args.Get("actor", "broker");
  in.host = args.Get("host");
  in.job_digest = args.Get("job-digest");
  const std::string policy_path = args.Get("policy");
  ASSIGN_OR_RETURN(in.policy, ReadText(policy_path, attest::kMaxPolicyBytes));
  in.policy_dir = std::filesystem::path(policy_path).parent_path().string();
  ASSIGN_OR_RETURN(in.evidence_bundle, ReadText(args.Get("evidence"), attest::kMaxBundleBytes));
  ASSIGN_OR_RETURN(in.enrolment_bundle, ReadText(args.Get("enrolment"), attest::kMaxBundleBytes));
  auto nonce = HexDecode(args.Get("nonce"));
  if (!nonce.ok() || nonce->empty() || nonce->size() > 32) {
    return InvalidInput("--nonce must be 1 to 32 bytes of hex, got '" + args.Get("nonce") + "'");
  }
  in.context.nonce = std::move(nonce).value();
  if (args.Has("bound-digest")) {
    auto b = HexDecode(args.Get("bound-digest"));
    if (!b.ok() || b->size() != 32) return InvalidInput("--bound-digest must be 64 hex digits (SHA-256)");
    crypto::Digest256 d{};
    std::copy(b->begin(), b->end(), d.begin());
    in.context.bound_digest = d;
  }
  ASSIGN_OR_RETURN(in.context.nonce_issued_at, UnixSeconds(args, "nonce-issued-at", 0));
  ASSIGN_OR_RETURN(in.context.appraised_at,
                   UnixSeconds(args, "appraised-at", static_cast<int64_t>(NowMs() / 1000)));
  if (args.Has("last-clock")) {
    ASSIGN_OR_RETURN(std::string text, ReadText(args.Get("last-clock"), 1u << 20));
    auto clock = attest::ParseClockState(text);
    if (!clock.ok()) return clock.status().Annotate(args.Get("last-clock"));
    in.context.last_clock = *clock;
  }
  ASSIGN_OR_RETURN(LogSigningKey key, LogSigningKey::Load(args.Get("signing-key")));
  ASSIGN_OR_RETURN(auto writer, LogWriter::Open(args.Get("log"), std::move(key)));
  ReportRecovery("evidence record", *writer);
  ASSIGN_OR_RETURN(EvidenceArchive archive, EvidenceArchive::Open(args.Get("log"), /*create=*/true));
  ASSIGN_OR_RETURN(RecordedVerdict r, AppraiseAndRecord(*writer, archive, in));
  const std::string verdict = attest::VerdictJson(r.verdict);
  if (args.json()) {
    cli::PrintJson({{"ok", true}, {"entry", r.index}, {"verdict", json::parse(verdict)}});
  } else {
    std::printf("recorded entry %llu: attestation.verdict for %s: %s\n%s\n", static_cast<unsigned long long>(r.index),
                in.host.c_str(), r.verdict.passed() ? "accepted" : "rejected", verdict.c_str());
  }
  return OkStatus();
}

// "Differs" and "could not evaluate" are outcomes with their own exit codes, not Status
// classes: the verb prints its result and exits here.
[[noreturn]] void ExitWith(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(code);
}

json VerdictOrNull(const std::string& text) {
  if (text.empty()) return nullptr;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json(text) : j;
}

Status EvidenceVerify(const Args& args) {
  ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(args.Get("key")));
  ASSIGN_OR_RETURN(uint64_t index, args.GetU64("entry", 0));
  std::optional<AuditorState> state;
  if (args.Has("state")) {
    ASSIGN_OR_RETURN(state, AuditorState::Load(args.Get("state")));
    if (!state) return NotFound(args.Get("state") + ": no such auditor state file (run verify --state first)");
  }
  ASSIGN_OR_RETURN(RecheckResult r, RecheckVerdict(args.Get("log"), key, index, state ? &*state : nullptr));
  const json& f = r.entry.event.fields;
  const char* outcome = r.outcome == RecheckOutcome::kReproduced ? "reproduced"
                        : r.outcome == RecheckOutcome::kDiffers  ? "differs"
                                                                 : "could not evaluate";
  const int code = r.outcome == RecheckOutcome::kReproduced ? kExitOk
                   : r.outcome == RecheckOutcome::kDiffers  ? kExitVerdictDiffers
                                                            : kExitNotEvaluated;
  if (r.outcome == RecheckOutcome::kNotEvaluated) {
    std::fprintf(stderr, "enclave-audit evidence verify: could not evaluate entry %llu: %s\n",
                 static_cast<unsigned long long>(index), r.not_evaluated.ToString().c_str());
  }
  if (args.json()) {
    json out = {{"ok", r.outcome == RecheckOutcome::kReproduced},
                {"outcome", outcome},
                {"entry", index},
                {"time", r.entry.event.time},
                {"host", Field(f, "host")},
                {"log", {{"verified", true}, {"entries", r.log.entries}, {"latest_tree_head", r.log.latest.ToJson()},
                         {"consistency_checked", state.has_value()}}},
                {"recorded_entry_verdict", Field(f, "verdict")},
                {"recorded", VerdictOrNull(r.recorded_json)},
                {"recomputed", VerdictOrNull(r.recomputed_json)},
                {"differences", r.differences}};
    if (r.outcome == RecheckOutcome::kNotEvaluated) {
      out["error"] = {{"code", "could not evaluate"}, {"class", CodeName(r.not_evaluated.code())},
                      {"message", r.not_evaluated.message()}};
    }
    cli::PrintJson(out);
  } else if (r.outcome != RecheckOutcome::kNotEvaluated) {
    std::printf("%s: entry %llu, attestation.verdict for host %s at %s (recorded: %s)\n",
                r.outcome == RecheckOutcome::kReproduced ? "REPRODUCED" : "DIFFERS",
                static_cast<unsigned long long>(index), Field(f, "host").c_str(), r.entry.event.time.c_str(),
                Field(f, "verdict").c_str());
    std::printf("  log          verified: %llu entries, latest signed tree head size %llu%s\n",
                static_cast<unsigned long long>(r.log.entries),
                static_cast<unsigned long long>(r.log.latest.head.tree_size),
                state ? ", consistent with the accepted head in --state" : "");
    std::printf("  inputs       evidence %s, enrolment %s, policy %s, %zu policy file(s); every blob matches its "
                "digest\n",
                Short(Field(f, "evidence_sha256")).c_str(), Short(Field(f, "enrolment_sha256")).c_str(),
                Short(StripDigest(Field(f, "policy_digest"))).c_str(), f.at("policy_files").size());
    std::printf("  recomputed   with now = %llu (the recorded appraisal time), nonce issued at %llu, %s\n",
                static_cast<unsigned long long>(f.at("appraised_at").get<uint64_t>()),
                static_cast<unsigned long long>(f.at("nonce_issued_at").get<uint64_t>()),
                f.contains("last_clock") ? "the recorded last clock info" : "no earlier clock info");
    if (r.outcome == RecheckOutcome::kReproduced) {
      std::printf("  result       the recomputed verdict equals the recorded one, byte for byte:\n  %s\n",
                  r.recomputed_json.c_str());
    } else {
      std::printf("  recorded     %s\n  recomputed   %s\n  differences  %zu\n", r.recorded_json.c_str(),
                  r.recomputed_json.c_str(), r.differences.size());
      for (const std::string& d : r.differences) std::printf("    - %s\n", d.c_str());
    }
  }
  if (code != kExitOk) ExitWith(code);
  return OkStatus();
}

// --- bench ---

Status Bench(const Args& args) {
  ASSIGN_OR_RETURN(uint64_t entries, args.GetU64("entries", 20000));
  ASSIGN_OR_RETURN(uint64_t threads, args.GetU64("threads", 64));
  if (entries == 0 || threads == 0 || threads > 1024) return InvalidInput("--entries > 0 and 1 <= --threads <= 1024");
  const std::string dir = args.Get("dir");
  ASSIGN_OR_RETURN(LogSigningKey key, LogSigningKey::Generate());
  const LogPublicKey pub = key.public_key();
  RETURN_IF_ERROR(LogWriter::Create(dir, key));
  // Keep the public key when asked, so `verify` and `report` can be timed on this log.
  if (args.Has("public-key")) RETURN_IF_ERROR(pub.Save(args.Get("public-key"), false));
  WriterOptions wo;
  wo.write_tiles = !args.Has("no-tiles");  // the baseline of what keeping the tiles costs
  ASSIGN_OR_RETURN(auto writer, LogWriter::Open(dir, std::move(key), wo));
  Event e = KeyReleased("broker@bench", "dataset-1", "lease-1", "gpu-host-1", std::string(64, 'c'),
                        "2030-01-01T00:00:00Z");
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (uint64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (next.fetch_add(1) < entries) {
        if (!writer->Append(e).ok()) failed = true;
      }
    });
  }
  for (auto& th : pool) th.join();
  // Sustained rate: the tiles of every batch written too.
  RETURN_IF_ERROR(writer->WaitForTiles());
  const double append_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (failed) return IoError("an append failed during the benchmark");
  const WriterStats stats = writer->stats();
  writer.reset();
  const auto t1 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(dir, pub));
  const double verify_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const size_t proof_len = v.entries > 0 ? InclusionProof(v.leaf_hashes, v.entries / 2, v.entries)->size() : 0;
  const json out = {{"ok", true},
                    {"entries", entries},
                    {"tiles", wo.write_tiles},
                    {"threads", threads},
                    {"append_seconds", append_s},
                    {"durable_appends_per_second", static_cast<double>(entries) / append_s},
                    {"fdatasyncs", stats.batches},
                    {"mean_batch", static_cast<double>(entries) / static_cast<double>(stats.batches)},
                    {"verify_seconds", verify_s},
                    {"file_bytes", v.file_bytes},
                    {"inclusion_proof_hashes", proof_len},
                    {"inclusion_proof_bytes", proof_len * 32}};
  if (args.json()) {
    cli::PrintJson(out);
  } else {
    std::printf("%llu durable appends from %llu threads in %.3f s: %.0f appends/s, %llu fdatasyncs (mean batch %.1f)\n"
                "verify: %.3f s for %llu entries (%llu bytes); inclusion proof: %zu hashes (%zu bytes)\n",
                static_cast<unsigned long long>(entries), static_cast<unsigned long long>(threads), append_s,
                static_cast<double>(entries) / append_s, static_cast<unsigned long long>(stats.batches),
                static_cast<double>(entries) / static_cast<double>(stats.batches), verify_s,
                static_cast<unsigned long long>(v.entries), static_cast<unsigned long long>(v.file_bytes), proof_len,
                proof_len * 32);
  }
  return OkStatus();
}

}  // namespace
}  // namespace enclave

int main(int argc, char** argv) {
  using namespace enclave;
  cli::Program p;
  p.name = "enclave-audit";
  p.summary = "verify the tamper-evident audit log offline, show its timeline, prove single entries, report";
  p.holds_keys = true;  // init, append and bench hold the log signing key
  p.verbs = {
      {"verify", "recompute the Merkle tree, check every signed tree head and consistency with --state", "", 0,
       {kLog, kKey, {"state", "FILE", "auditor state: the last accepted tree head (created on first use, then updated)"},
        {"no-update", "", "check against --state but do not advance it"},
        {"witness-policy", "FILE", "C2SP tlog-policy: accept only a checkpoint cosigned by its quorum"},
        {"cosigned", "FILE", "the cosigned checkpoint (default: DIR/cosigned-checkpoint)"}, kJson},
       Verify},
      {"show", "print the verified log as a timeline, filtered", "", 0,
       {kLog, kKey, {"job", "DIGEST", "entries of this job (job digest or a prefix of it)"},
        {"host", "HOST", "entries about this host"}, {"dataset", "ID", "entries about this dataset"},
        {"type", "TYPE", "one event type (host.enrolled, attestation.verdict, key.released, ...)"},
        {"since", "TIME", "entries at or after this RFC 3339 UTC time"},
        {"until", "TIME", "entries before this RFC 3339 UTC time"}, kJson},
       Show},
      {"prove", "write an inclusion proof of one entry, or a consistency proof of two tree sizes", "", 0,
       {kLog, kKey, {"entry", "N", "inclusion: entry index (0-based)"},
        {"consistency", "OLD [NEW]", "consistency: the tree of size OLD is a prefix of the one of size NEW "
                                     "(or --tree-size; default: the latest)"},
        {"tree-size", "S", "prove against the signed tree head of this size (default: the latest)"},
        {"out", "FILE", "write the proof here (default: stdout)"}, {"force", "", "overwrite --out"}, kJson},
       Prove},
      {"verify-proof", "check an inclusion or consistency proof with only the log's public key", "", 0,
       {{"proof", "FILE", "proof from `prove` (or any RFC 6962 proof in that form)", true},
        {"key", "LOG.pub", "the log's public key (key file or note verifier key): checkpoints must be signed by it"},
        {"unsigned", "", "check only the hashes against the roots the proof states (RFC 6962 test vectors)"}, kJson},
       VerifyProofVerb},
      {"checkpoint", "verify the log, then print a tree head as a C2SP signed checkpoint note", "", 0,
       {kLog, kKey, {"tree-size", "S", "the head of this size (default: the latest)"},
        {"out", "FILE", "write the note here (default: stdout)"}, {"force", "", "overwrite --out"}, kJson},
       CheckpointVerb},
      {"verifier-key", "print the log's public key as a note verifier key (name+hash+key)", "", 0,
       {kKey, {"out", "FILE", "write it here (default: stdout)"}, {"force", "", "overwrite --out"}, kJson},
       VerifierKeyVerb},
      {"witness keygen", "make a witness key (C2SP cosignature/v1, Ed25519) and print its verifier key", "", 0,
       {{"name", "NAME", "the witness's name, e.g. witness.example.org/w1 (no spaces or '+')", true},
        {"key", "FILE", "new witness key file (mode 0600)", true},
        {"vkey-out", "FILE", "also write the verifier key to this new file"}, kJson},
       WitnessKeygen},
      {"witness verifier-key", "print the verifier key of a witness key", "", 0,
       {{"key", "FILE", "the witness key file", true}, {"out", "FILE", "write it here (default: stdout)"},
        {"force", "", "overwrite --out"}, kJson},
       WitnessVerifierKey},
      {"witness serve", "serve C2SP tlog-witness add-checkpoint over HTTP: cosign only consistent checkpoints", "", 0,
       {{"key", "FILE", "the witness key file (mode 0600)", true},
        {"state", "DIR", "the witness's state: the latest cosigned checkpoint of every log (created if missing)", true},
        {"listen", "HOST:PORT", "address to listen on, e.g. 127.0.0.1:7380 (port 0: any; the first stdout line says)",
         true},
        {"log-key", "FILE", "the logs to witness: one note verifier key per line, or a LOG.pub", true},
        {"threads", "N", "connections served at once (default 4)"},
        {"timeout", "S", "seconds a request may take to arrive, and an answer to leave (default 10)"}},
       WitnessServe},
      {"cosign", "verify the log, then have the policy's witnesses cosign its latest checkpoint", "", 0,
       {kLog, kKey, {"witness-policy", "FILE", "C2SP tlog-policy file: witnesses (with URLs) and the quorum", true},
        {"out", "FILE", "the cosigned checkpoint (default: DIR/cosigned-checkpoint; replaced when the quorum cosigned)"},
        {"timeout", "S", "seconds per witness request (default 10)"}, kJson},
       Cosign},
      {"report", "verify the log, then write an HTML (or JSON) compliance report for a period", "", 0,
       {kLog, kKey, {"out", "FILE", "the report file (written only if the log verifies)", true},
        {"from", "TIME", "entries at or after this RFC 3339 UTC time (default: the first)"},
        {"to", "TIME", "entries before this RFC 3339 UTC time (default: all)"},
        {"format", "html|json", "html (default): a self-contained page; json: the same content for machines"},
        {"state", "FILE", "also check consistency with the tree head this auditor accepted (not updated)"},
        {"witness-policy", "FILE", "C2SP tlog-policy: report only if a checkpoint is cosigned by its quorum"},
        {"cosigned", "FILE", "the cosigned checkpoint (default: DIR/cosigned-checkpoint)"},
        {"force", "", "overwrite --out"}, kJson},
       Report},
      {"init", "create a log and its key pair (tests, demos; the broker does this in production)", "", 0,
       {{"log", "DIR", "new log directory", true}, {"signing-key", "LOG.key", "new signing key file (mode 0600)", true},
        {"public-key", "LOG.pub", "new public key file", true}, kJson},
       Init},
      {"append", "append events given as JSON (tests, demos; the broker appends through the library)", "", 0,
       {kLog, kSigningKey, {"event", "JSON", "one event: {\"type\":..., \"actor\":..., fields...}"},
        {"events-file", "FILE", "one JSON event per line, '#' lines are comments ('-': stdin)"}, kJson},
       Append},
      {"evidence verify",
       "verify the log, then recompute one archived attestation verdict offline and compare it with the record",
       "", 0,
       {kLog, kKey, {"entry", "N", "index of an attestation.verdict entry (0-based)", true},
        {"state", "FILE", "also check consistency with the tree head this auditor accepted (not updated)"}, kJson},
       EvidenceVerify},
      {"evidence record",
       "appraise evidence as the broker does and append the verdict with its archived inputs (tests, demos)", "", 0,
       {kLog, kSigningKey, {"host", "HOST", "the host's id", true},
        {"actor", "ACTOR", "who decides (default: broker)"},
        {"policy", "FILE", "attestation policy (its EK root files are archived too)", true},
        {"enrolment", "FILE", "the host's enrolment bundle (its AK public)", true},
        {"evidence", "FILE", "the host's evidence bundle", true},
        {"nonce", "HEX", "the nonce the verifier issued (1..32 bytes)", true},
        {"nonce-issued-at", "SECONDS", "when the nonce was issued (unix seconds)", true},
        {"appraised-at", "SECONDS", "appraisal time (unix seconds; default now)"},
        {"bound-digest", "HEX", "SHA-256 of the data bound into the quote"},
        {"last-clock", "FILE", "last accepted clock info (enclave-attest clock v1)"},
        {"job-digest", "DIGEST", "the job this verdict is for"}, kJson},
       EvidenceRecord},
      {"bench", "measure durable appends/s with group commit, verification time and proof size", "", 0,
       {{"dir", "DIR", "new scratch log directory", true}, {"entries", "N", "appends (default 20000)"},
        {"threads", "T", "concurrent appenders (default 64)"},
        {"public-key", "LOG.pub", "also write the log's public key here (to verify the log later)"},
        {"no-tiles", "", "keep no tlog-tiles beside the log (to measure what they cost)"}, kJson},
       Bench},
  };
  // `prove --consistency OLD NEW`: NEW is the --tree-size of the proof.
  std::vector<char*> args(argv, argv + argc);
  std::string tree_size_flag = "--tree-size";
  if (argc > 1 && std::string(argv[1]) == "prove") {
    for (size_t i = 2; i + 2 < args.size(); ++i) {
      if (std::string(args[i]) == "--consistency" && std::string(args[i + 2]).rfind("--", 0) != 0) {
        args.insert(args.begin() + static_cast<long>(i) + 2, tree_size_flag.data());
        break;
      }
    }
  }
  return cli::Main(p, static_cast<int>(args.size()), args.data());
}
