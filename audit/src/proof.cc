#include "enclave/audit/proof.h"

#include <set>

#include "enclave/audit/checkpoint.h"
#include "enclave/audit/record.h"
#include "enclave/audit/verify.h"

namespace enclave::audit {
namespace {

using nlohmann::json;

constexpr char kFormat[] = "enclave-audit-proof";

Result<Hash> HexHash(const json& j, const char* member, const std::string& where) {
  auto it = j.find(member);
  if (it == j.end() || !it->is_string()) return InvalidInput(where + ": member '" + member + "' missing or not a string");
  const std::string& text = it->get_ref<const std::string&>();
  auto b = HexDecode(text);
  if (!b.ok() || b->size() != 32 || HexEncode(*b) != text) {
    return InvalidInput(where + ": member '" + member + "' must be 64 lower-case hex digits");
  }
  Hash h{};
  std::copy(b->begin(), b->end(), h.begin());
  return h;
}

Result<uint64_t> Size(const json& j, const char* member, const std::string& where) {
  auto it = j.find(member);
  if (it == j.end() || !it->is_number_unsigned()) {
    return InvalidInput(where + ": member '" + member + "' missing or not a non-negative integer");
  }
  return it->get<uint64_t>();
}

Result<std::string> Note(const json& j, const char* member, const std::string& where) {
  auto it = j.find(member);
  if (it == j.end()) return std::string();
  if (!it->is_string()) return InvalidInput(where + ": member '" + member + "' is not a string");
  return it->get<std::string>();
}

// The log's latest chained head of `size`; NotFound otherwise.
Result<SignedTreeHead> ChainedHeadOfSize(const VerifyResult& v, uint64_t size) {
  const SignedTreeHead* found = nullptr;
  bool legacy = false;
  for (const TreeHeadAt& t : v.tree_heads) {
    if (t.sth.head.tree_size != size) continue;
    if (t.sth.chained) found = &t.sth;
    else legacy = true;
  }
  if (found != nullptr) return *found;
  if (legacy) {
    return NotFound("the log's tree head of size " + std::to_string(size) +
                    " is a legacy head (written before checkpoints): it has no signed checkpoint to prove against");
  }
  return NotFound("the log has no signed tree head of size " + std::to_string(size) + " (latest: " +
                  std::to_string(v.latest.head.tree_size) + ")");
}

Status CheckNote(const std::string& note, const char* member, uint64_t size, const Hash& root, const LogPublicKey& key) {
  if (note.empty()) {
    return AuthFailed(std::string("the proof has no '") + member + "': nothing shows that the log signed its tree");
  }
  ASSIGN_OR_RETURN(Checkpoint cp, VerifyCheckpointNote(note, key, member));
  if (cp.tree_size != size || cp.root != root) {
    return AuthFailed(std::string(member) + " is for the tree of size " + std::to_string(cp.tree_size) + ", root " +
                      HexEncode(cp.root).substr(0, 16) + "..., not the proof's tree of size " + std::to_string(size) +
                      ", root " + HexEncode(root).substr(0, 16) + "...");
  }
  return OkStatus();
}

}  // namespace

json Proof::ToJson() const {
  json path_json = json::array();
  for (const Hash& h : path) path_json.push_back(HexEncode(h));
  json j = {{"format", kFormat}, {"version", 1}};
  if (kind == ProofKind::kInclusion) {
    j["proof"] = "inclusion";
    j["leaf_index"] = leaf_index;
    if (entry) j["entry"] = std::string(entry->begin(), entry->end());
    else j["leaf_hash"] = HexEncode(leaf_hash);
    j["tree_size"] = new_size;
    j["root"] = HexEncode(new_root);
    j["path"] = path_json;
    if (!new_checkpoint.empty()) j["checkpoint"] = new_checkpoint;
  } else {
    j["proof"] = "consistency";
    j["old_size"] = old_size;
    j["old_root"] = HexEncode(old_root);
    j["new_size"] = new_size;
    j["new_root"] = HexEncode(new_root);
    j["path"] = path_json;
    if (!old_checkpoint.empty()) j["old_checkpoint"] = old_checkpoint;
    if (!new_checkpoint.empty()) j["new_checkpoint"] = new_checkpoint;
  }
  return j;
}

Result<Proof> Proof::FromJson(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidInput(where + ": a proof is a JSON object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || *format != kFormat) {
    return InvalidInput(where + ": not a proof (member 'format' is not \"enclave-audit-proof\")");
  }
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || *version != 1)
    return Unsupported(where + ": unsupported proof version (know 1)");
  auto kind = j.find("proof");
  if (kind == j.end() || !kind->is_string() || (*kind != "inclusion" && *kind != "consistency")) {
    return InvalidInput(where + ": member 'proof' must be \"inclusion\" or \"consistency\"");
  }
  Proof p;
  p.kind = *kind == "inclusion" ? ProofKind::kInclusion : ProofKind::kConsistency;
  const std::set<std::string> allowed =
      p.kind == ProofKind::kInclusion
          ? std::set<std::string>{"format", "version", "proof", "leaf_index", "entry", "leaf_hash", "tree_size", "root",
                                  "path", "checkpoint"}
          : std::set<std::string>{"format", "version", "proof", "old_size", "old_root", "new_size", "new_root", "path",
                                  "old_checkpoint", "new_checkpoint"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!allowed.count(it.key())) return InvalidInput(where + ": unknown member '" + it.key() + "'");
  }
  if (p.kind == ProofKind::kInclusion) {
    ASSIGN_OR_RETURN(p.leaf_index, Size(j, "leaf_index", where));
    ASSIGN_OR_RETURN(p.new_size, Size(j, "tree_size", where));
    ASSIGN_OR_RETURN(p.new_root, HexHash(j, "root", where));
    ASSIGN_OR_RETURN(p.new_checkpoint, Note(j, "checkpoint", where));
    const bool has_entry = j.contains("entry"), has_leaf = j.contains("leaf_hash");
    if (has_entry == has_leaf) return InvalidInput(where + ": exactly one of 'entry' and 'leaf_hash' is required");
    if (has_entry) {
      if (!j["entry"].is_string()) return InvalidInput(where + ": member 'entry' is not a string");
      const std::string& e = j["entry"].get_ref<const std::string&>();
      if (e.empty() || e.size() > kMaxEntryBytes) return InvalidInput(where + ": member 'entry' is empty or over 64 KiB");
      p.entry = std::vector<uint8_t>(e.begin(), e.end());
      p.leaf_hash = LeafHash(*p.entry);
    } else {
      ASSIGN_OR_RETURN(p.leaf_hash, HexHash(j, "leaf_hash", where));
    }
  } else {
    ASSIGN_OR_RETURN(p.old_size, Size(j, "old_size", where));
    ASSIGN_OR_RETURN(p.old_root, HexHash(j, "old_root", where));
    ASSIGN_OR_RETURN(p.new_size, Size(j, "new_size", where));
    ASSIGN_OR_RETURN(p.new_root, HexHash(j, "new_root", where));
    ASSIGN_OR_RETURN(p.old_checkpoint, Note(j, "old_checkpoint", where));
    ASSIGN_OR_RETURN(p.new_checkpoint, Note(j, "new_checkpoint", where));
  }
  auto path = j.find("path");
  if (path == j.end() || !path->is_array() || path->size() > kMaxProofHashes) {
    return InvalidInput(where + ": member 'path' must be an array of at most 128 hashes");
  }
  for (size_t i = 0; i < path->size(); ++i) {
    json one = {{"h", (*path)[i]}};
    ASSIGN_OR_RETURN(Hash h, HexHash(one, "h", where + ": path[" + std::to_string(i) + "]"));
    p.path.push_back(h);
  }
  return p;
}

