#include "enclave/audit/verify.h"

#include <sys/stat.h>

#include "enclave/audit/record.h"
#include "enclave/common/files.h"
#include "head_chain.h"
#include "strict_json.h"

namespace enclave::audit {
namespace {

using nlohmann::json;

std::string Hex16(const Hash& h) { return HexEncode(h).substr(0, 16); }

std::string Describe(const SignedTreeHead& sth) {
  return "size " + std::to_string(sth.head.tree_size) + ", signed " + FormatTimestampMs(sth.head.timestamp_ms) +
         ", root " + Hex16(sth.head.root);
}

Result<Hash> HashFromHex(const json& v, const std::string& what) {
  if (!v.is_string()) return InvalidInput(what + " must be a hex string");
  const std::string& text = v.get_ref<const std::string&>();
  auto b = HexDecode(text);
  if (!b.ok() || b->size() != 32 || HexEncode(*b) != text) return InvalidInput(what + " must be 64 lower-case hex digits");
  Hash h{};
  std::copy(b->begin(), b->end(), h.begin());
  return h;
}

// The string member `key` of `j`, or "" when j is not an object, or the member is absent or
// not a string. Never throws: the files read here are untrusted (json::value throws on a
// member of another type).
std::string StringMember(const json& j, const char* key) {
  if (!j.is_object()) return std::string();
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

json AuditorState::ToJson() const {
  return {{"format", "enclave-audit-auditor-state"},
          {"version", 1},
          {"log_id", HexEncode(log_id)},
          {"tree_head", tree_head.ToJson()}};
}

Result<std::optional<AuditorState>> AuditorState::Load(const std::string& path) {
  auto bytes = ReadWholeFile(path, 1 << 20);
  if (!bytes.ok()) {
    if (bytes.status().code() == Code::kNotFound) return std::optional<AuditorState>();
    return bytes.status();
  }
  ASSIGN_OR_RETURN(json j, ParseStrictJson(std::string_view(reinterpret_cast<const char*>(bytes->data()),
                                                            bytes->size()),
                                           path));
  if (!j.is_object() || StringMember(j, "format") != "enclave-audit-auditor-state") {
    return InvalidInput(path + ": not an auditor state file (format field)");
  }
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != 1)
    return Unsupported(path + ": unsupported state file version");
  AuditorState s;
  if (!j.contains("log_id")) return InvalidInput(path + ": field 'log_id' missing");
  ASSIGN_OR_RETURN(s.log_id, HashFromHex(j["log_id"], path + ": field 'log_id'"));
  if (!j.contains("tree_head")) return InvalidInput(path + ": field 'tree_head' missing");
  ASSIGN_OR_RETURN(s.tree_head, SignedTreeHead::FromJson(j["tree_head"], path));
  return std::optional<AuditorState>(std::move(s));
}

Status AuditorState::Save(const std::string& path) const {
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(path, /*allow_overwrite=*/true));
  const std::string text = ToJson().dump(2) + "\n";
  RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  return out.Commit();
}

Result<VerifyResult> VerifyLog(const std::string& dir, const LogPublicKey& key, const VerifyOptions& options) {
  VerifyResult res;
  res.path = dir + "/" + kLogFileName;
  const std::string& path = res.path;
  Hash log_id{};
  ScanEnd end;
  CompactRange tree;
  std::vector<uint64_t> entry_offsets;
  internal::JsonDoc doc;  // reused for every entry
  std::optional<internal::HeadChain> chain;  // once the header's version is known
  bool id_checked = false;
  auto where = [&](uint64_t offset) { return path + ": offset " + std::to_string(offset); };

  // The auditor state first: it must be for this key's log and its head must verify.
  if (options.trusted != nullptr) {
    const AuditorState& t = *options.trusted;
    if (t.log_id != key.log_id) {
      return InvalidInput("the auditor state is for log " + Hex16(t.log_id) + "..., not for this key's log " +
                          Hex16(key.log_id) + "...");
    }
    if (Status s = VerifyTreeHead(key, t.tree_head); !s.ok()) {
      return AuthFailed("the accepted tree head in the auditor state does not verify: " + s.message());
    }
    // A log that holds the accepted tree of size m has at least its header, m entry records
    // and a tree head. A shorter file was truncated or rolled back, whatever else is wrong
    // with it (even a header cut short): tampering, not malformed input
    // (docs/formats/audit-log.md, section 6, step 0).
    const uint64_t m = t.tree_head.head.tree_size;
    const uint64_t min_bytes = MinLogBytesForTreeSize(m);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < min_bytes) {
      return AuthFailed(path + ": rollback or truncation: the file is " + std::to_string(st.st_size) +
                        " bytes, but a log holding the " + std::to_string(m) + " entries this auditor accepted (" +
                        Describe(t.tree_head) + ") has at least " + std::to_string(min_bytes) + " bytes");
    }
  }

