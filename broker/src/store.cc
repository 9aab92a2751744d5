#include "enclave/broker/store.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <unordered_map>

#include "enclave/common/bytes.h"

namespace enclave::broker {
namespace {

Status SqliteError(sqlite3* db, std::string_view what) {
  std::string msg = "sqlite " + std::string(what) + ": ";
  msg += db != nullptr ? sqlite3_errmsg(db) : "out of memory";
  int code = db != nullptr ? sqlite3_extended_errcode(db) : SQLITE_NOMEM;
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED) return Unavailable(msg);
  if ((code & 0xff) == SQLITE_IOERR || (code & 0xff) == SQLITE_FULL) return IoError(msg);
  if ((code & 0xff) == SQLITE_CONSTRAINT) return AlreadyExists(msg);
  if ((code & 0xff) == SQLITE_CORRUPT || (code & 0xff) == SQLITE_NOTADB) return InvalidInput(msg);
  return Internal(msg);
}

}  // namespace

// The connection's prepared statements, kept for its life: preparing each statement anew
// on every call (about 30 on the release path) cost more than running most of them. Used
// only with the store's mutex held, like the connection.
class StatementCache {
 public:
  explicit StatementCache(sqlite3* db) : db_(db) {}
  ~StatementCache() {
    for (auto& [sql, stmt] : idle_) sqlite3_finalize(stmt);
  }
  StatementCache(const StatementCache&) = delete;
  StatementCache& operator=(const StatementCache&) = delete;
  sqlite3* db() const { return db_; }
  // An idle statement for `sql` (no other Stmt holds it), or nullptr.
  sqlite3_stmt* Take(const std::string& sql) {
    auto it = idle_.find(sql);
    if (it == idle_.end()) return nullptr;
    sqlite3_stmt* stmt = it->second;
    idle_.erase(it);
    return stmt;
  }
  // Back into the cache, reset and unbound.
  void Give(std::string sql, sqlite3_stmt* stmt) {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    idle_.emplace(std::move(sql), stmt);
  }

 private:
  sqlite3* db_;
  std::unordered_multimap<std::string, sqlite3_stmt*> idle_;
};

// BEGIN IMMEDIATE ... COMMIT; rolled back unless Commit() succeeded.
class Txn {
 public:
  explicit Txn(sqlite3* db) : db_(db) {
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK)
      status_ = SqliteError(db, "BEGIN IMMEDIATE");
    else
      open_ = true;
  }
  ~Txn() {
    if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  const Status& status() const { return status_; }
  Status Commit() {
    if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return SqliteError(db_, "COMMIT");
    open_ = false;
    committed_ = true;
    return OkStatus();
  }
  bool committed() const { return committed_; }

 private:
  sqlite3* db_;
  bool open_ = false;
  bool committed_ = false;
  Status status_;
};

namespace {

// One prepared statement. From a cache: taken from it and given back, reset, when done;
// without one: prepared and finalized. Either way nothing outlives the Stmt's scope.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { Prepare(sql); }
  Stmt(StatementCache& cache, std::string sql) : db_(cache.db()), cache_(&cache), sql_(std::move(sql)) {
    stmt_ = cache.Take(sql_);
    if (stmt_ == nullptr) Prepare(sql_.c_str());
  }
  ~Stmt() {
    if (stmt_ == nullptr) return;
    if (cache_ != nullptr) {
      cache_->Give(std::move(sql_), stmt_);
    } else {
      sqlite3_finalize(stmt_);
    }
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  const Status& status() const { return status_; }

  Stmt& Text(int i, std::string_view v) {
    if (stmt_ && status_.ok() &&
        sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) != SQLITE_OK)
      status_ = SqliteError(db_, "bind");
    return *this;
  }
  Stmt& Blob(int i, ByteSpan v) {
    if (stmt_ && status_.ok() &&
        sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) != SQLITE_OK)
      status_ = SqliteError(db_, "bind");
    return *this;
  }
  Stmt& Int(int i, int64_t v) {
    if (stmt_ && status_.ok() && sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK) status_ = SqliteError(db_, "bind");
    return *this;
  }
  // true: a row; false: done.
  Result<bool> Step() {
    if (!status_.ok()) return status_;
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, "step");
  }
  Status Run() {
    auto r = Step();
    if (!r.ok()) return r.status();
    return OkStatus();
  }
  int64_t ColInt(int i) { return sqlite3_column_int64(stmt_, i); }
  bool ColNull(int i) { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
  std::string ColText(int i) {
    const auto* p = sqlite3_column_text(stmt_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, i)))
             : std::string();
  }
  std::vector<uint8_t> ColBlob(int i) {
    const auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_, i));
    size_t n = static_cast<size_t>(sqlite3_column_bytes(stmt_, i));
    return p ? std::vector<uint8_t>(p, p + n) : std::vector<uint8_t>();
  }
  Result<crypto::Digest256> ColDigest(int i, std::string_view what) {
    auto b = ColBlob(i);
    crypto::Digest256 d{};
    if (b.size() != d.size()) return InvalidInput("state store: column '" + std::string(what) + "' is not 32 bytes");
    std::memcpy(d.data(), b.data(), d.size());
    return d;
  }

 private:
  void Prepare(const char* sql) {
    if (sqlite3_prepare_v2(db_, sql, -1, &stmt_, nullptr) != SQLITE_OK) {
      status_ = SqliteError(db_, std::string("prepare \"") + sql + "\"");
      sqlite3_finalize(stmt_);
      stmt_ = nullptr;
    }
  }

  sqlite3* db_;
  StatementCache* cache_ = nullptr;
  std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
  Status status_;
};

