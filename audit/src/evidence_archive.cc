#include "enclave/audit/evidence_archive.h"

#include <sys/statvfs.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "enclave/attest/bundle.h"
#include "enclave/attest/policy.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/audit/tree_head.h"
#include "enclave/common/files.h"
#include "strict_json.h"

namespace enclave::audit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Limits of the entry (event.cc): the archived verdict has every check, the entry a summary.
constexpr size_t kMaxEntryChecks = 64;
constexpr size_t kMaxReasonBytes = 512;
constexpr size_t kMaxCheckNameBytes = 256;
constexpr size_t kMaxPathComponents = 32;

std::string Hex(const crypto::Digest256& d) { return HexEncode(d); }

Result<crypto::Digest256> DigestFromField(const json& fields, const char* name) {
  auto it = fields.find(name);
  if (it == fields.end() || !it->is_string()) return InvalidInput(std::string("field '") + name + "' missing");
  std::string s = it->get<std::string>();
  if (s.rfind("sha256:", 0) == 0) s.erase(0, 7);
  auto bytes = HexDecode(s);
  if (!bytes.ok() || bytes->size() != 32) return InvalidInput(std::string("field '") + name + "' is not a SHA-256 digest");
  crypto::Digest256 d{};
  std::copy(bytes->begin(), bytes->end(), d.begin());
  return d;
}

Result<int64_t> SecondsFromField(const json& fields, const char* name) {
  auto it = fields.find(name);
  if (it == fields.end() || !it->is_number_unsigned()) {
    return InvalidInput(std::string("field '") + name + "' missing or not a non-negative integer");
  }
  const uint64_t v = it->get<uint64_t>();
  if (v == 0 || v > static_cast<uint64_t>(INT64_MAX)) {
    return InvalidInput(std::string("field '") + name + "' is " + std::to_string(v) + ", outside 1..2^63-1 seconds");
  }
  return static_cast<int64_t>(v);
}

// mkdir that accepts an existing folder; a new one is made durable in its parent.
Status MakeDir(const std::string& dir, const std::string& parent) {
  if (::mkdir(dir.c_str(), 0700) == 0) return SyncFolder(parent);
  if (errno != EEXIST) return ErrnoStatus("creating folder " + dir, errno);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return FailedPrecondition(dir + " exists and is not a folder");
  return OkStatus();
}

std::string Normalize(const std::string& p) { return fs::path(p).lexically_normal().generic_string(); }

bool IsPathChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == ':' || c == '@' || c == '/' || c == '+' || c == '=' || c == '-';
}

// Text for the entry: no control characters, valid UTF-8, at most `max` bytes.
std::string EntryText(std::string s, size_t max) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (!internal::ValidUtf8(s)) {
    for (char& c : s) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
  }
  if (s.size() > max) {
    size_t cut = max - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
    s = s.substr(0, cut) + "...";
  }
  if (s.empty()) s = "-";
  return s;
}

std::string CheckName(const std::string& check) {
  std::string s = check.substr(0, kMaxCheckNameBytes);
  for (char& c : s) {
    if (!IsPathChar(c)) c = '_';
  }
  return s.empty() ? "unnamed" : s;
}

std::string FindingText(const attest::Finding& f) {
  return f.check + (f.where.empty() ? "" : " at " + f.where) + ": expected " + f.expected + ", got " + f.got;
}

