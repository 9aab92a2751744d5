// A witness per C2SP tlog-witness (docs/formats/witness.md): it cosigns a log's checkpoint
// only when it is signed by the log's key and consistent with the last checkpoint it
// cosigned for that log, and it keeps that checkpoint durably (fsync, atomic rename)
// before it answers. The HTTP side is witness_server.h; this is the protocol and the state.
//
//   add-checkpoint body = "old " decimal "\n" (base64(hash) "\n"){0,63} "\n" checkpoint-note
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/audit/cosignature.h"
#include "enclave/audit/merkle.h"
#include "enclave/audit/note.h"
#include "enclave/common/status.h"

namespace enclave::audit {

inline constexpr size_t kMaxProofLines = 63;
inline constexpr size_t kMaxAddCheckpointBytes = 32 * 1024;  // 16 KiB note, 63 hashes, with room
inline constexpr std::string_view kTlogSizeContentType = "text/x.tlog.size";
inline constexpr size_t kMaxRefusalRecords = 1024;

struct AddCheckpointRequest {
  uint64_t old_size = 0;
  std::vector<Hash> proof;
  std::string checkpoint;  // the signed note, verbatim
};
// Strict (InvalidInput): canonical decimal, at most 63 canonical base64 hashes of 32 bytes,
// the blank line, then a note of at most kMaxNoteBytes (not parsed here).
Result<AddCheckpointRequest> ParseAddCheckpointRequest(std::string_view body);
std::string FormatAddCheckpointRequest(const AddCheckpointRequest& request);

// A log the witness follows: its origin and an Ed25519 note key (a vkey named by the origin).
struct WitnessedLog {
  std::string origin;
  PublicKeyBytes key{};
  KeyId key_id{};
};
// One vkey per line ('#' lines and blank lines skipped), or an enclave-audit LOG.pub file.
Result<std::vector<WitnessedLog>> LoadWitnessedLogs(const std::string& path);

// The latest checkpoint cosigned for one origin.
struct CosignedState {
  uint64_t tree_size = 0;
  Hash root{};
  std::string note;  // as received
};

// The decision on one request, before anything is stored or signed (no I/O: fuzzable).
struct Evaluation {
  int status = 400;           // 200: cosign; else the HTTP status of the refusal
  std::string message;        // why not (one line)
  std::string origin;         // once the note's origin is known
  uint64_t tree_size = 0;     // the submitted checkpoint's
  Hash root{};
  std::string text;           // the checkpoint's note text (what a cosignature signs)
  std::string note;           // the note as received
  std::optional<uint64_t> current_size;  // 409 on `old`: the size to report
  bool log_signed = false;    // the log's signature verified: a refusal is evidence
};
// `state(origin)` gives what was cosigned for an origin, or nullptr.
Evaluation EvaluateAddCheckpoint(std::string_view body, std::span<const WitnessedLog> logs,
                                 const std::function<const CosignedState*(const std::string&)>& state);

struct WitnessAnswer {
  int status = 500;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct WitnessOptions {
  std::function<uint64_t()> clock_s;               // tests; default: the system clock
  std::function<void(const std::string&)> log_line;  // one line per request (stderr in the CLI)
};

// The witness and its state directory:
//   DIR/lock                      flock'ed while open (one witness per directory)
//   DIR/logs/<hex SHA-256(origin)>   the latest cosigned checkpoint note of that origin
//   DIR/refused/<hex SHA-256(body)>  requests refused although the log signed them (evidence)
class Witness {
 public:
  // Reads every configured log's state file (its note must verify with the log's key and
  // name its origin). Fails closed on a damaged one.
  static Result<std::unique_ptr<Witness>> Open(const std::string& dir, WitnessSigningKey key,
                                               std::vector<WitnessedLog> logs, WitnessOptions options = {});
  ~Witness();
  Witness(const Witness&) = delete;
  Witness& operator=(const Witness&) = delete;

  // The whole add-checkpoint exchange: check, store durably, cosign. Serialized: the check
  // against the stored size and the store happen under one lock.
  WitnessAnswer AddCheckpoint(std::string_view body);

  std::optional<CosignedState> Cosigned(const std::string& origin) const;
  const WitnessPublicKey& public_key() const { return key_.public_key(); }

 private:
  Witness(std::string dir, int lock_fd, WitnessSigningKey key, std::vector<WitnessedLog> logs, WitnessOptions options)
      : dir_(std::move(dir)), lock_fd_(lock_fd), key_(std::move(key)), logs_(std::move(logs)),
        options_(std::move(options)) {}
  Status Store(const Evaluation& e);
  void KeepRefusal(std::string_view body, const Evaluation& e);
  void Log(const std::string& line) const;

  const std::string dir_;
  const int lock_fd_;
  const WitnessSigningKey key_;
  const std::vector<WitnessedLog> logs_;
  const WitnessOptions options_;

  mutable std::mutex mu_;
  std::map<std::string, CosignedState> state_;
  size_t refusals_kept_ = 0;
  Status failed_;  // after a failed store: every request gets 500 until restarted
};

std::string StateFileName(const std::string& origin);  // hex SHA-256(origin)

}  // namespace enclave::audit