// Version 1. Later versions append statements; a database is migrated one version at a time.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE hosts (
  host_id TEXT PRIMARY KEY,
  ek_public BLOB NOT NULL,
  ek_cert_sha256 BLOB NOT NULL,
  ak_public BLOB NOT NULL,
  ak_name BLOB NOT NULL UNIQUE,
  enrolment_bundle TEXT NOT NULL,
  clock_state TEXT NOT NULL DEFAULT '',
  enrolled_at INTEGER NOT NULL
) STRICT;
CREATE TABLE challenges (
  challenge_id TEXT PRIMARY KEY,
  host_id TEXT NOT NULL,
  enrolment_bundle TEXT NOT NULL,
  secret_sha256 BLOB NOT NULL,
  ek_cert_sha256 BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) STRICT;
CREATE TABLE nonces (
  nonce BLOB PRIMARY KEY,
  host_id TEXT NOT NULL,
  issued_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  used_at INTEGER
) STRICT;
CREATE INDEX nonces_expiry ON nonces(expires_at);
CREATE TABLE revocations (
  kind TEXT NOT NULL CHECK (kind IN ('host', 'job')),
  subject_id TEXT NOT NULL,
  reason TEXT NOT NULL,
  revoked_at INTEGER NOT NULL,
  PRIMARY KEY (kind, subject_id)
) STRICT;
CREATE TABLE jobs (
  job_id TEXT PRIMARY KEY,
  job_digest BLOB NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;
CREATE TABLE leases (
  lease_id TEXT PRIMARY KEY,
  host_id TEXT NOT NULL REFERENCES hosts(host_id),
  job_id TEXT NOT NULL REFERENCES jobs(job_id),
  issued_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  reattest_by INTEGER NOT NULL,
  ended_at INTEGER
) STRICT;
)sql";

// Version 2: key release. v1 created jobs and leases but never wrote them.
constexpr const char* kSchemaV2 = R"sql(
DROP TABLE leases;
DROP TABLE jobs;
CREATE TABLE jobs (
  job_id TEXT PRIMARY KEY,
  job_digest BLOB NOT NULL,
  world_size INTEGER NOT NULL,
  key_nonce BLOB NOT NULL,
  key_wrapped BLOB NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;
CREATE TABLE leases (
  lease_id TEXT PRIMARY KEY,
  host_id TEXT NOT NULL REFERENCES hosts(host_id),
  job_id TEXT NOT NULL REFERENCES jobs(job_id),
  rank INTEGER NOT NULL,
  policy_id TEXT NOT NULL,
  policy_sha256 BLOB NOT NULL,
  recipient BLOB NOT NULL,
  datasets TEXT NOT NULL,
  issued_at INTEGER NOT NULL,
  valid_until INTEGER NOT NULL,
  reattest_by INTEGER NOT NULL,
  ended_at INTEGER,
  end_reason TEXT NOT NULL DEFAULT '',
  address TEXT NOT NULL DEFAULT '',
  report_key BLOB NOT NULL,
  reported_at INTEGER
) STRICT;
CREATE INDEX leases_job ON leases(job_id, rank);
CREATE INDEX leases_host ON leases(host_id);
CREATE TABLE policies (
  policy_id TEXT NOT NULL,
  serial INTEGER NOT NULL,
  policy_sha256 BLOB NOT NULL,
  policy_text TEXT NOT NULL,
  signature_text TEXT NOT NULL,
  signer BLOB NOT NULL,
  activated_at INTEGER NOT NULL,
  PRIMARY KEY (policy_id, serial)
) STRICT;
)sql";

// Version 3: the TPM keys each host's enrolment bundles certified (SHA-256 of the
// SubjectPublicKeyInfo of every trusted EK certificate, hex). One TPM can have several EKs
// (RSA-2048, P-256, P-384), hence several host ids; a shared certified key ties them.
constexpr const char* kSchemaV3 = R"sql(
CREATE TABLE tpm_keys (
  ek_key TEXT NOT NULL,
  host_id TEXT NOT NULL,
  linked_at INTEGER NOT NULL,
  PRIMARY KEY (ek_key, host_id)
) STRICT;
CREATE INDEX tpm_keys_host ON tpm_keys(host_id);
)sql";

// Version 4: a job key is bound to the whole job (policy, datasets, world size, workload)
// and ends with the job. Jobs stored before have no binding: they are ended, never issued
// again.
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE jobs ADD COLUMN binding TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN ended_at INTEGER;
ALTER TABLE jobs ADD COLUMN end_reason TEXT NOT NULL DEFAULT '';
UPDATE jobs SET ended_at = unixepoch(), end_reason = 'stored before job keys were bound to the whole job';
ALTER TABLE leases ADD COLUMN claims TEXT NOT NULL DEFAULT '';
)sql";

// Version 5: signed nonce requests. The newest accepted request clock of each host, and the
// requests accepted within the window behind it (a replay is one of them, or older).
constexpr const char* kSchemaV5 = R"sql(
CREATE TABLE request_clocks (
  host_id TEXT PRIMARY KEY,
  reset_count INTEGER NOT NULL,
  restart_count INTEGER NOT NULL,
  clock INTEGER NOT NULL
) STRICT;
CREATE TABLE nonce_requests (
  host_id TEXT NOT NULL,
  digest BLOB NOT NULL,
  clock INTEGER NOT NULL,
  PRIMARY KEY (host_id, digest)
) STRICT;
)sql";

// Version 6: a lease whose release was not completed (no key sent) is marked undelivered
// and does not count as one of its job's leases.
constexpr const char* kSchemaV6 = R"sql(
ALTER TABLE leases ADD COLUMN undelivered INTEGER NOT NULL DEFAULT 0;
)sql";

// The hosts linked to ?1 (itself included) through the TPM keys stored for them and the
// keys of the JSON array ?2, transitively; then the first of them that is revoked.
constexpr const char* kRevokedLinkSql = R"sql(
WITH RECURSIVE linked(h) AS (
  SELECT ?1
  UNION SELECT host_id FROM tpm_keys WHERE ek_key IN (SELECT value FROM json_each(?2))
  UNION SELECT b.host_id FROM linked JOIN tpm_keys a ON a.host_id = linked.h JOIN tpm_keys b ON b.ek_key = a.ek_key
)
SELECT subject_id FROM revocations WHERE kind = 'host' AND subject_id IN (SELECT h FROM linked)
ORDER BY subject_id LIMIT 1
)sql";