// A private copy of the policy's folder layout, removed on destruction.
class TempTree {
 public:
  static Result<TempTree> Create() {
    std::error_code ec;
    fs::path base = fs::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string tmpl = (base / "enclave-audit-recheck-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("creating a temporary folder", errno);
    return TempTree(tmpl);
  }
  TempTree(TempTree&& o) noexcept : root_(std::move(o.root_)) { o.root_.clear(); }
  TempTree& operator=(TempTree&&) = delete;
  ~TempTree() {
    if (root_.empty()) return;
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const std::string& root() const { return root_; }

 private:
  explicit TempTree(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

Status WriteNewFile(const std::string& path, ByteSpan bytes) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return IoError("creating the folder of " + path + ": " + ec.message());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("creating " + path, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus("writing " + path, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return ErrnoStatus("closing " + path, errno);
  return OkStatus();
}

std::string AsString(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

}  // namespace

namespace {

// Lays the archived policy files out as the policy's folder saw them; returns that folder.
Result<std::string> LayOutPolicyFiles(const TempTree& tree, const std::vector<ArchivedFile>& files,
                                      const std::vector<std::vector<uint8_t>>& contents) {
  size_t up = 0;
  for (const ArchivedFile& f : files) {
    size_t n = 0;
    for (size_t pos = 0; f.path.compare(pos, 3, "../") == 0; pos += 3) ++n;
    up = std::max(up, n);
  }
  // ".." never leaves the tree: the policy folder sits `up` levels below its root.
  std::string dir = tree.root();
  for (size_t i = 0; i < up; ++i) dir += "/up";
  dir += "/policy";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("creating " + dir + ": " + ec.message());
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string target = Normalize(dir + "/" + files[i].path);
    if (target.rfind(tree.root() + "/", 0) != 0) return InvalidInput("policy file path '" + files[i].path + "' escapes");
    Status s = WriteNewFile(target, contents[i]);
    if (s.code() == Code::kAlreadyExists) return InvalidInput("policy_files names '" + files[i].path + "' twice");
    RETURN_IF_ERROR(s);
  }
  return dir;
}

// Messages name the input once ("evidence bundle: field 'nonce': ...").
Status NamedInput(const Status& s, std::string_view what) {
  return s.message().rfind(what, 0) == 0 ? s : s.Annotate(what);
}

// Parsed policies, by the digest of the bytes they were parsed from: the policy text and each
// laid-out file's path and contents. Parsing loads and checks every EK root certificate,
// which cost the broker more than the rest of a release's appraisal; ParsePolicy reads
// nothing but those files (the tree holds no other), so the same bytes give the same Policy.
// A few entries: a broker appraises against its handful of active policies.
class ParsedPolicyCache {
 public:
  static crypto::Digest256 KeyOf(std::string_view policy, const std::vector<ArchivedFile>& files,
                                 const std::vector<std::vector<uint8_t>>& contents) {
    ByteWriter w;  // each part length-prefixed: no two inputs encode alike
    w.U64(policy.size());
    w.Bytes(policy);
    for (size_t i = 0; i < files.size(); ++i) {
      w.U64(files[i].path.size());
      w.Bytes(files[i].path);
      w.U64(contents[i].size());
      w.Bytes(contents[i]);
    }
    return crypto::Sha256(w.bytes());
  }
  std::shared_ptr<const attest::Policy> Find(const crypto::Digest256& key) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first != key) continue;
      entries_.splice(entries_.begin(), entries_, it);  // most recently used first
      return entries_.front().second;
    }
    return nullptr;
  }
  void Put(const crypto::Digest256& key, std::shared_ptr<const attest::Policy> policy) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_) {
      if (e.first == key) return;
    }
    entries_.emplace_front(key, std::move(policy));
    if (entries_.size() > kEntries) entries_.pop_back();
  }

 private:
  static constexpr size_t kEntries = 8;
  std::mutex mu_;
  std::list<std::pair<crypto::Digest256, std::shared_ptr<const attest::Policy>>> entries_;
};

ParsedPolicyCache& PolicyCache() {
  static ParsedPolicyCache cache;
  return cache;
}

// Steps 5-6 of the re-check (docs/formats/audit-log.md, section 12), shared by the broker's
// recording and the re-check: the policy files laid out privately and the policy parsed
// there (or found parsed from the same bytes before), then AppraiseParsed.
Result<attest::Verdict> AppraiseLaidOut(std::string_view policy, const std::vector<ArchivedFile>& files,
                                        const std::vector<std::vector<uint8_t>>& contents, std::string_view evidence,
                                        std::string_view enrolment, const VerdictContext& context) {
  const crypto::Digest256 key = ParsedPolicyCache::KeyOf(policy, files, contents);
  std::shared_ptr<const attest::Policy> parsed = PolicyCache().Find(key);
  if (parsed == nullptr) {
    ASSIGN_OR_RETURN(TempTree tree, TempTree::Create());
    ASSIGN_OR_RETURN(std::string policy_dir, LayOutPolicyFiles(tree, files, contents));
    auto p = attest::ParsePolicy(policy, policy_dir);
    if (!p.ok()) {
      std::string msg = p.status().message();
      // The temporary folder means nothing to the reader; the archived path does.
      for (size_t at; (at = msg.find(policy_dir + "/")) != std::string::npos;) msg.erase(at, policy_dir.size() + 1);
      return NamedInput(Status(p.status().code(), msg), "policy");
    }
    parsed = std::make_shared<const attest::Policy>(std::move(p).value());
    PolicyCache().Put(key, parsed);
  }
  return AppraiseParsed(*parsed, evidence, enrolment, context);
}

