// The one writer of an audit log directory.
//
// Append() returns only when the entry and a signed tree head covering it are on disk
// (write + fdatasync): an acknowledged entry survives a crash. Concurrent appenders are
// batched (group commit): while one batch is being written and synced, the next one
// collects, and a whole batch costs one write, one signature and one fdatasync.
//
// Open() recovers after a crash by cutting only what a crash can leave after the last
// tree-head record: complete entries whose batch never got its head, then at most one record
// that the end of the file cuts short (shorter than its declared length, every header byte
// present correct). Anything else there -- a complete record that fails its check, bad
// header bytes, zeros, a damaged record followed by anything valid -- may be damage to
// acknowledged data: Open() fails with kAuthFailed naming the offset and leaves the file
// untouched (docs/formats/audit-log.md, section 9). Callers must report recovery() when it
// cut something. An exclusive flock on the log file keeps a second writer (another
// process, or another LogWriter in this one) out.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "enclave/audit/event.h"
#include "enclave/audit/merkle.h"
#include "enclave/audit/record.h"
#include "enclave/audit/tiles.h"
#include "enclave/audit/tree_head.h"
#include "enclave/common/status.h"

namespace enclave::audit {

struct WriterOptions {
  size_t max_batch = 8192;  // entries per group commit
  // Keep DIR/tiles (C2SP tlog-tiles, tiles.h) in step with the published checkpoints.
  bool write_tiles = true;
  // With tiles, a checkpoint is published (its tiles, then DIR/tiles/checkpoint written) at
  // most this often, unless someone waits for one (WaitForTiles, AwaitPublished): the
  // batches signed in between are published together, as the newest one's checkpoint.
  std::chrono::milliseconds publish_interval{50};
  // For tests: the clock that stamps entries and tree heads (Unix ms).
  std::function<uint64_t()> clock_ms;
};

struct RecoveryReport {
  uint64_t truncated_bytes = 0;   // cut off as a torn or unacknowledged tail
  uint64_t dropped_entries = 0;   // complete entries after the last tree head (never acknowledged)
  std::string detail;             // what was found at the tail, when something was cut
};

struct WriterStats {
  uint64_t appended = 0;
  uint64_t batches = 0;  // = fdatasync calls = tree heads written
  uint64_t published = 0;  // checkpoints published (with tiles; = batches without)
};

// A checkpoint the writer has published: its tree's tiles are on disk (with tiles), so any
// tlog-tiles client can check it. Only published checkpoints leave the writer's process.
struct PublishedCheckpoint {
  uint64_t tree_size = 0;
  Hash root{};
  std::string note;  // C2SP signed note (checkpoint.h)
};

class LogWriter {
 public:
  // Creates DIR (mode 0700) if needed and a new log with a signed head of the empty tree.
  static Status Create(const std::string& dir, const LogSigningKey& key);
  static Result<std::unique_ptr<LogWriter>> Open(const std::string& dir, LogSigningKey key, WriterOptions options = {});
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // Validates, appends, and returns the entry's index once it is durable and signed;
  // `entry_bytes`, when given, receives the entry as written (its leaf is LeafHash of them).
  Result<uint64_t> Append(Event event, std::vector<uint8_t>* entry_bytes = nullptr);

  SignedTreeHead LatestTreeHead() const;
  // The latest head as a C2SP signed checkpoint note (checkpoint.h). Every head this writer
  // signs is chained; a log of an older writer gets a chained head when it is opened.
  std::string LatestCheckpoint() const;
  // The tlog-tiles directory this writer keeps, or "" without tiles. A thread of the writer
  // updates it after each batch, off the appenders' path: WaitForTiles() returns once the
  // tiles show every batch acknowledged before the call, with the tiles' status.
  std::string tiles_dir() const { return tiles_ ? tiles_->dir() : std::string(); }
  Status WaitForTiles();
  // The newest published checkpoint of a tree of at least `min_size` entries, asking for it
  // to be published at once; Unavailable after `wait`, or the tiles' failure. Without tiles
  // every signed head is published as it is signed.
  Result<PublishedCheckpoint> AwaitPublished(uint64_t min_size, std::chrono::milliseconds wait);
  // Proofs over the durable, signed log (tree sizes up to the latest head's), from every
  // node kept in memory (MerkleTree: 64 bytes per entry): O(log n) each, safe to call
  // while others append.
  Result<std::vector<Hash>> InclusionProof(uint64_t index, uint64_t tree_size) const;
  Result<std::vector<Hash>> ConsistencyProof(uint64_t first, uint64_t second) const;
  const RecoveryReport& recovery() const { return recovery_; }
  WriterStats stats() const;
  const std::string& path() const { return path_; }
  const LogPublicKey& public_key() const { return key_.public_key(); }

 private:
  struct Pending {
    Event event;
    uint64_t index = 0;
    std::vector<uint8_t> bytes;
    Hash leaf{};
    bool done = false;
    Status status;
    // Its appender waits here: woken when its batch is done, or to flush the next one
    // (one wake-up each, not every appender on every batch).
    std::condition_variable wake;
  };
  LogWriter(std::string dir, int fd, LogSigningKey key, WriterOptions options)
      : dir_(dir), path_(dir + "/" + kLogFileName), fd_(fd), key_(std::move(key)), options_(std::move(options)) {}
  Status Recover();
  Status WriteBatch(std::deque<Pending*>& batch);
  // Appends `buf` at the end and makes it durable.
  Status WriteDurably(const std::vector<uint8_t>& buf);
  uint64_t Now() const;

  const std::string dir_;
  const std::string path_;
  const int fd_;
  const LogSigningKey key_;
  const WriterOptions options_;
  RecoveryReport recovery_;

  mutable std::mutex mu_;
  std::deque<Pending*> queue_;
  bool flushing_ = false;
  Status failed_;  // set after an I/O failure: no more appends until reopened
  // Owned by the flushing thread (flushing_ == true), read under mu_ otherwise.
  uint64_t end_offset_ = 0;
  CompactRange tree_;
  SignedTreeHead latest_;
  uint64_t heads_ = 0;     // tree-head records in the file
  Hash latest_hash_{};     // TreeHeadRecordHash(latest_): the next head's `previous`
  WriterStats stats_;
  // The durable entries' tree; appended after each batch's fdatasync.
  mutable std::shared_mutex nodes_mu_;
  MerkleTree nodes_;
  // The tiles thread: batches queue here (entries copied, with their checkpoint). A failure
  // to update the tiles stops the writer (acknowledged entries are durable in the log;
  // reopening rebuilds the tiles).
  struct TileBatch {
    std::vector<std::vector<uint8_t>> entries;
    PublishedCheckpoint checkpoint;
  };
  void TilesLoop();
  // Writes the tiles of `batches` (in log order) and publishes the last one's checkpoint.
  Status PublishTiles(const std::deque<TileBatch>& batches);
  std::unique_ptr<TileWriter> tiles_;  // used by the tiles thread only, once started
  mutable std::mutex tiles_mu_;
  std::condition_variable tiles_cv_;
  std::deque<TileBatch> tiles_queue_;
  uint64_t tiles_queued_ = 0, tiles_done_ = 0;  // batches
  uint64_t tiles_queued_size_ = 0;  // tree size of the newest queued batch
  uint64_t tiles_wanted_size_ = 0;  // a waiter wants a published tree this large: publish now
  PublishedCheckpoint published_;
  uint64_t publications_ = 0;
  std::chrono::steady_clock::time_point last_publish_{};
  bool tiles_stop_ = false;
  Status tiles_failed_;
  std::thread tiles_thread_;
};

}  // namespace enclave::audit