// Every host linked to ?1 (itself included), for ending their leases.
constexpr const char* kEndLinkedLeasesSql = R"sql(
WITH RECURSIVE linked(h) AS (
  SELECT ?3
  UNION SELECT b.host_id FROM linked JOIN tpm_keys a ON a.host_id = linked.h JOIN tpm_keys b ON b.ek_key = a.ek_key
)
UPDATE leases SET ended_at = ?1, end_reason = ?2 WHERE host_id IN (SELECT h FROM linked) AND ended_at IS NULL
)sql";

std::string KindName(RevokedKind kind) { return kind == RevokedKind::kHost ? "host" : "job"; }

Result<sqlite3*> OpenDb(const std::string& path, int flags) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteError(db, "open " + path);
    sqlite3_close(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  return db;
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  auto store = OpenReadWrite(path);
  if (!store.ok()) return store.status().Annotate("state store " + path);
  return store;
}

Result<std::unique_ptr<Store>> Store::OpenReadWrite(const std::string& path) {
  // Create the file ourselves so its mode is 0600 from the start (SQLite would use 0644).
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus("open", errno);
  ::close(fd);
  ASSIGN_OR_RETURN(sqlite3 * db, OpenDb(path, SQLITE_OPEN_READWRITE));
  std::unique_ptr<Store> store(new Store(db));
  // WAL with synchronous=NORMAL: SQLite syncs the WAL at checkpoints and at its restart,
  // and WriteDurably() syncs it after every commit, once for all the commits made meanwhile.
  RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  {
    Stmt mode(db, "PRAGMA journal_mode");
    ASSIGN_OR_RETURN(bool row, mode.Step());
    if (!row || mode.ColText(0) != "wal") return Unavailable("could not be put in WAL mode");
  }
  RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL"));
  store->wal_path_ = path + "-wal";
  store->wal_sync_ = std::make_unique<GroupSync>([s = store.get()] { return s->SyncWal(); });
  RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON"));
  RETURN_IF_ERROR(store->Exec("PRAGMA secure_delete=ON"));
  RETURN_IF_ERROR(store->Migrate());
  return store;
}

Result<std::unique_ptr<Store>> Store::OpenReadOnly(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("state store: " + path, errno);
  ASSIGN_OR_RETURN(sqlite3 * db, OpenDb(path, SQLITE_OPEN_READONLY));
  std::unique_ptr<Store> store(new Store(db));
  ASSIGN_OR_RETURN(int version, store->SchemaVersion());
  if (version != kSchemaVersion)
    return Unsupported("state store: " + path + " has schema version " + std::to_string(version) +
                       ", this broker reads " + std::to_string(kSchemaVersion));
  return store;
}

Store::Store(sqlite3* db) : db_(db), stmts_(std::make_unique<StatementCache>(db)) {}

Store::~Store() {
  stmts_.reset();  // finalized before the connection closes
  sqlite3_close(db_);
  if (wal_fd_ >= 0) ::close(wal_fd_);
}

template <typename Body>
auto Store::WriteDurably(Body&& body) -> decltype(body(std::declval<Txn&>())) {
  std::optional<decltype(body(std::declval<Txn&>()))> result;
  bool committed = false;
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Txn txn(db_);
    if (!txn.status().ok()) return txn.status();
    result.emplace(body(txn));
    committed = txn.committed();
    if (committed && wal_sync_) ticket = wal_sync_->Issue();  // the commit's frames are written: covered
  }  // the body's statements went back to the cache, and an uncommitted transaction rolled back, under mu_
  if (committed && wal_sync_) RETURN_IF_ERROR(wal_sync_->Through(ticket));
  return std::move(*result);
}

Status Store::SyncWal() {
  // SQLite keeps its WAL file (one inode) while a connection is open; checked all the same,
  // since a sync of a file SQLite no longer writes would make nothing durable.
  struct stat named {};
  if (::stat(wal_path_.c_str(), &named) != 0) return ErrnoStatus("state store: WAL " + wal_path_, errno);
  struct stat held {};
  if (wal_fd_ < 0 || ::fstat(wal_fd_, &held) != 0 || held.st_ino != named.st_ino || held.st_dev != named.st_dev) {
    if (wal_fd_ >= 0) ::close(wal_fd_);
    wal_fd_ = ::open(wal_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (wal_fd_ < 0) return ErrnoStatus("state store: opening WAL " + wal_path_, errno);
  }
  if (::fdatasync(wal_fd_) != 0) return ErrnoStatus("state store: fdatasync of WAL " + wal_path_, errno);
  return OkStatus();
}

uint64_t Store::wal_syncs() const { return wal_sync_ ? wal_sync_->syncs() : 0; }

Status Store::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "unknown error";
    sqlite3_free(err);
    return SqliteError(db_, std::string("exec: ") + m);
  }
  return OkStatus();
}