Result<uint64_t> RecordWithFiles(LogWriter& log, const EvidenceArchive& archive, const VerdictInputs& in,
                                 const attest::Verdict& verdict,
                                 const std::vector<std::pair<ArchivedFile, std::string>>& files);

}  // namespace

// --- the archive ---

Result<EvidenceArchive> EvidenceArchive::Open(const std::string& log_dir, bool create) {
  const std::string archive = log_dir + "/" + kArchiveDirName;
  const std::string dir = archive + "/sha256";
  if (create) {
    RETURN_IF_ERROR(MakeDir(archive, log_dir));
    RETURN_IF_ERROR(MakeDir(dir, archive));
  }
  return EvidenceArchive(dir);
}

EvidenceArchive::EvidenceArchive(std::string dir)
    : dir_(std::move(dir)), folder_sync_(std::make_shared<GroupSync>([d = dir_] { return SyncFolder(d); })) {}

std::string EvidenceArchive::PathFor(const crypto::Digest256& digest) const { return dir_ + "/" + Hex(digest); }

Result<uint64_t> EvidenceArchive::BytesUsed() const {
  std::error_code ec;
  uint64_t total = 0;
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const uintmax_t n = it->file_size(ec);
    if (!ec) total += n;
    ec.clear();
  }
  if (ec) return IoError("evidence archive " + dir_ + ": " + ec.message());
  return total;
}

Result<uint64_t> EvidenceArchive::BytesFree() const {
  struct statvfs st {};
  if (::statvfs(dir_.c_str(), &st) != 0) return ErrnoStatus("statvfs " + dir_, errno);
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

Result<std::vector<uint8_t>> EvidenceArchive::Get(const crypto::Digest256& digest) const {
  const std::string path = PathFor(digest);
  auto bytes = ReadWholeFile(path, kMaxArchiveBlobBytes);
  if (!bytes.ok()) {
    if (bytes.status().code() == Code::kNotFound) return NotFound("archive blob " + path + " is missing");
    return bytes.status().Annotate("archive blob " + path);
  }
  const crypto::Digest256 got = crypto::Sha256(*bytes);
  if (got != digest) {
    return AuthFailed("archive blob " + path + " was altered: its " + std::to_string(bytes->size()) +
                      " bytes hash to " + Hex(got));
  }
  return std::move(bytes).value();
}

Result<crypto::Digest256> EvidenceArchive::Put(ByteSpan bytes) const {
  ASSIGN_OR_RETURN(std::vector<crypto::Digest256> d, PutAll({bytes}));
  return d[0];
}

Result<std::vector<crypto::Digest256>> EvidenceArchive::PutAll(const std::vector<ByteSpan>& blobs) const {
  std::vector<crypto::Digest256> digests;
  for (ByteSpan b : blobs) {
    ASSIGN_OR_RETURN(crypto::Digest256 d, PutUnsynced(b));
    digests.push_back(d);
  }
  // Also for blobs found: another writer may have linked one and not yet synced the folder.
  RETURN_IF_ERROR(folder_sync_->Sync().Annotate("evidence archive " + dir_));
  return digests;
}

Result<crypto::Digest256> EvidenceArchive::PutUnsynced(ByteSpan bytes) const {
  if (bytes.size() > kMaxArchiveBlobBytes) return InvalidInput("archive blob larger than 256 MiB");
  const crypto::Digest256 digest = crypto::Sha256(bytes);
  const std::string path = PathFor(digest);
  auto write = [&]() -> Status {
    ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(path, /*allow_overwrite=*/false));
    RETURN_IF_ERROR(out.Write(bytes.data(), bytes.size()));
    return out.CommitLeavingFolderUnsynced();  // fsyncs the blob, links it in place
  };
  // Most blobs of a verdict are there already (the host's enrolment bundle, the policy, its
  // EK roots): checked, not written again (a temporary file and two fsyncs each).
  struct stat st {};
  Status s = ::stat(path.c_str(), &st) == 0 ? AlreadyExists(path) : write();
  if (s.code() == Code::kAlreadyExists) {
    // Write-once: the blob is there already (another verdict, or a race); it must be intact.
    auto existing = Get(digest);
    if (!existing.ok()) return existing.status().Annotate("refusing to archive over it");
    return digest;
  }
  RETURN_IF_ERROR(s);
  return digest;
}

// --- inputs and appraisal ---