  Status scan = ScanLogFile(
      path, &log_id,
      [&](const RecordView& rec, uint64_t offset) -> Status {
        if (!id_checked) {
          if (log_id != key.log_id) {
            return AuthFailed(path + ": the log header names log id " + Hex16(log_id) + "..., the key given is for " +
                              Hex16(key.log_id) + "... (wrong key, or a log substituted)");
          }
          id_checked = true;
          chain.emplace(end.header_version);
        }
        if (rec.type == RecordType::kEntry) {
          const uint64_t index = tree.size();
          if (Status s = chain->OnEntry(); !s.ok()) return AuthFailed(where(offset) + ": " + s.message());
          // Every entry gets the full strict checks (CheckEntry); only a caller that looks
          // at entries (show, prove, report) pays for a JSON tree as well.
          std::optional<Entry> entry;
          Status checked;
          uint64_t seq = 0;
          if (options.on_entry) {
            auto e = ParseEntry(rec.payload);
            if (e.ok()) {
              seq = e->seq;
              entry = std::move(*e);
            } else {
              checked = e.status();
            }
          } else {
            auto sum = internal::CheckEntry(rec.payload, &doc);
            if (sum.ok()) seq = sum->seq;
            else checked = sum.status();
          }
          if (!checked.ok()) {
            return AuthFailed(where(offset) + ": entry " + std::to_string(index) + " is malformed: " +
                              checked.message());
          }
          if (seq != index) {
            return AuthFailed(where(offset) + ": the entry in position " + std::to_string(index) + " says seq " +
                              std::to_string(seq) + ": entries were deleted, inserted or reordered here");
          }
          const Hash leaf = LeafHash(rec.payload);
          tree.Append(leaf);
          res.leaf_hashes.push_back(leaf);
          entry_offsets.push_back(offset);
          if (options.on_entry) RETURN_IF_ERROR(options.on_entry(index, offset, rec.payload, *entry));
          return OkStatus();
        }
        auto sth = ParseTreeHead(rec.payload);
        if (!sth.ok()) return AuthFailed(where(offset) + ": tree head: " + sth.status().message());
        if (Status s = VerifyTreeHead(key, *sth); !s.ok()) {
          return AuthFailed(where(offset) + ": " + s.message());
        }
        if (Status s = chain->OnHead(rec.type, *sth); !s.ok()) return AuthFailed(where(offset) + ": " + s.message());
        const uint64_t prev_size = res.tree_heads.empty() ? 0 : res.tree_heads.back().sth.head.tree_size;
        if (sth->head.tree_size != tree.size()) {
          return AuthFailed(where(offset) + ": validly signed tree head of size " +
                            std::to_string(sth->head.tree_size) + " follows " + std::to_string(tree.size()) +
                            " entries: entries were deleted or inserted before this point");
        }
        if (sth->head.root != tree.Root()) {
          std::string range = "entries " + std::to_string(prev_size) + ".." + std::to_string(tree.size() - 1);
          if (prev_size < entry_offsets.size()) {
            range += " (offsets " + std::to_string(entry_offsets[prev_size]) + ".." +
                     std::to_string(entry_offsets[tree.size() - 1]) + ")";
          }
          return AuthFailed(where(offset) + ": tree head (" + Describe(*sth) + ") does not match the entries, which hash to " +
                            Hex16(tree.Root()) + ": one of " + range +
                            " was altered (all earlier tree heads matched)");
        }
        if (!res.tree_heads.empty() && sth->head.timestamp_ms < res.tree_heads.back().sth.head.timestamp_ms) {
          return AuthFailed(where(offset) + ": tree head signed " + FormatTimestampMs(sth->head.timestamp_ms) +
                            " is older than the one before it (" +
                            FormatTimestampMs(res.tree_heads.back().sth.head.timestamp_ms) + "): reordered records");
        }
        res.tree_heads.push_back({*sth, offset});
        return OkStatus();
      },
      &end);
  if (!scan.ok()) return scan;
  if (!id_checked && log_id != key.log_id) {
    return AuthFailed(path + ": the log header names log id " + Hex16(log_id) + "..., the key given is for " +
                      Hex16(key.log_id) + "...");
  }
  res.file_bytes = end.file_size;
  res.entries = tree.size();
  if (!end.clean) {
    std::string msg = where(end.bad_offset) + ": " + end.error + "; ";
    if (end.next_valid_offset != 0) {
      msg += "valid records resume at offset " + std::to_string(end.next_valid_offset) +
             ", so this is damage inside the log (altered or removed bytes), not a torn tail";
    } else {
      msg += std::to_string(end.file_size - end.bad_offset) + " bytes at the end of the log are not a valid record " +
             (end.incomplete ? "(cut short: torn by a crash before the writer recovered it, or truncated)"
                             : "(not a torn write: damaged or tampered; the writer refuses to open such a log)");
    }
    return AuthFailed(msg);
  }
  if (res.tree_heads.empty()) return AuthFailed(path + ": the log holds no signed tree head");
  res.latest = res.tree_heads.back().sth;
  if (tree.size() > res.latest.head.tree_size) {
    const uint64_t first = res.latest.head.tree_size;
    return AuthFailed(path + ": entries " + std::to_string(first) + ".." + std::to_string(tree.size() - 1) +
                      " (from offset " + std::to_string(entry_offsets[first]) +
                      ") are not covered by any signed tree head: appended without the log key");
  }