Result<int> Store::SchemaVersion() {
  Stmt t(*stmts_, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='schema_migrations'");
  ASSIGN_OR_RETURN(bool row, t.Step());
  if (!row || t.ColInt(0) == 0) return 0;
  Stmt v(*stmts_, "SELECT coalesce(max(version), 0) FROM schema_migrations");
  ASSIGN_OR_RETURN(row, v.Step());
  return row ? static_cast<int>(v.ColInt(0)) : 0;
}

Status Store::Migrate() {
  return WriteDurably([&](Txn& txn) -> Status {
    RETURN_IF_ERROR(Exec(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"));
    ASSIGN_OR_RETURN(int version, SchemaVersion());
    if (version > kSchemaVersion)
      return Unsupported("state store: schema version " + std::to_string(version) + " is newer than this broker's (" +
                         std::to_string(kSchemaVersion) + ")");
    // Version v's statements are kSchemas[v - 1]; each version applied is recorded.
    constexpr const char* kSchemas[] = {kSchemaV1, kSchemaV2, kSchemaV3, kSchemaV4, kSchemaV5, kSchemaV6};
    static_assert(std::size(kSchemas) == static_cast<size_t>(kSchemaVersion));
    for (int v = version + 1; v <= kSchemaVersion; ++v) {
      RETURN_IF_ERROR(Exec(kSchemas[v - 1]));
      RETURN_IF_ERROR(Stmt(*stmts_, "INSERT INTO schema_migrations VALUES (?1, unixepoch())").Int(1, v).Run());
    }
    return txn.Commit();
  });
}

Status Store::IntegrityCheck() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(*stmts_, "PRAGMA integrity_check");
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return Internal("state store: integrity_check returned nothing");
  std::string r = s.ColText(0);
  if (r != "ok") return InvalidInput("state store: integrity check failed: " + r);
  return OkStatus();
}

Status Store::PutChallenge(const PendingChallenge& c) {
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt s(*stmts_, "INSERT INTO challenges VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    s.Text(1, c.challenge_id).Text(2, c.host_id).Text(3, c.enrolment_bundle).Blob(4, c.secret_sha256);
    s.Blob(5, c.ek_cert_sha256).Int(6, c.created_at).Int(7, c.expires_at);
    RETURN_IF_ERROR(s.Run());
    return txn.Commit();
  });
}

Result<PendingChallenge> Store::TakeChallenge(const std::string& challenge_id, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Result<PendingChallenge> {
    Stmt s(*stmts_,
           "SELECT host_id, enrolment_bundle, secret_sha256, ek_cert_sha256, created_at, expires_at FROM challenges "
           "WHERE challenge_id = ?1");
    s.Text(1, challenge_id);
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return NotFound("no pending enrolment challenge " + challenge_id);
    PendingChallenge c;
    c.challenge_id = challenge_id;
    c.host_id = s.ColText(0);
    c.enrolment_bundle = s.ColText(1);
    ASSIGN_OR_RETURN(c.secret_sha256, s.ColDigest(2, "secret_sha256"));
    ASSIGN_OR_RETURN(c.ek_cert_sha256, s.ColDigest(3, "ek_cert_sha256"));
    c.created_at = s.ColInt(4);
    c.expires_at = s.ColInt(5);
    RETURN_IF_ERROR(Stmt(*stmts_, "DELETE FROM challenges WHERE challenge_id = ?1").Text(1, challenge_id).Run());
    RETURN_IF_ERROR(txn.Commit());
    if (now >= c.expires_at) return FailedPrecondition("enrolment challenge " + challenge_id + " expired");
    return c;
  });
}

Status Store::UpsertHost(const HostRecord& h, const std::vector<std::string>& tpm_keys) {
  return WriteDurably([&](Txn& txn) -> Status {
    // Revocation is checked in the transaction that stores the host: a revocation of this
    // TPM committed before it refuses the enrolment.
    ASSIGN_OR_RETURN(std::optional<std::string> revoked, RevokedLinkLocked(h.host_id, tpm_keys));
    if (revoked) {
      return PermissionDenied("host " + h.host_id +
                              (*revoked == h.host_id ? "" : " shares a TPM with host " + *revoked) + " is revoked");
    }
    RETURN_IF_ERROR(LinkTpmKeysLocked(h.host_id, tpm_keys, h.enrolled_at));
    // The AK name is unique: an AK re-enrolled under another host id is refused by the index.
    Stmt s(
        *stmts_,
        "INSERT INTO hosts (host_id, ek_public, ek_cert_sha256, ak_public, ak_name, enrolment_bundle, clock_state, "
        "enrolled_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT(host_id) DO UPDATE SET "
        "ek_public = excluded.ek_public, ek_cert_sha256 = excluded.ek_cert_sha256, ak_public = excluded.ak_public, "
        "ak_name = excluded.ak_name, enrolment_bundle = excluded.enrolment_bundle, enrolled_at = excluded.enrolled_at");
    s.Text(1, h.host_id).Blob(2, h.ek_public).Blob(3, h.ek_cert_sha256).Blob(4, h.ak_public).Blob(5, h.ak_name);
    s.Text(6, h.enrolment_bundle).Text(7, h.clock_state).Int(8, h.enrolled_at);
    RETURN_IF_ERROR(s.Run());
    return txn.Commit();
  });
}

namespace {
constexpr const char* kHostColumns =
    "host_id, ek_public, ek_cert_sha256, ak_public, ak_name, enrolment_bundle, clock_state, enrolled_at";
Result<HostRecord> ReadHost(Stmt& s) {
  HostRecord h;
  h.host_id = s.ColText(0);
  h.ek_public = s.ColBlob(1);
  ASSIGN_OR_RETURN(h.ek_cert_sha256, s.ColDigest(2, "ek_cert_sha256"));
  h.ak_public = s.ColBlob(3);
  h.ak_name = s.ColBlob(4);
  h.enrolment_bundle = s.ColText(5);
  h.clock_state = s.ColText(6);
  h.enrolled_at = s.ColInt(7);
  return h;
}
}  // namespace

Result<HostRecord> Store::GetHost(const std::string& host_id) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = std::string("SELECT ") + kHostColumns + " FROM hosts WHERE host_id = ?1";
  Stmt s(*stmts_, sql.c_str());
  s.Text(1, host_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return NotFound("host " + host_id + " is not enrolled");
  return ReadHost(s);
}

Result<std::vector<HostRecord>> Store::ListHosts() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = std::string("SELECT ") + kHostColumns + " FROM hosts ORDER BY host_id";
  Stmt s(*stmts_, sql.c_str());
  std::vector<HostRecord> out;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(HostRecord h, ReadHost(s));
    out.push_back(std::move(h));
  }
  return out;
}

Result<std::optional<std::string>> Store::HostIdForAkName(const std::vector<uint8_t>& ak_name) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(*stmts_, "SELECT host_id FROM hosts WHERE ak_name = ?1");
  s.Blob(1, ak_name);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(s.ColText(0));
}

