#include "enclave/audit/witness.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>

#include "enclave/audit/checkpoint.h"
#include "enclave/common/files.h"
#include "enclave/crypto/hash.h"

namespace enclave::audit {
namespace {

// Messages quote at most this much of a submitted origin.
std::string Quote(std::string_view s) { return "'" + std::string(s.substr(0, 128)) + (s.size() > 128 ? "...'" : "'"); }

// A new directory entry is durable only once its parent directory is synced.
Status MakeDurableDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0) return errno == EEXIST ? OkStatus() : ErrnoStatus("creating " + dir, errno);
  std::string parent = std::filesystem::path(dir).parent_path().string();
  if (parent.empty()) parent = ".";
  return SyncFolder(parent);
}

Evaluation Refuse(Evaluation e, int status, std::string message) {
  e.status = status;
  e.message = std::move(message);
  return e;
}

}  // namespace

Result<AddCheckpointRequest> ParseAddCheckpointRequest(std::string_view body) {
  if (body.size() > kMaxAddCheckpointBytes) return InvalidInput("add-checkpoint body larger than 32 KiB");
  AddCheckpointRequest r;
  auto next_line = [&](std::string_view* line) {
    const size_t eol = body.find('\n');
    if (eol == std::string_view::npos) return false;
    *line = body.substr(0, eol);
    body.remove_prefix(eol + 1);
    return true;
  };
  std::string_view line;
  if (!next_line(&line) || line.substr(0, 4) != "old ") return InvalidInput("the body does not begin with an 'old N' line");
  auto old = ParseCanonicalDecimal(line.substr(4));
  if (!old.ok()) return InvalidInput("old size: " + old.status().message());
  r.old_size = *old;
  for (;;) {
    if (!next_line(&line)) return InvalidInput("no blank line before the checkpoint");
    if (line.empty()) break;
    if (r.proof.size() == kMaxProofLines) return InvalidInput("more than 63 consistency proof lines");
    auto h = Base64DecodeStrict(line);
    if (!h.ok() || h->size() != 32) {
      return InvalidInput("consistency proof line " + std::to_string(r.proof.size() + 1) +
                          " is not canonical base64 of a 32-byte hash");
    }
    Hash hash{};
    std::copy(h->begin(), h->end(), hash.begin());
    r.proof.push_back(hash);
  }
  if (body.empty()) return InvalidInput("no checkpoint after the blank line");
  if (body.size() > kMaxNoteBytes) return InvalidInput("the checkpoint note is longer than 16 KiB");
  r.checkpoint = std::string(body);
  return r;
}

std::string FormatAddCheckpointRequest(const AddCheckpointRequest& request) {
  std::string out = "old " + std::to_string(request.old_size) + "\n";
  for (const Hash& h : request.proof) out += Base64Encode(h) + "\n";
  return out + "\n" + request.checkpoint;
}

Result<std::vector<WitnessedLog>> LoadWitnessedLogs(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, 1u << 20));
  std::vector<WitnessedLog> logs;
  if (!bytes.empty() && bytes[0] == '{') {
    ASSIGN_OR_RETURN(LogPublicKey key, LogPublicKey::Load(path));
    const std::string origin = CheckpointOrigin(key.log_id);
    logs.push_back({origin, key.key, NoteKeyHash(origin, key.key)});
    return logs;
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    ASSIGN_OR_RETURN(VerifierKey v, ParseVerifierKey(line, kNoteAlgEd25519, 32, path + ":" + std::to_string(line_no)));
    WitnessedLog log;
    log.origin = v.name;
    std::copy(v.key.begin(), v.key.end(), log.key.begin());
    log.key_id = v.key_id;
    logs.push_back(std::move(log));
  }
  if (logs.empty()) return InvalidInput(path + ": no log verifier key in the file");
  return logs;
}

std::string StateFileName(const std::string& origin) { return HexEncode(crypto::Sha256(AsBytes(origin))); }