Status CheckArchivedPath(std::string_view path) {
  const std::string p(path);
  auto bad = [&](const std::string& why) {
    return InvalidInput("policy file path '" + p.substr(0, 128) + "' " + why);
  };
  if (p.empty() || p.size() > 256) return bad("must be 1..256 characters");
  if (p[0] == '/') return bad("is absolute (an archived policy must name its files relative to its folder)");
  for (char c : p) {
    if (!IsPathChar(c)) return bad("may hold only letters, digits and . _ : @ / + = -");
  }
  size_t components = 0;
  bool past_dotdot = false;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find('/', start), p.size());
    const std::string_view c(p.data() + start, end - start);
    ++components;
    if (c.empty() || c == ".") return bad("is not normalized (empty or '.' component)");
    if (c == "..") {
      if (past_dotdot) return bad("is not normalized ('..' after a name)");
    } else {
      past_dotdot = true;
    }
    start = end + 1;
  }
  if (!past_dotdot) return bad("names no file");
  if (components > kMaxPathComponents) return bad("has more than 32 components");
  return OkStatus();
}

Result<std::vector<std::pair<ArchivedFile, std::string>>> PolicyReferencedFiles(std::string_view policy,
                                                                                const std::string& policy_dir) {
  const json root = json::parse(policy.begin(), policy.end(), nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return InvalidInput("policy is not a JSON object");
  auto ek = root.find("ek_roots");
  if (ek == root.end() || !ek->is_object()) return InvalidInput("policy has no 'ek_roots' object");
  std::vector<std::string> paths;  // as written, relative to policy_dir
  auto add_list = [&](const char* key) -> Status {
    auto it = ek->find(key);
    if (it == ek->end()) return OkStatus();
    if (!it->is_array()) return InvalidInput(std::string("policy ek_roots.") + key + " is not an array");
    for (const json& f : *it) {
      if (!f.is_string()) return InvalidInput(std::string("policy ek_roots.") + key + " holds a non-string");
      paths.push_back(f.get<std::string>());
    }
    return OkStatus();
  };
  RETURN_IF_ERROR(add_list("files"));
  RETURN_IF_ERROR(add_list("intermediates"));
  if (auto d = ek->find("dir"); d != ek->end()) {
    if (!d->is_string()) return InvalidInput("policy ek_roots.dir is not a string");
    const std::string rel = d->get<std::string>();
    if (!rel.empty() && rel[0] == '/') {
      return Unsupported("policy ek_roots.dir '" + rel + "' is absolute: an archived policy must name its files "
                         "relative to its own folder");
    }
    // The same selection as attest's LoadEkTrustDirectory: regular files not starting with '.'.
    const std::string full = (fs::path(policy_dir.empty() ? "." : policy_dir) / rel).string();
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(full.c_str()), ::closedir);
    if (!dir) return ErrnoStatus("policy ek_roots.dir: opendir " + full, errno);
    while (dirent* e = ::readdir(dir.get())) {
      struct stat st {};
      const std::string name = e->d_name;
      if (name.empty() || name[0] == '.' || ::stat((full + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        continue;
      }
      paths.push_back(rel + "/" + name);
    }
  }
  std::map<std::string, std::string> by_path;  // normalized path -> bytes; sorted, no duplicates
  for (const std::string& p : paths) {
    if (!p.empty() && p[0] == '/') {
      return Unsupported("policy names EK root file '" + p + "' by an absolute path: an archived policy must name "
                         "its files relative to its own folder");
    }
    const std::string norm = Normalize(p);
    RETURN_IF_ERROR(CheckArchivedPath(norm));
    if (by_path.count(norm)) continue;
    const std::string full = (fs::path(policy_dir.empty() ? "." : policy_dir) / norm).string();
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(full, kMaxArchiveBlobBytes));
    by_path[norm] = AsString(bytes);
  }
  if (by_path.size() > 64) return Unsupported("policy names more than 64 EK root files (the entry holds at most 64)");
  std::vector<std::pair<ArchivedFile, std::string>> out;
  for (auto& [path, bytes] : by_path) {
    out.push_back({ArchivedFile{path, crypto::Sha256(AsBytes(bytes))}, std::move(bytes)});
  }
  return out;
}

Result<attest::Verdict> AppraiseFromBytes(std::string_view policy_text, const std::string& policy_dir,
                                          std::string_view evidence_bundle, std::string_view enrolment_bundle,
                                          const VerdictContext& context) {
  auto policy = attest::ParsePolicy(policy_text, policy_dir);
  if (!policy.ok()) return NamedInput(policy.status(), "policy");
  return AppraiseParsed(*policy, evidence_bundle, enrolment_bundle, context);
}

Result<attest::Verdict> AppraiseParsed(const attest::Policy& policy, std::string_view evidence_bundle,
                                       std::string_view enrolment_bundle, const VerdictContext& context) {
  auto evidence = attest::ParseEvidenceBundle(evidence_bundle);
  if (!evidence.ok()) return NamedInput(evidence.status(), "evidence bundle");
  auto enrolment = attest::ParseEnrolmentBundle(enrolment_bundle);
  if (!enrolment.ok()) return NamedInput(enrolment.status(), "enrolment bundle");
  auto ak = attest::ParseTpm2bPublic(enrolment->ak_public);
  if (!ak.ok()) return ak.status().Annotate("enrolment bundle: AK public");
  attest::AppraisalContext ctx;
  ctx.ak_public = ak->encoded;
  ctx.nonce = context.nonce;
  ctx.bound_digest = context.bound_digest;
  ctx.last_clock = context.last_clock;
  ctx.nonce_issued_at = context.nonce_issued_at;
  ctx.now = context.appraised_at;
  return attest::AppraiseEvidence(policy, attest::ToEvidenceParts(*evidence), ctx);
}

std::vector<CheckOutcome> ChecksFromVerdict(const attest::Verdict& verdict) {
  std::vector<CheckOutcome> out;
  for (const attest::Finding& f : verdict.appraisal.failures()) {
    if (out.size() == kMaxEntryChecks) break;
    std::string reason = (f.where.empty() ? "" : f.where + ": ") + "expected " + f.expected + ", got " + f.got;
    out.push_back({CheckName(f.check), false, EntryText(std::move(reason), kMaxReasonBytes)});
  }
  for (const std::string& c : verdict.appraisal.passed()) {
    if (out.size() == kMaxEntryChecks) break;
    out.push_back({CheckName(c), true, "passed"});
  }
  if (out.empty()) out.push_back({"appraisal.empty", false, "no check ran"});  // fail-closed, as Appraisal::ok()
  return out;
}

Result<uint64_t> RecordAttestationVerdict(LogWriter& log, const EvidenceArchive& archive, const VerdictInputs& in,
                                          const attest::Verdict& verdict) {
  ASSIGN_OR_RETURN(auto files, PolicyReferencedFiles(in.policy, in.policy_dir));
  return RecordWithFiles(log, archive, in, verdict, files);
}

namespace {
Result<uint64_t> RecordWithFiles(LogWriter& log, const EvidenceArchive& archive, const VerdictInputs& in,
                                 const attest::Verdict& verdict,
                                 const std::vector<std::pair<ArchivedFile, std::string>>& files) {
  const VerdictContext& c = in.context;
  if (c.nonce.empty() || c.nonce.size() > 32) return InvalidInput("verdict record: the nonce must be 1..32 bytes");
  constexpr int64_t kYear9999 = 253402300799;  // 9999-12-31T23:59:59Z: the last time an entry can carry
  if (c.nonce_issued_at <= 0 || c.appraised_at <= 0 || c.nonce_issued_at > kYear9999 || c.appraised_at > kYear9999) {
    return InvalidInput("verdict record: nonce issue time and appraisal time must be unix seconds in 1970..9999");
  }
  // Every blob is durable before the entry that names it is appended.
  const std::string result = attest::VerdictJson(verdict);
  std::vector<ByteSpan> blobs = {AsBytes(in.evidence_bundle), AsBytes(in.enrolment_bundle), AsBytes(in.policy),
                                 AsBytes(result)};
  for (const auto& file : files) blobs.push_back(AsBytes(file.second));
  ASSIGN_OR_RETURN(std::vector<crypto::Digest256> digests, archive.PutAll(blobs));
  const crypto::Digest256 &evidence = digests[0], &enrolment = digests[1], &policy = digests[2],
                          &result_digest = digests[3];
  json policy_files = json::array();
  for (size_t i = 0; i < files.size(); ++i) {
    policy_files.push_back({{"path", files[i].first.path}, {"sha256", Hex(digests[4 + i])}});
  }

  Event e = AttestationVerdict(in.actor, in.host, verdict.passed(), ChecksFromVerdict(verdict), in.job_digest,
                               Hex(policy));
  e.time = FormatTimestampMs(static_cast<uint64_t>(c.appraised_at) * 1000);  // when the decision was made
  e.fields["evidence_sha256"] = Hex(evidence);
  e.fields["enrolment_sha256"] = Hex(enrolment);
  e.fields["policy_files"] = std::move(policy_files);
  e.fields["nonce"] = HexEncode(c.nonce);
  if (c.bound_digest) e.fields["bound_digest"] = Hex(*c.bound_digest);
  e.fields["nonce_issued_at"] = static_cast<uint64_t>(c.nonce_issued_at);
  e.fields["appraised_at"] = static_cast<uint64_t>(c.appraised_at);
  if (c.last_clock) {
    e.fields["last_clock"] = {{"clock", c.last_clock->clock},
                              {"reset_count", c.last_clock->reset_count},
                              {"restart_count", c.last_clock->restart_count},
                              {"safe", c.last_clock->safe}};
  }
  e.fields["result_sha256"] = Hex(result_digest);
  return log.Append(std::move(e));
}
}  // namespace

Result<RecordedVerdict> AppraiseAndRecord(LogWriter& log, const EvidenceArchive& archive, const VerdictInputs& in) {
  // Read the policy's files once and appraise on exactly those bytes, laid out as the
  // re-check will lay them out: what is archived is what was judged.
  ASSIGN_OR_RETURN(auto files, PolicyReferencedFiles(in.policy, in.policy_dir));
  std::vector<ArchivedFile> names;
  std::vector<std::vector<uint8_t>> contents;
  for (const auto& [f, bytes] : files) {
    names.push_back(f);
    contents.emplace_back(bytes.begin(), bytes.end());
  }
  ASSIGN_OR_RETURN(attest::Verdict v, AppraiseLaidOut(in.policy, names, contents, in.evidence_bundle,
                                                      in.enrolment_bundle, in.context));
  ASSIGN_OR_RETURN(uint64_t index, RecordWithFiles(log, archive, in, v, files));
  return RecordedVerdict{std::move(v), index};
}

// --- reading an entry back ---

Result<VerdictRecord> VerdictRecordFromEntry(const Entry& entry) {
  if (entry.event.type != EventType::kAttestationVerdict) {
    return InvalidInput("entry " + std::to_string(entry.seq) + " is a " + std::string(EventTypeName(entry.event.type)) +
                        " event, not an attestation.verdict");
  }
  const json& f = entry.event.fields;
  if (!f.contains("evidence_sha256")) {
    return FailedPrecondition("entry " + std::to_string(entry.seq) +
                              " archives no evidence (a verdict written without its inputs): nothing to recompute");
  }
  // The entry schema (event.cc) already fixes every member's type; these checks keep this
  // reader from throwing on an Entry built some other way (no json::value/at/get on a
  // member whose type was not checked).
  VerdictRecord r;
  const auto string_member = [](const json& o, const char* name) -> const std::string* {
    auto it = o.find(name);
    return it != o.end() && it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
  };
  const std::string* host = string_member(f, "host");
  const std::string* verdict = string_member(f, "verdict");
  if (host == nullptr || verdict == nullptr) return InvalidInput("fields 'host' and 'verdict' must be strings");
  r.host = *host;
  r.accepted = *verdict == "accepted";
  ASSIGN_OR_RETURN(r.evidence_sha256, DigestFromField(f, "evidence_sha256"));
  ASSIGN_OR_RETURN(r.enrolment_sha256, DigestFromField(f, "enrolment_sha256"));
  ASSIGN_OR_RETURN(r.policy_sha256, DigestFromField(f, "policy_digest"));
  ASSIGN_OR_RETURN(r.result_sha256, DigestFromField(f, "result_sha256"));
  auto files = f.find("policy_files");
  if (files == f.end() || !files->is_array()) return InvalidInput("field 'policy_files' missing or not an array");
  for (const json& pf : *files) {
    ArchivedFile a;
    const std::string* path = pf.is_object() ? string_member(pf, "path") : nullptr;
    if (path == nullptr) return InvalidInput("policy_files: each item must be {\"path\": string, \"sha256\": digest}");
    a.path = *path;
    RETURN_IF_ERROR(CheckArchivedPath(a.path));
    ASSIGN_OR_RETURN(a.sha256, DigestFromField(pf, "sha256"));
    for (const ArchivedFile& seen : r.policy_files) {
      if (seen.path == a.path) return InvalidInput("policy_files lists '" + a.path + "' twice");
    }
    r.policy_files.push_back(std::move(a));
  }
  const std::string* nonce_hex = string_member(f, "nonce");
  if (nonce_hex == nullptr) return InvalidInput("field 'nonce' missing or not a string");
  auto nonce = HexDecode(*nonce_hex);
  if (!nonce.ok() || nonce->empty() || nonce->size() > 32) return InvalidInput("field 'nonce' is not 1..32 bytes of hex");
  r.context.nonce = std::move(nonce).value();
  if (f.contains("bound_digest")) {
    ASSIGN_OR_RETURN(crypto::Digest256 b, DigestFromField(f, "bound_digest"));
    r.context.bound_digest = b;
  }
  ASSIGN_OR_RETURN(r.context.nonce_issued_at, SecondsFromField(f, "nonce_issued_at"));
  ASSIGN_OR_RETURN(r.context.appraised_at, SecondsFromField(f, "appraised_at"));
  if (f.contains("last_clock")) {
    const json& c = f["last_clock"];
    uint64_t v[4] = {};
    const char* names[4] = {"clock", "reset_count", "restart_count", "safe"};
    const uint64_t max[4] = {UINT64_MAX, UINT32_MAX, UINT32_MAX, 1};  // as the entry schema says
    for (int i = 0; i < 4; ++i) {
      auto it = c.is_object() ? c.find(names[i]) : c.end();
      if (it == c.end() || !it->is_number_unsigned() || it->get<uint64_t>() > max[i]) {
        return InvalidInput(std::string("field 'last_clock': member '") + names[i] + "' missing or out of range");
      }
      v[i] = it->get<uint64_t>();
    }
    attest::ClockInfo clock;
    clock.clock = v[0];
    clock.reset_count = static_cast<uint32_t>(v[1]);
    clock.restart_count = static_cast<uint32_t>(v[2]);
    clock.safe = static_cast<uint8_t>(v[3]);
    r.context.last_clock = clock;
  }
  return r;
}

Result<VerdictDoc> ParseVerdictJson(std::string_view text) {
  ASSIGN_OR_RETURN(json j, ParseStrictJson(text, "verdict document"));
  auto bad = [](const std::string& why) { return InvalidInput("verdict document: " + why); };
  if (!j.is_object() || j.size() != 3 || !j.contains("verdict") || !j.contains("passed") || !j.contains("failures")) {
    return bad("expected exactly the members verdict, passed, failures");
  }
  VerdictDoc d;
  if (j["verdict"] == "pass") {
    d.pass = true;
  } else if (j["verdict"] != "fail") {
    return bad("'verdict' must be \"pass\" or \"fail\"");
  }
  if (!j["passed"].is_array()) return bad("'passed' must be an array");
  for (const json& c : j["passed"]) {
    if (!c.is_string()) return bad("'passed' must hold check names");
    d.passed.push_back(c.get<std::string>());
  }
  if (!j["failures"].is_array()) return bad("'failures' must be an array");
  for (const json& f : j["failures"]) {
    if (!f.is_object() || f.size() != 4) return bad("each failure must be {check, where, expected, got}");
    attest::Finding x;
    for (auto [name, out] : {std::pair{"check", &x.check}, std::pair{"where", &x.where},
                             std::pair{"expected", &x.expected}, std::pair{"got", &x.got}}) {
      auto it = f.find(name);
      if (it == f.end() || !it->is_string()) return bad(std::string("failure member '") + name + "' must be a string");
      *out = it->get<std::string>();
    }
    d.failures.push_back(std::move(x));
  }
  if (d.pass != (d.failures.empty() && !d.passed.empty())) return bad("'verdict' disagrees with its checks");
  return d;
}

// --- the re-check ---

namespace {

void Differences(const VerdictDoc& recorded, const VerdictDoc& recomputed, std::vector<std::string>* out) {
  if (recorded.pass != recomputed.pass) {
    out->push_back(std::string("verdict: recorded ") + (recorded.pass ? "pass" : "fail") + ", recomputed " +
                   (recomputed.pass ? "pass" : "fail"));
  }
  auto multiset_diff = [&](const std::vector<std::string>& a, const std::vector<std::string>& b, const char* what) {
    std::multiset<std::string> rest(b.begin(), b.end());
    for (const std::string& x : a) {
      auto it = rest.find(x);
      if (it != rest.end()) {
        rest.erase(it);
      } else {
        out->push_back(std::string(what) + x);
      }
    }
  };
  multiset_diff(recorded.passed, recomputed.passed, "passed check only in the recorded verdict: ");
  multiset_diff(recomputed.passed, recorded.passed, "passed check only in the recomputed verdict: ");
  std::vector<std::string> fa, fb;
  for (const auto& f : recorded.failures) fa.push_back(FindingText(f));
  for (const auto& f : recomputed.failures) fb.push_back(FindingText(f));
  multiset_diff(fa, fb, "failure only in the recorded verdict: ");
  multiset_diff(fb, fa, "failure only in the recomputed verdict: ");
}

}  // namespace

Result<RecheckResult> RecheckVerdict(const std::string& dir, const LogPublicKey& key, uint64_t index,
                                     const AuditorState* trusted) {
  std::optional<Entry> found;
  VerifyOptions opts;
  opts.trusted = trusted;
  opts.on_entry = [&](uint64_t i, uint64_t, ByteSpan, const Entry& e) -> Status {
    if (i == index) found = e;
    return OkStatus();
  };
  ASSIGN_OR_RETURN(VerifyResult verified, VerifyLog(dir, key, opts));
  if (!found) {
    return NotFound("entry " + std::to_string(index) + " does not exist: the log has " +
                    std::to_string(verified.entries) + " entries");
  }
  if (found->event.type != EventType::kAttestationVerdict) {
    return InvalidInput("entry " + std::to_string(index) + " is a " + std::string(EventTypeName(found->event.type)) +
                        " event, not an attestation.verdict");
  }
  RecheckResult r;
  r.log = std::move(verified);
  r.index = index;
  r.entry = std::move(*found);

  Status s = [&]() -> Status {
    ASSIGN_OR_RETURN(VerdictRecord rec, VerdictRecordFromEntry(r.entry));
    ASSIGN_OR_RETURN(EvidenceArchive archive, EvidenceArchive::Open(dir, /*create=*/false));
    auto load = [&](const crypto::Digest256& d, const std::string& what) -> Result<std::vector<uint8_t>> {
      auto b = archive.Get(d);
      if (!b.ok()) return b.status().Annotate("archived " + what);
      return b;
    };
    ASSIGN_OR_RETURN(std::vector<uint8_t> result, load(rec.result_sha256, "verdict (result_sha256)"));
    r.recorded_json = AsString(result);
    ASSIGN_OR_RETURN(std::vector<uint8_t> evidence, load(rec.evidence_sha256, "evidence bundle (evidence_sha256)"));
    ASSIGN_OR_RETURN(std::vector<uint8_t> enrolment, load(rec.enrolment_sha256, "enrolment bundle (enrolment_sha256)"));
    ASSIGN_OR_RETURN(std::vector<uint8_t> policy, load(rec.policy_sha256, "policy (policy_digest)"));
    std::vector<std::vector<uint8_t>> contents;
    for (const ArchivedFile& f : rec.policy_files) {
      ASSIGN_OR_RETURN(std::vector<uint8_t> b, load(f.sha256, "policy file '" + f.path + "'"));
      contents.push_back(std::move(b));
    }
    auto recomputed = AppraiseLaidOut(AsString(policy), rec.policy_files, contents, AsString(evidence),
                                      AsString(enrolment), rec.context);
    if (!recomputed.ok()) return recomputed.status().Annotate("recomputing the verdict");
    r.recomputed_json = attest::VerdictJson(*recomputed);

    if (r.recorded_json != r.recomputed_json) {
      auto recorded_doc = ParseVerdictJson(r.recorded_json);
      auto recomputed_doc = ParseVerdictJson(r.recomputed_json);
      if (!recorded_doc.ok()) {
        r.differences.push_back("the archived verdict is not a verdict document: " + recorded_doc.status().message());
      } else if (!recomputed_doc.ok()) {
        return Internal("VerdictJson output does not read back: " + recomputed_doc.status().message());
      } else {
        Differences(*recorded_doc, *recomputed_doc, &r.differences);
        if (r.differences.empty()) r.differences.push_back("the verdict documents list the same checks in another order");
      }
    }
    // The entry's own summary must say what the recomputation says, too.
    if (rec.accepted != recomputed->passed()) {
      r.differences.push_back(std::string("the entry says ") + (rec.accepted ? "accepted" : "rejected") +
                              ", the recomputed verdict is " + (recomputed->passed() ? "pass" : "fail"));
    }
    json expected_checks = json::array();
    for (const CheckOutcome& c : ChecksFromVerdict(*recomputed)) {
      expected_checks.push_back({{"check", c.check}, {"ok", c.ok}, {"reason", c.reason}});
    }
    const auto checks = r.entry.event.fields.find("checks");  // required by the schema; never throw
    if (checks == r.entry.event.fields.end() || *checks != expected_checks) {
      r.differences.push_back("the entry's checks are not the checks of the recomputed verdict");
    }
    r.outcome = r.differences.empty() ? RecheckOutcome::kReproduced : RecheckOutcome::kDiffers;
    return OkStatus();
  }();
  if (!s.ok()) {
    if (s.code() == Code::kInternal) return s;
    r.outcome = RecheckOutcome::kNotEvaluated;
    r.not_evaluated = std::move(s);
    r.differences.clear();
  }
  return r;
}

}  // namespace enclave::audit