Status Store::UpdateClockState(const std::string& host_id, const std::string& expected, const std::string& clock) {
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt s(*stmts_, "UPDATE hosts SET clock_state = ?1 WHERE host_id = ?2 AND clock_state = ?3");
    s.Text(1, clock).Text(2, host_id).Text(3, expected);
    RETURN_IF_ERROR(s.Run());
    if (sqlite3_changes(db_) != 1)
      return FailedPrecondition("host " + host_id + ": clock state changed concurrently (or host unknown)");
    return txn.Commit();
  });
}

Status Store::PutNonce(const NonceRecord& n) {
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt s(*stmts_, "INSERT INTO nonces (nonce, host_id, issued_at, expires_at) VALUES (?1, ?2, ?3, ?4)");
    s.Blob(1, n.nonce).Text(2, n.host_id).Int(3, n.issued_at).Int(4, n.expires_at);
    RETURN_IF_ERROR(s.Run());
    return txn.Commit();
  });
}

Status Store::PutNonceForRequest(const NonceRecord& n, const attest::ClockInfo& clock,
                                 const crypto::Digest256& request_digest, int64_t window_ms) {
  if (clock.clock > static_cast<uint64_t>(INT64_MAX - window_ms))
    return PermissionDenied("nonce request: TPM clock " + std::to_string(clock.clock) + " is out of range");
  const int64_t at = static_cast<int64_t>(clock.clock);
  const std::vector<uint8_t> digest(request_digest.begin(), request_digest.end());
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt newest(*stmts_, "SELECT reset_count, restart_count, clock FROM request_clocks WHERE host_id = ?1");
    newest.Text(1, n.host_id);
    ASSIGN_OR_RETURN(bool known, newest.Step());
    bool new_boot = !known;
    int64_t high = at;
    if (known) {
      const auto boot =
          std::make_pair(static_cast<int64_t>(clock.reset_count), static_cast<int64_t>(clock.restart_count));
      const auto newest_boot = std::make_pair(newest.ColInt(0), newest.ColInt(1));
      const int64_t newest_clock = newest.ColInt(2);
      if (boot < newest_boot)
        return PermissionDenied("nonce request: signed in an earlier TPM boot (reset " + std::to_string(boot.first) +
                                ", restart " + std::to_string(boot.second) +
                                ") than this host's newest request (reset " + std::to_string(newest_boot.first) +
                                ", restart " + std::to_string(newest_boot.second) + "): stale or replayed");
      new_boot = boot > newest_boot;
      if (!new_boot && at + window_ms < newest_clock)
        return PermissionDenied("nonce request: its TPM clock is " + std::to_string(newest_clock - at) +
                                " ms behind this host's newest request (window " + std::to_string(window_ms) +
                                " ms): stale or replayed");
      if (!new_boot) high = std::max(at, newest_clock);
    }
    if (new_boot)
      RETURN_IF_ERROR(Stmt(*stmts_, "DELETE FROM nonce_requests WHERE host_id = ?1").Text(1, n.host_id).Run());
    Stmt seen(*stmts_, "SELECT 1 FROM nonce_requests WHERE host_id = ?1 AND digest = ?2");
    seen.Text(1, n.host_id).Blob(2, digest);
    ASSIGN_OR_RETURN(bool replayed, seen.Step());
    if (replayed) return PermissionDenied("nonce request: this signed request was used before (replayed)");
    RETURN_IF_ERROR(Stmt(*stmts_, "INSERT INTO nonce_requests (host_id, digest, clock) VALUES (?1, ?2, ?3)")
                        .Text(1, n.host_id).Blob(2, digest).Int(3, at).Run());
    RETURN_IF_ERROR(Stmt(*stmts_, "INSERT OR REPLACE INTO request_clocks (host_id, reset_count, restart_count, clock) "
                              "VALUES (?1, ?2, ?3, ?4)")
                        .Text(1, n.host_id).Int(2, clock.reset_count).Int(3, clock.restart_count).Int(4, high).Run());
    RETURN_IF_ERROR(Stmt(*stmts_, "DELETE FROM nonce_requests WHERE host_id = ?1 AND clock < ?2")
                        .Text(1, n.host_id).Int(2, high - window_ms).Run());
    Stmt put(*stmts_, "INSERT INTO nonces (nonce, host_id, issued_at, expires_at) VALUES (?1, ?2, ?3, ?4)");
    put.Blob(1, n.nonce).Text(2, n.host_id).Int(3, n.issued_at).Int(4, n.expires_at);
    RETURN_IF_ERROR(put.Run());
    return txn.Commit();
  });
}

Result<NonceRecord> Store::ConsumeNonce(const std::vector<uint8_t>& nonce, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Result<NonceRecord> {
    Stmt s(*stmts_, "SELECT host_id, issued_at, expires_at, used_at FROM nonces WHERE nonce = ?1");
    s.Blob(1, nonce);
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return NotFound("nonce " + HexEncode(nonce) + " was not issued by this broker");
    NonceRecord n;
    n.nonce = nonce;
    n.host_id = s.ColText(0);
    n.issued_at = s.ColInt(1);
    n.expires_at = s.ColInt(2);
    bool used = !s.ColNull(3);
    if (used) return FailedPrecondition("nonce " + HexEncode(nonce) + " was already used");
    RETURN_IF_ERROR(Stmt(*stmts_, "UPDATE nonces SET used_at = ?1 WHERE nonce = ?2").Int(1, now).Blob(2, nonce).Run());
    RETURN_IF_ERROR(txn.Commit());
    if (now >= n.expires_at) return FailedPrecondition("nonce " + HexEncode(nonce) + " expired");
    return n;
  });
}

Result<int64_t> Store::PurgeExpired(int64_t now, int64_t keep_s) {
  return WriteDurably([&](Txn& txn) -> Result<int64_t> {
    RETURN_IF_ERROR(Stmt(*stmts_, "DELETE FROM challenges WHERE expires_at <= ?1").Int(1, now).Run());
    int64_t n = sqlite3_changes(db_);
    RETURN_IF_ERROR(Stmt(*stmts_, "DELETE FROM nonces WHERE expires_at <= ?1").Int(1, now - keep_s).Run());
    n += sqlite3_changes(db_);
    RETURN_IF_ERROR(txn.Commit());
    return n;
  });
}