  if (options.trusted != nullptr) {
    const AuditorState& t = *options.trusted;  // its log id and signature were checked above
    const uint64_t m = t.tree_head.head.tree_size;
    const uint64_t n = res.latest.head.tree_size;
    if (m > n) {
      return AuthFailed(path + ": rollback or truncation: the log's newest tree head has " + std::to_string(n) +
                        " entries (" + Describe(res.latest) + ") but this auditor accepted " + std::to_string(m) +
                        " entries earlier (" + Describe(t.tree_head) + "); entries " + std::to_string(n) + ".." +
                        std::to_string(m - 1) + " are gone");
    }
    if (m > 0) {
      ASSIGN_OR_RETURN(std::vector<Hash> proof, ConsistencyProof(res.leaf_hashes, m, n));
      if (Status s = VerifyConsistency(m, n, t.tree_head.head.root, res.latest.head.root, proof); !s.ok()) {
        const Hash ours = RootFromLeafHashes(std::span<const Hash>(res.leaf_hashes).first(m));
        return AuthFailed(path + ": fork: this log's first " + std::to_string(m) + " entries hash to " + Hex16(ours) +
                          ", but the tree head this auditor accepted (" + Describe(t.tree_head) +
                          ") has root " + Hex16(t.tree_head.head.root) +
                          "; both are signed by the log key, so the log presented two histories (" + s.message() +
                          ")");
      }
    } else if (n == 0 && t.tree_head.head.root != res.latest.head.root) {
      return AuthFailed(path + ": the empty tree head has an unexpected root");
    }
    if (res.latest.head.timestamp_ms < t.tree_head.head.timestamp_ms) {
      return AuthFailed(path + ": the log's newest tree head (" + Describe(res.latest) +
                        ") is older than the one this auditor accepted (" + Describe(t.tree_head) + ")");
    }
    res.previously_accepted = t.tree_head;
  }
  return res;
}

json InclusionBundle::ToJson() const {
  json path_json = json::array();
  for (const Hash& h : path) path_json.push_back(HexEncode(h));
  return {{"format", "enclave-audit-inclusion-proof"},
          {"version", 1},
          {"log_id", HexEncode(log_id)},
          {"entry_index", index},
          {"entry", std::string(entry.begin(), entry.end())},
          {"tree_head", tree_head.ToJson()},
          {"inclusion_path", path_json}};
}