Result<Proof> ProveInclusion(const std::string& dir, const LogPublicKey& key, uint64_t index,
                             std::optional<uint64_t> tree_size) {
  Proof p;
  p.kind = ProofKind::kInclusion;
  p.leaf_index = index;
  VerifyOptions opts;
  opts.on_entry = [&](uint64_t i, uint64_t, ByteSpan bytes, const Entry&) -> Status {
    if (i == index) p.entry = std::vector<uint8_t>(bytes.begin(), bytes.end());
    return OkStatus();
  };
  ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(dir, key, opts));
  if (!p.entry) {
    return NotFound("entry " + std::to_string(index) + " does not exist (the log has " + std::to_string(v.entries) +
                    " entries)");
  }
  ASSIGN_OR_RETURN(SignedTreeHead head, ChainedHeadOfSize(v, tree_size.value_or(v.latest.head.tree_size)));
  if (index >= head.head.tree_size) {
    return InvalidInput("entry " + std::to_string(index) + " is not in the tree of size " +
                        std::to_string(head.head.tree_size));
  }
  p.leaf_hash = LeafHash(*p.entry);
  p.new_size = head.head.tree_size;
  p.new_root = head.head.root;
  ASSIGN_OR_RETURN(p.new_checkpoint, FormatCheckpointNote(key, head));
  ASSIGN_OR_RETURN(p.path, InclusionProof(v.leaf_hashes, index, p.new_size));
  return p;
}