Status Store::LinkTpmKeysLocked(const std::string& host_id, const std::vector<std::string>& tpm_keys, int64_t now) {
  for (const std::string& k : tpm_keys) {
    RETURN_IF_ERROR(Stmt(*stmts_, "INSERT OR IGNORE INTO tpm_keys VALUES (?1, ?2, ?3)")
                        .Text(1, k)
                        .Text(2, host_id)
                        .Int(3, now)
                        .Run());
  }
  return OkStatus();
}

Status Store::LinkTpmKeys(const std::string& host_id, const std::vector<std::string>& tpm_keys, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Status {
    RETURN_IF_ERROR(LinkTpmKeysLocked(host_id, tpm_keys, now));
    return txn.Commit();
  });
}

Result<std::optional<std::string>> Store::RevokedLinkLocked(const std::string& host_id,
                                                            const std::vector<std::string>& tpm_keys) {
  Stmt s(*stmts_, kRevokedLinkSql);
  s.Text(1, host_id).Text(2, nlohmann::json(tpm_keys).dump());
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(s.ColText(0));
}

Result<std::optional<std::string>> Store::RevokedTpmLink(const std::string& host_id,
                                                         const std::vector<std::string>& tpm_keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return RevokedLinkLocked(host_id, tpm_keys);
}

Result<int64_t> Store::Revoke(RevokedKind kind, const std::string& id, const std::string& reason, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Result<int64_t> {
    Stmt s(*stmts_, "INSERT OR IGNORE INTO revocations VALUES (?1, ?2, ?3, ?4)");
    s.Text(1, KindName(kind)).Text(2, id).Text(3, reason).Int(4, now);
    RETURN_IF_ERROR(s.Run());
    // A host revocation ends the leases of every host id of the same TPM.
    const char* end_sql =
        kind == RevokedKind::kHost
            ? kEndLinkedLeasesSql
            : "UPDATE leases SET ended_at = ?1, end_reason = ?2 WHERE job_id = ?3 AND ended_at IS NULL";
    RETURN_IF_ERROR(
        Stmt(*stmts_, end_sql).Int(1, now).Text(2, KindName(kind) + " revoked: " + reason).Text(3, id).Run());
    const int64_t ended = sqlite3_changes(db_);
    RETURN_IF_ERROR(txn.Commit());
    return ended;
  });
}

Result<bool> Store::IsRevokedLocked(RevokedKind kind, const std::string& id) {
  if (kind == RevokedKind::kHost) {
    ASSIGN_OR_RETURN(std::optional<std::string> revoked, RevokedLinkLocked(id, {}));
    return revoked.has_value();
  }
  Stmt s(*stmts_, "SELECT 1 FROM revocations WHERE kind = ?1 AND subject_id = ?2");
  s.Text(1, KindName(kind)).Text(2, id);
  return s.Step();
}

Result<bool> Store::IsRevoked(RevokedKind kind, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return IsRevokedLocked(kind, id);
}

Status Store::CheckNotRevokedLocked(const std::string& host_id, const std::string& job_id) {
  ASSIGN_OR_RETURN(bool host_revoked, IsRevokedLocked(RevokedKind::kHost, host_id));
  if (host_revoked) return PermissionDenied("host " + host_id + " is revoked");
  ASSIGN_OR_RETURN(bool job_revoked, IsRevokedLocked(RevokedKind::kJob, job_id));
  if (job_revoked) return PermissionDenied("job " + job_id + " is revoked");
  return OkStatus();
}

namespace {
constexpr const char* kJobColumns =
    "job_id, job_digest, world_size, key_nonce, key_wrapped, created_at, binding, ended_at, end_reason";
Result<JobRecord> ReadJob(Stmt& s) {
  JobRecord j;
  j.job_id = s.ColText(0);
  ASSIGN_OR_RETURN(j.job_digest, s.ColDigest(1, "job_digest"));
  j.world_size = static_cast<uint32_t>(s.ColInt(2));
  j.key_nonce = s.ColBlob(3);
  j.key_wrapped = s.ColBlob(4);
  j.created_at = s.ColInt(5);
  j.binding = s.ColText(6);
  if (!s.ColNull(7)) j.ended_at = s.ColInt(7);
  j.end_reason = s.ColText(8);
  return j;
}

constexpr const char* kLeaseColumns =
    "lease_id, host_id, job_id, rank, policy_id, policy_sha256, recipient, datasets, issued_at, valid_until, "
    "reattest_by, ended_at, end_reason, address, report_key, reported_at, claims, undelivered";
Result<LeaseRecord> ReadLease(Stmt& s) {
  LeaseRecord l;
  l.lease_id = s.ColText(0);
  l.host_id = s.ColText(1);
  l.job_id = s.ColText(2);
  l.rank = static_cast<uint32_t>(s.ColInt(3));
  l.policy_id = s.ColText(4);
  ASSIGN_OR_RETURN(l.policy_sha256, s.ColDigest(5, "policy_sha256"));
  l.recipient = s.ColBlob(6);
  auto datasets = nlohmann::json::parse(s.ColText(7), nullptr, false);
  if (!datasets.is_array()) return InvalidInput("state store: lease " + l.lease_id + ": bad datasets column");
  for (const auto& d : datasets) {
    if (!d.is_string()) return InvalidInput("state store: lease " + l.lease_id + ": bad datasets column");
    l.datasets.push_back(d.get<std::string>());
  }
  l.issued_at = s.ColInt(8);
  l.valid_until = s.ColInt(9);
  l.reattest_by = s.ColInt(10);
  if (!s.ColNull(11)) l.ended_at = s.ColInt(11);
  l.end_reason = s.ColText(12);
  l.address = s.ColText(13);
  l.report_key = s.ColBlob(14);
  if (!s.ColNull(15)) l.reported_at = s.ColInt(15);
  l.claims = s.ColText(16);
  l.undelivered = s.ColInt(17) != 0;
  return l;
}

constexpr const char* kPolicyColumns =
    "policy_id, serial, policy_sha256, policy_text, signature_text, signer, activated_at";
Result<PolicyRecord> ReadPolicy(Stmt& s) {
  PolicyRecord p;
  p.policy_id = s.ColText(0);
  p.serial = static_cast<uint64_t>(s.ColInt(1));
  ASSIGN_OR_RETURN(p.policy_sha256, s.ColDigest(2, "policy_sha256"));
  p.policy_text = s.ColText(3);
  p.signature_text = s.ColText(4);
  p.signer = s.ColBlob(5);
  p.activated_at = s.ColInt(6);
  return p;
}
}  // namespace