Evaluation EvaluateAddCheckpoint(std::string_view body, std::span<const WitnessedLog> logs,
                                 const std::function<const CosignedState*(const std::string&)>& state) {
  Evaluation e;
  auto req = ParseAddCheckpointRequest(body);
  if (!req.ok()) return Refuse(std::move(e), 400, req.status().message());
  e.note = req->checkpoint;
  auto note = ParseNote(req->checkpoint, "checkpoint");
  if (!note.ok()) return Refuse(std::move(e), 400, note.status().message());
  auto cp = ParseCheckpointText(note->text, "checkpoint");
  if (!cp.ok()) return Refuse(std::move(e), 400, cp.status().message());
  e.origin = cp->origin;
  e.tree_size = cp->tree_size;
  e.root = cp->root;
  e.text = note->text;
  // The log's signature: lines of the keys configured for this origin must verify, one must.
  bool known = false;
  for (const WitnessedLog& log : logs) {
    if (log.origin != e.origin) continue;
    known = true;
    for (const NoteSignature& s : note->signatures) {
      if (s.name != log.origin || s.key_id != log.key_id) continue;
      if (s.signature.size() != 64 ||
          crypto_sign_verify_detached(s.signature.data(), reinterpret_cast<const uint8_t*>(e.text.data()),
                                      e.text.size(), log.key.data()) != 0) {
        return Refuse(std::move(e), 403, "a signature line of the log key of " + Quote(e.origin) + " does not verify");
      }
      e.log_signed = true;
    }
  }
  if (!known) return Refuse(std::move(e), 404, "unknown log origin " + Quote(e.origin));
  if (!e.log_signed) return Refuse(std::move(e), 403, "the checkpoint is not signed by a key of the log " + Quote(e.origin));
  const uint64_t old = req->old_size;
  if (old > e.tree_size) {
    return Refuse(std::move(e), 400,
                  "old size " + std::to_string(old) + " is larger than the checkpoint's " + std::to_string(e.tree_size));
  }
  const CosignedState* cur = state(e.origin);
  const uint64_t cur_size = cur != nullptr ? cur->tree_size : 0;
  if (old != cur_size) {
    e.current_size = cur_size;
    return Refuse(std::move(e), 409,
                  "old size " + std::to_string(old) + " is not the size last cosigned, " + std::to_string(cur_size));
  }
  if (old == e.tree_size) {
    if (!req->proof.empty()) return Refuse(std::move(e), 422, "a consistency proof between equal sizes must be empty");
    if (cur != nullptr && cur->root != e.root) {
      return Refuse(std::move(e), 409,
                    "the checkpoint of size " + std::to_string(e.tree_size) + " has another root than the one " +
                        "cosigned at that size: the log forked");
    }
  } else if (old == 0) {
    if (!req->proof.empty()) return Refuse(std::move(e), 422, "the consistency proof from size 0 must be empty");
  } else {
    Status s = VerifyConsistency(old, e.tree_size, cur->root, e.root, req->proof);
    if (!s.ok()) {
      return Refuse(std::move(e), 422,
                    "the consistency proof from size " + std::to_string(old) + " to " + std::to_string(e.tree_size) +
                        " does not verify: " + s.message());
    }
  }
  e.status = 200;
  return e;
}

Result<std::unique_ptr<Witness>> Witness::Open(const std::string& dir, WitnessSigningKey key,
                                               std::vector<WitnessedLog> logs, WitnessOptions options) {
  namespace fs = std::filesystem;
  for (const std::string& d : {dir, dir + "/logs", dir + "/refused"}) RETURN_IF_ERROR(MakeDurableDir(d));
  const std::string lock_path = dir + "/lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("opening " + lock_path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return FailedPrecondition(dir + ": another witness holds this state directory");
    return ErrnoStatus("locking " + lock_path, err);
  }
  std::unique_ptr<Witness> w(new Witness(dir, fd, std::move(key), std::move(logs), std::move(options)));
  for (const WitnessedLog& log : w->logs_) {
    if (w->state_.count(log.origin)) continue;
    const std::string path = dir + "/logs/" + StateFileName(log.origin);
    if (!fs::exists(path)) continue;
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, kMaxNoteBytes + 1));
    const std::string note(bytes.begin(), bytes.end());
    // Re-checked as a submission from size 0 would be, against no state: it must be a
    // checkpoint of this origin signed by one of its keys.
    Evaluation e = EvaluateAddCheckpoint("old 0\n\n" + note, w->logs_, [](const std::string&) { return nullptr; });
    if (e.status != 200) return AuthFailed("witness state file " + path + " (log " + log.origin + "): " + e.message);
    if (e.origin != log.origin) {
      return AuthFailed("witness state file " + path + " (log " + log.origin + ") holds a checkpoint of " + e.origin);
    }
    w->state_[log.origin] = CosignedState{e.tree_size, e.root, note};
  }
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir + "/refused", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    ++w->refusals_kept_;
  }
  return w;
}