Result<Proof> ProveConsistency(const std::string& dir, const LogPublicKey& key, uint64_t old_size, uint64_t new_size) {
  if (old_size > new_size) {
    return InvalidInput("--consistency OLD NEW needs OLD <= NEW (got " + std::to_string(old_size) + " > " +
                        std::to_string(new_size) + ")");
  }
  ASSIGN_OR_RETURN(VerifyResult v, VerifyLog(dir, key));
  ASSIGN_OR_RETURN(SignedTreeHead old_head, ChainedHeadOfSize(v, old_size));
  ASSIGN_OR_RETURN(SignedTreeHead new_head, ChainedHeadOfSize(v, new_size));
  Proof p;
  p.kind = ProofKind::kConsistency;
  p.old_size = old_size;
  p.old_root = old_head.head.root;
  p.new_size = new_size;
  p.new_root = new_head.head.root;
  ASSIGN_OR_RETURN(p.old_checkpoint, FormatCheckpointNote(key, old_head));
  ASSIGN_OR_RETURN(p.new_checkpoint, FormatCheckpointNote(key, new_head));
  if (old_size > 0) {
    ASSIGN_OR_RETURN(p.path, ConsistencyProof(v.leaf_hashes, old_size, new_size));
  }
  return p;
}

Result<ProofResult> VerifyProof(const Proof& p, const LogPublicKey* key) {
  ProofResult r;
  if (key != nullptr) {
    if (p.kind == ProofKind::kConsistency) {
      RETURN_IF_ERROR(CheckNote(p.old_checkpoint, "old_checkpoint", p.old_size, p.old_root, *key));
      RETURN_IF_ERROR(CheckNote(p.new_checkpoint, "new_checkpoint", p.new_size, p.new_root, *key));
    } else {
      RETURN_IF_ERROR(CheckNote(p.new_checkpoint, "checkpoint", p.new_size, p.new_root, *key));
    }
    r.signed_by_log = true;
  }
  if (p.kind == ProofKind::kConsistency) {
    if (Status s = VerifyConsistency(p.old_size, p.new_size, p.old_root, p.new_root, p.path); !s.ok()) {
      return AuthFailed("consistency proof from size " + std::to_string(p.old_size) + " to " +
                        std::to_string(p.new_size) + " does not verify: " + s.message());
    }
    return r;
  }
  if (p.entry) {
    auto entry = ParseEntry(*p.entry);
    if (!entry.ok()) return AuthFailed("the proven entry is malformed: " + entry.status().message());
    if (entry->seq != p.leaf_index) {
      return AuthFailed("the proven entry says seq " + std::to_string(entry->seq) + " but the proof is for leaf " +
                        std::to_string(p.leaf_index));
    }
    r.entry = std::move(*entry);
  }
  if (Status s = VerifyInclusion(p.leaf_index, p.new_size, p.leaf_hash, p.path, p.new_root); !s.ok()) {
    return AuthFailed("inclusion proof of leaf " + std::to_string(p.leaf_index) + " in the tree of size " +
                      std::to_string(p.new_size) + " does not verify: " + s.message());
  }
  return r;
}

}  // namespace enclave::audit