Result<JobRecord> Store::GetOrCreateJob(const JobRecord& c) {
  return WriteDurably([&](Txn& txn) -> Result<JobRecord> {
    {
      Stmt s(*stmts_, (std::string("SELECT ") + kJobColumns + " FROM jobs WHERE job_id = ?1").c_str());
      s.Text(1, c.job_id);
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (row) return ReadJob(s);  // nothing written: the transaction rolls back
    }
    Stmt ins(*stmts_,
             "INSERT INTO jobs (job_id, job_digest, world_size, key_nonce, key_wrapped, created_at, binding) "
             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    ins.Text(1, c.job_id).Blob(2, c.job_digest).Int(3, c.world_size).Blob(4, c.key_nonce).Blob(5, c.key_wrapped);
    ins.Int(6, c.created_at).Text(7, c.binding);
    RETURN_IF_ERROR(ins.Run());
    RETURN_IF_ERROR(txn.Commit());
    return c;
  });
}

Result<std::optional<JobRecord>> Store::GetJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(*stmts_, (std::string("SELECT ") + kJobColumns + " FROM jobs WHERE job_id = ?1").c_str());
  s.Text(1, job_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<JobRecord>();
  ASSIGN_OR_RETURN(JobRecord j, ReadJob(s));
  return std::optional<JobRecord>(std::move(j));
}

Status Store::EndJob(const std::string& job_id, const std::string& reason, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt s(*stmts_, "UPDATE jobs SET ended_at = ?1, end_reason = ?2 WHERE job_id = ?3 AND ended_at IS NULL");
    s.Int(1, now).Text(2, reason).Text(3, job_id);
    RETURN_IF_ERROR(s.Run());
    return txn.Commit();
  });
}

Result<Store::JobLeaseCounts> Store::CountLeasesOfJob(const std::string& job_id, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(*stmts_,
         "SELECT count(*) FILTER (WHERE undelivered = 0), count(*) FILTER (WHERE ended_at IS NULL AND valid_until > ?2 "
         "AND reattest_by > ?2) FROM leases WHERE job_id = ?1");
  s.Text(1, job_id).Int(2, now);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return JobLeaseCounts{};
  return JobLeaseCounts{s.ColInt(0), s.ColInt(1)};
}

Status Store::PutLease(const LeaseRecord& l, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Status {
    // In the transaction that inserts the lease: a revocation acknowledged before this
    // commit refuses the lease; one after it ends the lease.
    RETURN_IF_ERROR(CheckNotRevokedLocked(l.host_id, l.job_id));
    {
      Stmt s(*stmts_,
             "SELECT host_id FROM leases WHERE job_id = ?1 AND rank = ?2 AND ended_at IS NULL AND valid_until > ?3 "
             "AND reattest_by > ?3 AND host_id != ?4 LIMIT 1");
      s.Text(1, l.job_id).Int(2, l.rank).Int(3, now).Text(4, l.host_id);
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (row)
        return AlreadyExists("rank " + std::to_string(l.rank) + " of job " + l.job_id + " is held by host " +
                             s.ColText(0));
    }
    Stmt s(*stmts_, (std::string("INSERT INTO leases (") + kLeaseColumns +
                 ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, NULL, '', '', ?12, NULL, ?13, 0)")
                    .c_str());
    s.Text(1, l.lease_id).Text(2, l.host_id).Text(3, l.job_id).Int(4, l.rank).Text(5, l.policy_id);
    s.Blob(6, l.policy_sha256).Blob(7, l.recipient).Text(8, nlohmann::json(l.datasets).dump());
    s.Int(9, l.issued_at).Int(10, l.valid_until).Int(11, l.reattest_by).Blob(12, l.report_key).Text(13, l.claims);
    RETURN_IF_ERROR(s.Run());
    return txn.Commit();
  });
}

Result<LeaseRecord> Store::GetLease(const std::string& lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(*stmts_, (std::string("SELECT ") + kLeaseColumns + " FROM leases WHERE lease_id = ?1").c_str());
  s.Text(1, lease_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return NotFound("no lease " + lease_id);
  return ReadLease(s);
}

Result<std::vector<LeaseRecord>> Store::ListLeases(bool all, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = std::string("SELECT ") + kLeaseColumns + " FROM leases" +
                    (all ? "" : " WHERE ended_at IS NULL AND valid_until > ?1 AND reattest_by > ?1") +
                    " ORDER BY issued_at, lease_id";
  Stmt s(*stmts_, sql.c_str());
  if (!all) s.Int(1, now);
  std::vector<LeaseRecord> out;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(LeaseRecord l, ReadLease(s));
    out.push_back(std::move(l));
  }
  return out;
}

Result<std::vector<LeaseRecord>> Store::ActiveLeasesOfJob(const std::string& job_id, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(*stmts_, (std::string("SELECT ") + kLeaseColumns +
               " FROM leases WHERE job_id = ?1 AND ended_at IS NULL AND valid_until > ?2 AND reattest_by > ?2 "
               "ORDER BY rank, issued_at")
                  .c_str());
  s.Text(1, job_id).Int(2, now);
  std::vector<LeaseRecord> out;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(LeaseRecord l, ReadLease(s));
    out.push_back(std::move(l));
  }
  return out;
}