Witness::~Witness() { ::close(lock_fd_); }

void Witness::Log(const std::string& line) const {
  if (options_.log_line) options_.log_line(line);
}

Status Witness::Store(const Evaluation& e) {
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(dir_ + "/logs/" + StateFileName(e.origin), true));
  RETURN_IF_ERROR(out.Write(e.note.data(), e.note.size()));
  return out.Commit();  // fsync, rename, fsync of the directory
}

void Witness::KeepRefusal(std::string_view body, const Evaluation& e) {
  if (refusals_kept_ >= kMaxRefusalRecords) {
    Log("enclave-audit witness: not keeping the refused checkpoint of " + Quote(e.origin) + ": already 1024 kept");
    return;
  }
  const std::string path = dir_ + "/refused/" + HexEncode(crypto::Sha256(AsBytes(body)));
  auto out = AtomicOutputFile::Create(path, false);
  Status s = out.ok() ? out->Write(body.data(), body.size()) : out.status();
  if (s.ok()) s = out->Commit();
  if (s.ok()) {
    ++refusals_kept_;
  } else if (s.code() != Code::kAlreadyExists) {
    Log("enclave-audit witness: keeping a refused checkpoint: " + s.ToString());
  }
}

WitnessAnswer Witness::AddCheckpoint(std::string_view body) {
  std::lock_guard<std::mutex> lock(mu_);
  WitnessAnswer a;
  if (!failed_.ok()) {
    a.status = 500;
    a.body = "the witness stopped after a failed write of its state; its operator must restart it\n";
    return a;
  }
  Evaluation e = EvaluateAddCheckpoint(body, logs_, [this](const std::string& origin) -> const CosignedState* {
    auto it = state_.find(origin);
    return it == state_.end() ? nullptr : &it->second;
  });
  const std::string what = (e.origin.empty() ? std::string("?") : Quote(e.origin)) + " size " + std::to_string(e.tree_size);
  if (e.status != 200) {
    // A checkpoint the log signed that does not fit what was cosigned is evidence of a fork.
    if (e.log_signed && (e.status == 422 || (e.status == 409 && !e.current_size))) KeepRefusal(body, e);
    Log("enclave-audit witness: refused " + what + ": " + std::to_string(e.status) + " " + e.message);
    a.status = e.status;
    if (e.current_size) {
      a.content_type = std::string(kTlogSizeContentType);
      a.body = std::to_string(*e.current_size) + "\n";
    } else {
      a.body = e.message + "\n";
    }
    return a;
  }
  if (Status s = Store(e); !s.ok()) {
    failed_ = s;
    Log("enclave-audit witness: storing " + what + " failed, refusing every request from now on: " + s.ToString());
    a.status = 500;
    a.body = "the witness could not store its state\n";
    return a;
  }
  state_[e.origin] = CosignedState{e.tree_size, e.root, e.note};
  const uint64_t now = options_.clock_s ? options_.clock_s() : static_cast<uint64_t>(::time(nullptr));
  auto line = key_.Cosign(e.text, now);
  if (!line.ok()) {
    a.status = 500;
    a.body = line.status().message() + "\n";
    return a;
  }
  Log("enclave-audit witness: cosigned " + what);
  a.status = 200;
  a.body = *line;
  return a;
}

std::optional<CosignedState> Witness::Cosigned(const std::string& origin) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = state_.find(origin);
  if (it == state_.end()) return std::nullopt;
  return it->second;
}

}  // namespace enclave::audit