Result<InclusionBundle> InclusionBundle::FromJson(const json& j, const std::string& where) {
  if (!j.is_object() || StringMember(j, "format") != "enclave-audit-inclusion-proof") {
    return InvalidInput(where + ": not an inclusion proof (format field)");
  }
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != 1)
    return Unsupported(where + ": unsupported proof version");
  InclusionBundle b;
  if (!j.contains("log_id")) return InvalidInput(where + ": field 'log_id' missing");
  ASSIGN_OR_RETURN(b.log_id, HashFromHex(j["log_id"], where + ": field 'log_id'"));
  if (!j.contains("entry_index") || !j["entry_index"].is_number_unsigned()) {
    return InvalidInput(where + ": field 'entry_index' missing or not a non-negative integer");
  }
  b.index = j["entry_index"].get<uint64_t>();
  if (!j.contains("entry") || !j["entry"].is_string()) return InvalidInput(where + ": field 'entry' missing");
  const std::string& e = j["entry"].get_ref<const std::string&>();
  b.entry.assign(e.begin(), e.end());
  if (!j.contains("tree_head")) return InvalidInput(where + ": field 'tree_head' missing");
  ASSIGN_OR_RETURN(b.tree_head, SignedTreeHead::FromJson(j["tree_head"], where));
  if (!j.contains("inclusion_path") || !j["inclusion_path"].is_array() || j["inclusion_path"].size() > 64) {
    return InvalidInput(where + ": field 'inclusion_path' must be an array of at most 64 hashes");
  }
  for (size_t i = 0; i < j["inclusion_path"].size(); ++i) {
    ASSIGN_OR_RETURN(Hash h, HashFromHex(j["inclusion_path"][i], where + ": inclusion_path[" + std::to_string(i) + "]"));
    b.path.push_back(h);
  }
  return b;
}

Result<InclusionBundle> ProveEntry(const std::string& dir, const LogPublicKey& key, uint64_t index,
                                   std::optional<uint64_t> tree_size) {
  InclusionBundle b;
  bool found = false;
  VerifyOptions opts;
  opts.on_entry = [&](uint64_t i, uint64_t, ByteSpan bytes, const Entry&) -> Status {
    if (i == index) {
      b.entry.assign(bytes.begin(), bytes.end());
      found = true;
    }
    return OkStatus();
  };
  ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(dir, key, opts));
  if (!found) {
    return NotFound("entry " + std::to_string(index) + " does not exist (the log has " + std::to_string(v.entries) +
                    " entries, 0.." + std::to_string(v.entries == 0 ? 0 : v.entries - 1) + ")");
  }
  const SignedTreeHead* head = &v.latest;
  if (tree_size) {
    head = nullptr;
    for (const TreeHeadAt& t : v.tree_heads) {
      if (t.sth.head.tree_size == *tree_size) head = &t.sth;
    }
    if (head == nullptr) {
      return NotFound("the log has no signed tree head of size " + std::to_string(*tree_size) + " (latest: " +
                      std::to_string(v.latest.head.tree_size) + ")");
    }
  }
  if (index >= head->head.tree_size) {
    return InvalidInput("entry " + std::to_string(index) + " is not in the tree of size " +
                        std::to_string(head->head.tree_size));
  }
  b.log_id = key.log_id;
  b.index = index;
  b.tree_head = *head;
  ASSIGN_OR_RETURN(b.path, InclusionProof(v.leaf_hashes, index, head->head.tree_size));
  return b;
}

Result<Entry> VerifyInclusionBundle(const InclusionBundle& b, const LogPublicKey& key) {
  if (b.log_id != key.log_id) {
    return AuthFailed("the proof is for log " + Hex16(b.log_id) + "..., the key is for log " + Hex16(key.log_id) +
                      "...");
  }
  RETURN_IF_ERROR(VerifyTreeHead(key, b.tree_head));
  auto entry = ParseEntry(b.entry);
  if (!entry.ok()) return AuthFailed("the proven entry is malformed: " + entry.status().message());
  if (entry->seq != b.index) {
    return AuthFailed("the proven entry says seq " + std::to_string(entry->seq) + " but the proof is for index " +
                      std::to_string(b.index));
  }
  RETURN_IF_ERROR(VerifyInclusion(b.index, b.tree_head.head.tree_size, LeafHash(b.entry), b.path, b.tree_head.head.root));
  return *entry;
}

}  // namespace enclave::audit
