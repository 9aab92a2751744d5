#include "enclave/audit/witness_policy.h"

#include "enclave/audit/checkpoint.h"
#include "enclave/common/files.h"

namespace enclave::audit {
namespace {

std::vector<std::string_view> Tokens(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

Result<WitnessPolicy> WitnessPolicy::Parse(std::string_view text, const std::string& where) {
  if (text.size() > kMaxPolicyBytes) return InvalidInput(where + ": witness policy longer than 64 KiB");
  if (!text.empty() && text.back() != '\n') return InvalidInput(where + ": the last line does not end in a newline");
  WitnessPolicy p;
  std::set<std::string> names;  // witnesses and groups share one namespace
  bool have_quorum = false;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t eol = text.find('\n', pos);
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    const std::string at = where + ":" + std::to_string(++line_no);
    for (unsigned char c : line) {
      if (c != '\t' && (c < 0x20 || c == 0x7f)) return InvalidInput(at + ": control character");
    }
    const std::vector<std::string_view> t = Tokens(line);
    if (t.empty() || t[0][0] == '#') continue;
    const std::string_view kw = t[0];
    if (kw == "log") {
      if (t.size() < 2 || t.size() > 3) return InvalidInput(at + ": expected: log <vkey> [<url>]");
      ASSIGN_OR_RETURN(VerifierKey v, ParseVerifierKey(t[1], kNoteAlgEd25519, 32, at));
      PolicyLog log;
      log.origin = v.name;
      std::copy(v.key.begin(), v.key.end(), log.key.begin());
      if (t.size() == 3) log.url = std::string(t[2]);
      for (const PolicyLog& other : p.logs_) {
        if (other.key == log.key) return InvalidInput(at + ": the same log key is listed twice");
      }
      if (p.logs_.size() == kMaxPolicyItems) return InvalidInput(at + ": more than 64 logs");
      p.logs_.push_back(std::move(log));
    } else if (kw == "witness") {
      if (t.size() < 3 || t.size() > 4) return InvalidInput(at + ": expected: witness <name> <vkey> [<url>]");
      const std::string name(t[1]);
      if (name == "none" || names.count(name)) return InvalidInput(at + ": the name '" + name + "' is taken");
      ASSIGN_OR_RETURN(WitnessPublicKey key, WitnessPublicKey::Parse(t[2], at));
      for (const PolicyWitness& other : p.witnesses_) {
        if (other.key.key == key.key) return InvalidInput(at + ": the same witness key is listed twice");
      }
      if (p.witnesses_.size() == kMaxPolicyItems) return InvalidInput(at + ": more than 64 witnesses");
      p.witnesses_.push_back({name, std::move(key), t.size() == 4 ? std::string(t[3]) : std::string()});
      names.insert(name);
    } else if (kw == "group") {
      if (t.size() < 4) return InvalidInput(at + ": expected: group <name> <k>|any|all <name>...");
      const std::string name(t[1]);
      if (name == "none" || names.count(name)) return InvalidInput(at + ": the name '" + name + "' is taken");
      Group g;
      std::set<std::string> seen;
      for (size_t i = 3; i < t.size(); ++i) {
        const std::string m(t[i]);
        if (!names.count(m)) return InvalidInput(at + ": '" + m + "' is not a witness or group defined above");
        if (!seen.insert(m).second) return InvalidInput(at + ": '" + m + "' is listed twice in the group");
        g.members.push_back(m);
      }
      if (t[2] == "all") {
        g.threshold = g.members.size();
      } else if (t[2] == "any") {
        g.threshold = 1;
      } else {
        auto k = ParseCanonicalDecimal(t[2]);
        if (!k.ok() || *k < 1 || *k > g.members.size()) {
          return InvalidInput(at + ": the threshold must be all, any or 1.." + std::to_string(g.members.size()));
        }
        g.threshold = static_cast<size_t>(*k);
      }
      if (p.groups_.size() == kMaxPolicyItems) return InvalidInput(at + ": more than 64 groups");
      p.groups_[name] = std::move(g);
      names.insert(name);
    } else if (kw == "quorum") {
      if (t.size() != 2) return InvalidInput(at + ": expected: quorum <name>");
      if (have_quorum) return InvalidInput(at + ": a second quorum line");
      const std::string name(t[1]);
      if (name != "none" && !names.count(name)) return InvalidInput(at + ": '" + name + "' is not defined above");
      p.quorum_ = name;
      have_quorum = true;
    } else {
      return InvalidInput(at + ": unknown keyword '" + std::string(kw) + "' (log, witness, group, quorum)");
    }
  }
  if (!have_quorum) return InvalidInput(where + ": no quorum line");
  return p;
}

Result<WitnessPolicy> WitnessPolicy::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, kMaxPolicyBytes + 1));
  return Parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

bool WitnessPolicy::Holds(const std::string& name, const std::set<std::string>& cosigned,
                          std::map<std::string, bool>* memo) const {
  if (auto it = memo->find(name); it != memo->end()) return it->second;
  bool holds = false;
  if (auto g = groups_.find(name); g != groups_.end()) {
    size_t n = 0;
    for (const std::string& m : g->second.members) n += Holds(m, cosigned, memo) ? 1 : 0;
    holds = n >= g->second.threshold;
  } else {
    holds = cosigned.count(name) > 0;
  }
  (*memo)[name] = holds;
  return holds;
}