Result<std::vector<uint32_t>> Store::RanksJoined(const std::string& job_id, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(*stmts_,
         "SELECT DISTINCT rank FROM leases WHERE job_id = ?1 AND ended_at IS NULL AND valid_until > ?2 AND "
         "reattest_by > ?2 ORDER BY rank");
  s.Text(1, job_id).Int(2, now);
  std::vector<uint32_t> out;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(static_cast<uint32_t>(s.ColInt(0)));
  }
  return out;
}

Result<int64_t> Store::RenewLease(const std::string& lease_id, int64_t reattest_by, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Result<int64_t> {
    Stmt q(*stmts_,
           "SELECT host_id, job_id, reattest_by FROM leases WHERE lease_id = ?1 AND ended_at IS NULL AND "
           "valid_until > ?2 AND reattest_by > ?2");
    q.Text(1, lease_id).Int(2, now);
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return FailedPrecondition("lease " + lease_id + " is no longer active");
    const std::string host_id = q.ColText(0), job_id = q.ColText(1);
    const int64_t previous = q.ColInt(2);
    RETURN_IF_ERROR(CheckNotRevokedLocked(host_id, job_id));
    Stmt s(*stmts_, "UPDATE leases SET reattest_by = ?1 WHERE lease_id = ?2");
    s.Int(1, reattest_by).Text(2, lease_id);
    RETURN_IF_ERROR(s.Run());
    if (sqlite3_changes(db_) != 1) return FailedPrecondition("lease " + lease_id + " is no longer active");
    RETURN_IF_ERROR(txn.Commit());
    return previous;
  });
}

Status Store::UndoRenewal(const std::string& lease_id, int64_t renewed, int64_t previous) {
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt s(*stmts_, "UPDATE leases SET reattest_by = ?1 WHERE lease_id = ?2 AND reattest_by = ?3");
    s.Int(1, std::min(previous, renewed)).Text(2, lease_id).Int(3, renewed);
    RETURN_IF_ERROR(s.Run());
    return txn.Commit();
  });
}

Status Store::EndLease(const std::string& lease_id, const std::string& reason, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt s(*stmts_, "UPDATE leases SET ended_at = ?1, end_reason = ?2 WHERE lease_id = ?3 AND ended_at IS NULL");
    s.Int(1, now).Text(2, reason).Text(3, lease_id);
    RETURN_IF_ERROR(s.Run());
    return txn.Commit();
  });
}

Status Store::EndUndeliveredLease(const std::string& lease_id, const std::string& reason, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt s(*stmts_,
           "UPDATE leases SET undelivered = 1, end_reason = CASE WHEN ended_at IS NULL THEN ?2 ELSE end_reason END, "
           "ended_at = coalesce(ended_at, ?1) WHERE lease_id = ?3");
    s.Int(1, now).Text(2, reason).Text(3, lease_id);
    RETURN_IF_ERROR(s.Run());
    return txn.Commit();
  });
}

Status Store::MarkReported(const std::string& lease_id, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt s(*stmts_, "UPDATE leases SET reported_at = ?1 WHERE lease_id = ?2 AND reported_at IS NULL");
    s.Int(1, now).Text(2, lease_id);
    RETURN_IF_ERROR(s.Run());
    if (sqlite3_changes(db_) != 1) return FailedPrecondition("the report of lease " + lease_id + " was already logged");
    return txn.Commit();
  });
}

Status Store::SetLeaseAddress(const std::string& lease_id, const std::string& address, int64_t now) {
  return WriteDurably([&](Txn& txn) -> Status {
    Stmt s(*stmts_,
           "UPDATE leases SET address = ?1 WHERE lease_id = ?2 AND ended_at IS NULL AND valid_until > ?3 AND "
           "reattest_by > ?3");
    s.Text(1, address).Text(2, lease_id).Int(3, now);
    RETURN_IF_ERROR(s.Run());
    if (sqlite3_changes(db_) != 1) return FailedPrecondition("lease " + lease_id + " is no longer active");
    return txn.Commit();
  });
}

Status Store::PutPolicy(const PolicyRecord& p) {
  return WriteDurably([&](Txn& txn) -> Status {
    {
      Stmt s(*stmts_, "SELECT max(serial) FROM policies WHERE policy_id = ?1");
      s.Text(1, p.policy_id);
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (row && !s.ColNull(0) && static_cast<uint64_t>(s.ColInt(0)) >= p.serial)
        return AlreadyExists("policy " + p.policy_id + " already has serial " + std::to_string(s.ColInt(0)) +
                             "; activate a higher serial");
    }
    Stmt s(*stmts_, "INSERT INTO policies VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    s.Text(1, p.policy_id).Int(2, static_cast<int64_t>(p.serial)).Blob(3, p.policy_sha256).Text(4, p.policy_text);
    s.Text(5, p.signature_text).Blob(6, p.signer).Int(7, p.activated_at);
    RETURN_IF_ERROR(s.Run());
    return txn.Commit();
  });
}

Result<PolicyRecord> Store::GetActivePolicy(const std::string& policy_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(*stmts_, (std::string("SELECT ") + kPolicyColumns +
               " FROM policies WHERE policy_id = ?1 ORDER BY serial DESC LIMIT 1")
                  .c_str());
  s.Text(1, policy_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return NotFound("no data-use policy '" + policy_id + "' is active");
  return ReadPolicy(s);
}

Result<std::vector<PolicyRecord>> Store::ListActivePolicies() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(*stmts_, (std::string("SELECT ") + kPolicyColumns +
               " FROM policies p WHERE serial = (SELECT max(serial) FROM policies q WHERE q.policy_id = p.policy_id) "
               "ORDER BY policy_id")
                  .c_str());
  std::vector<PolicyRecord> out;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(PolicyRecord p, ReadPolicy(s));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace enclave::broker