bool WitnessPolicy::Satisfied(const std::set<std::string>& cosigned) const {
  if (quorum_none()) return true;
  std::map<std::string, bool> memo;
  return Holds(quorum_, cosigned, &memo);
}

std::string WitnessPolicy::DescribeName(const std::string& name) const {
  auto g = groups_.find(name);
  if (g == groups_.end()) return name;
  std::vector<std::string> parts;
  for (const std::string& m : g->second.members) parts.push_back(DescribeName(m));
  return std::to_string(g->second.threshold) + " of {" + Join(parts) + "}";
}

std::string WitnessPolicy::Describe() const { return quorum_none() ? "none" : DescribeName(quorum_); }

Result<std::vector<CosignedBy>> PolicyCosignatures(const WitnessPolicy& policy, const SignedNote& note) {
  std::vector<CosignedBy> out;
  for (const PolicyWitness& w : policy.witnesses()) {
    auto c = FindCosignature(note, w.key);
    if (c.ok()) {
      out.push_back({w.name, w.key.name, c->timestamp});
    } else if (c.status().code() != Code::kNotFound) {
      return c.status();
    }
  }
  return out;
}

Result<WitnessedCheckpoint> CheckWitnessedCheckpoint(const VerifyResult& log, const LogPublicKey& key,
                                                     const WitnessPolicy& policy, std::string_view cosigned_note,
                                                     const std::string& where) {
  if (!policy.logs().empty()) {
    bool listed = false;
    for (const PolicyLog& l : policy.logs()) listed = listed || l.key == key.key;
    if (!listed) return InvalidInput("the witness policy lists logs, but not this log's key");
  }
  ASSIGN_OR_RETURN(Checkpoint cp, VerifyCheckpointNote(cosigned_note, key, where));
  if (cp.tree_size > log.entries) {
    return AuthFailed(where + ": the witnessed checkpoint is of a tree of size " + std::to_string(cp.tree_size) +
                      ", but the log holds only " + std::to_string(log.entries) +
                      " entries: the log was cut back after it was witnessed");
  }
  const Hash prefix_root = RootFromLeafHashes(std::span<const Hash>(log.leaf_hashes.data(), cp.tree_size));
  if (prefix_root != cp.root) {
    return AuthFailed(where + ": the log's first " + std::to_string(cp.tree_size) + " entries have root " +
                      HexEncode(prefix_root) + ", the witnessed checkpoint names " + HexEncode(cp.root) +
                      ": the log was rewritten after it was witnessed (a fork)");
  }
  WitnessedCheckpoint w;
  bool found = false;
  for (const TreeHeadAt& h : log.tree_heads) {
    if (h.sth.chained && h.sth.head.tree_size == cp.tree_size && h.sth.head.root == cp.root) {
      w.head = h.sth;
      found = true;
    }
  }
  if (!found) {
    return AuthFailed(where + ": the log has no chained tree head of size " + std::to_string(cp.tree_size) +
                      " for the witnessed checkpoint");
  }
  ASSIGN_OR_RETURN(SignedNote note, ParseNote(cosigned_note, where));
  auto by = PolicyCosignatures(policy, note);
  if (!by.ok()) return by.status().Annotate(where);
  w.cosigned_by = std::move(*by);
  std::set<std::string> names;
  for (const CosignedBy& c : w.cosigned_by) names.insert(c.name);
  for (const PolicyWitness& pw : policy.witnesses()) {
    if (!names.count(pw.name)) w.not_cosigned.push_back(pw.name);
  }
  if (!policy.Satisfied(names)) {
    std::vector<std::string> have(names.begin(), names.end());
    return AuthFailed(where + ": the checkpoint of size " + std::to_string(cp.tree_size) + " is cosigned by " +
                      (have.empty() ? std::string("no witness of the policy") : "{" + Join(have) + "}") +
                      "; the witness policy requires " + policy.Describe());
  }
  w.unwitnessed_entries = log.entries - cp.tree_size;
  return w;
}

Result<WitnessedCheckpoint> LoadWitnessedCheckpoint(const VerifyResult& log, const LogPublicKey& key,
                                                    const WitnessPolicy& policy, const std::string& path) {
  auto bytes = ReadWholeFile(path, kMaxNoteBytes + 1);
  if (!bytes.ok() && bytes.status().code() == Code::kNotFound) {
    return NotFound(path + ": no cosigned checkpoint (enclave-audit cosign writes it): nothing of the log is "
                           "witnessed");
  }
  if (!bytes.ok()) return bytes.status();
  return CheckWitnessedCheckpoint(log, key, policy,
                                  std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()), path);
}

nlohmann::json WitnessedCheckpointJson(const WitnessedCheckpoint& w, const WitnessPolicy& policy,
                                       const std::string& path) {
  nlohmann::json by = nlohmann::json::array();
  for (const CosignedBy& c : w.cosigned_by) {
    by.push_back({{"name", c.name}, {"cosigner", c.cosigner}, {"timestamp", c.timestamp},
                  {"time", FormatTimestampMs(c.timestamp * 1000)}});
  }
  return {{"cosigned_checkpoint", path},
          {"tree_size", w.head.head.tree_size},
          {"root", HexEncode(w.head.head.root)},
          {"quorum", policy.Describe()},
          {"cosigned_by", by},
          {"not_cosigned_by", w.not_cosigned},
          {"unwitnessed_entries", w.unwitnessed_entries}};
}

}  // namespace enclave::audit
