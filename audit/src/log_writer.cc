#include "enclave/audit/log_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "enclave/audit/checkpoint.h"
#include "enclave/audit/record.h"
#include "enclave/common/files.h"
#include "head_chain.h"

namespace enclave::audit {
namespace {

constexpr size_t kMaxQueuedTileBatches = 256;

std::string LogPath(const std::string& dir) { return dir + "/" + kLogFileName; }

}  // namespace

Status LogWriter::Create(const std::string& dir, const LogSigningKey& key) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("creating log directory " + dir, errno);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return InvalidInput(dir + ": not a directory");
  const std::string path = LogPath(dir);
  std::vector<uint8_t> bytes = EncodeFileHeader(key.public_key().log_id);
  ASSIGN_OR_RETURN(SignedTreeHead empty,
                   SignChainedTreeHead(key, TreeHead{0, NowMs(), EmptyTreeHash()}, /*head_index=*/0, Hash{}));
  AppendRecord(RecordType::kChainedTreeHead, EncodeTreeHead(empty), &bytes);
  // Appears only complete (temporary file, fsync, link, directory fsync).
  ASSIGN_OR_RETURN(AtomicOutputFile out, AtomicOutputFile::Create(path, /*allow_overwrite=*/false));
  RETURN_IF_ERROR(out.Write(bytes.data(), bytes.size()));
  return out.Commit();
}

Result<std::unique_ptr<LogWriter>> LogWriter::Open(const std::string& dir, LogSigningKey key, WriterOptions options) {
  const std::string path = LogPath(dir);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening audit log " + path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return FailedPrecondition(path + ": another writer holds the log's lock (flock); only one writer at a time");
    }
    return ErrnoStatus("flock " + path, err);
  }
  std::unique_ptr<LogWriter> w(new LogWriter(dir, fd, std::move(key), std::move(options)));
  RETURN_IF_ERROR(w->Recover());
  if (w->options_.write_tiles) {
    const std::string checkpoint = w->LatestCheckpoint();
    ASSIGN_OR_RETURN(w->tiles_, TileWriter::Rebuild(dir, w->nodes_, checkpoint));
    w->published_ = {w->latest_.head.tree_size, w->latest_.head.root, checkpoint};
    w->last_publish_ = std::chrono::steady_clock::now();  // Rebuild published it
    w->tiles_thread_ = std::thread([raw = w.get()] { raw->TilesLoop(); });
  }
  return w;
}

LogWriter::~LogWriter() {
  if (tiles_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(tiles_mu_);
      tiles_stop_ = true;  // after the queued batches
    }
    tiles_cv_.notify_all();
    tiles_thread_.join();
  }
  ::close(fd_);  // also releases the flock
}

void LogWriter::TilesLoop() {
  std::unique_lock<std::mutex> lk(tiles_mu_);
  for (;;) {
    tiles_cv_.wait(lk, [this] { return tiles_stop_ || !tiles_queue_.empty(); });
    if (tiles_queue_.empty()) return;  // stopping, nothing left
    // One publication per interval, sooner when someone waits for one: rewriting the
    // partial tiles and the checkpoint after every batch had made the tiles the writer's
    // main cost under load.
    tiles_cv_.wait_until(lk, last_publish_ + options_.publish_interval, [this] {
      return tiles_stop_ || tiles_wanted_size_ > published_.tree_size || tiles_queue_.size() >= kMaxQueuedTileBatches;
    });
    std::deque<TileBatch> batches;
    batches.swap(tiles_queue_);
    const bool failed = !tiles_failed_.ok();
    lk.unlock();
    const Status s = failed ? OkStatus() : PublishTiles(batches);
    lk.lock();
    if (!s.ok() && tiles_failed_.ok()) tiles_failed_ = s.Annotate("updating the tiles of " + path_);
    if (!failed && s.ok()) {
      published_ = batches.back().checkpoint;
      publications_ += 1;
    }
    last_publish_ = std::chrono::steady_clock::now();
    tiles_done_ += batches.size();
    tiles_cv_.notify_all();
  }
}

Status LogWriter::PublishTiles(const std::deque<TileBatch>& batches) {
  std::vector<std::span<const uint8_t>> entries;
  for (const TileBatch& b : batches) entries.insert(entries.end(), b.entries.begin(), b.entries.end());
  Result<TilePlan> plan = [&] {
    std::shared_lock<std::shared_mutex> nodes_lock(nodes_mu_);  // appends may go on meanwhile
    return tiles_->Plan(nodes_, entries);
  }();
  if (!plan.ok()) return plan.status();
  // The tiles of the newest tree (and every full tile on the way), then its checkpoint.
  return tiles_->Write(*plan, batches.back().checkpoint.note);
}

Status LogWriter::WaitForTiles() {
  if (!tiles_) return OkStatus();
  std::unique_lock<std::mutex> lk(tiles_mu_);
  const uint64_t target = tiles_queued_;
  tiles_wanted_size_ = std::max(tiles_wanted_size_, tiles_queued_size_);
  tiles_cv_.notify_all();
  tiles_cv_.wait(lk, [&] { return tiles_done_ >= target; });
  return tiles_failed_;
}

Result<PublishedCheckpoint> LogWriter::AwaitPublished(uint64_t min_size, std::chrono::milliseconds wait) {
  if (!tiles_) {
    const SignedTreeHead sth = LatestTreeHead();
    if (sth.head.tree_size < min_size) {
      return FailedPrecondition("the log holds " + std::to_string(sth.head.tree_size) + " entries, not " +
                                std::to_string(min_size));
    }
    ASSIGN_OR_RETURN(std::string note, FormatCheckpointNote(key_.public_key(), sth));
    return PublishedCheckpoint{sth.head.tree_size, sth.head.root, std::move(note)};
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::unique_lock<std::mutex> lk(tiles_mu_);
  if (published_.tree_size < min_size) {
    tiles_wanted_size_ = std::max(tiles_wanted_size_, min_size);
    tiles_cv_.notify_all();
    tiles_cv_.wait_until(lk, deadline,
                         [&] { return published_.tree_size >= min_size || !tiles_failed_.ok() || tiles_stop_; });
  }
  if (!tiles_failed_.ok()) return tiles_failed_;
  if (published_.tree_size < min_size) {
    return Unavailable("no checkpoint of " + std::to_string(min_size) + " entries of " + path_ +
                       " was published within " + std::to_string(wait.count()) + " ms");
  }
  return published_;
}

uint64_t LogWriter::Now() const { return options_.clock_ms ? options_.clock_ms() : NowMs(); }

Status LogWriter::Recover() {
  Hash log_id{};
  ScanEnd end;
  CompactRange tree;
  uint64_t entries_after_head = 0;
  bool have_head = false;
  uint64_t committed_end = 0;
  std::optional<internal::HeadChain> chain;
  std::vector<Hash> after_head;  // leaf hashes since the last head: durable once a head follows
  RETURN_IF_ERROR(ScanLogFile(
      path_, &log_id,
      [&](const RecordView& rec, uint64_t offset) -> Status {
        if (!chain) chain.emplace(end.header_version);
        const std::string at = path_ + ": offset " + std::to_string(offset) + ": ";
        if (rec.type == RecordType::kEntry) {
          if (Status s = chain->OnEntry(); !s.ok()) return AuthFailed(at + s.message() + "; refusing to write");
          after_head.push_back(LeafHash(rec.payload));
          tree.Append(after_head.back());
          ++entries_after_head;
          return OkStatus();
        }
        auto sth = ParseTreeHead(rec.payload);
        if (!sth.ok()) return sth.status().Annotate(path_ + ": tree head at offset " + std::to_string(offset));
        if (sth->head.tree_size != tree.size() || sth->head.root != tree.Root()) {
          return AuthFailed(path_ + ": tree head at offset " + std::to_string(offset) + " (size " +
                            std::to_string(sth->head.tree_size) + ") does not match the " +
                            std::to_string(tree.size()) +
                            " entries before it; the log is damaged or was edited (run enclave-audit verify); "
                            "refusing to write");
        }
        // The chain's links are checked here; the signatures only of the latest head (below).
        if (Status s = chain->OnHead(rec.type, *sth); !s.ok()) return AuthFailed(at + s.message() + "; refusing to write");
        tree_ = tree;
        for (const Hash& h : after_head) nodes_.Append(h);
        after_head.clear();
        latest_ = *sth;
        have_head = true;
        entries_after_head = 0;
        committed_end = offset + rec.size;
        return OkStatus();
      },
      &end));
  if (log_id != key_.public_key().log_id) {
    return PermissionDenied(path_ + ": log was created for log id " + HexEncode(log_id).substr(0, 16) +
                            ", not for this signing key (" + HexEncode(key_.public_key().log_id).substr(0, 16) + ")");
  }
  // What a crash can leave (docs/formats/audit-log.md, section 9): a batch is one pwrite
  // after the previous batch's fdatasync returned, so only the last, unacknowledged batch
  // can be incomplete, and a crash cuts it short: complete records, then at most one record
  // that the end of the file cuts short. A record that is complete but fails its check, bad
  // header bytes, or any valid record after the bad one is damage to bytes that may have been
  // acknowledged: never cut, the operator must look.
  if (!end.clean && end.next_valid_offset != 0) {
    return AuthFailed(path_ + ": record at offset " + std::to_string(end.bad_offset) + " is unreadable (" + end.error +
                      ") but a valid record follows at offset " + std::to_string(end.next_valid_offset) +
                      ": damage inside the log, not a torn tail; refusing to truncate");
  }
  if (!end.clean && !end.incomplete) {
    return AuthFailed(path_ + ": record at offset " + std::to_string(end.bad_offset) + " is damaged (" + end.error +
                      "), and not merely cut short by the end of the file as a crash leaves it: acknowledged data "
                      "may be affected; refusing to open or truncate the log (run enclave-audit verify and "
                      "investigate; see docs/formats/audit-log.md section 9)");
  }
  if (!have_head) return AuthFailed(path_ + ": no readable signed tree head; refusing to write");
  RETURN_IF_ERROR(VerifyTreeHead(key_.public_key(), latest_).Annotate(path_ + ": latest tree head"));
  heads_ = chain->heads();
  latest_hash_ = chain->last_hash();
  end_offset_ = committed_end;
  if (end.file_size > committed_end) {
    recovery_.truncated_bytes = end.file_size - committed_end;
    recovery_.dropped_entries = entries_after_head;
    recovery_.detail = std::to_string(entries_after_head) + " complete entries without a tree head";
    if (!end.clean) {
      recovery_.detail += ", then a torn record at offset " + std::to_string(end.bad_offset) + " (" + end.error + ")";
    }
    if (::ftruncate(fd_, static_cast<off_t>(committed_end)) != 0) {
      return ErrnoStatus("truncating the unacknowledged tail of " + path_, errno);
    }
    if (::fsync(fd_) != 0) return ErrnoStatus("fsync " + path_, errno);
  }
  // A log of an older writer ends with a legacy head: sign a chained head of the same tree
  // now, so that every later head is chained and the latest head is a checkpoint.
  if (!latest_.chained) {
    ASSIGN_OR_RETURN(SignedTreeHead sth,
                     SignChainedTreeHead(key_, TreeHead{tree_.size(), std::max(Now(), latest_.head.timestamp_ms),
                                                        tree_.Root()},
                                         heads_, latest_hash_));
    std::vector<uint8_t> buf;
    AppendRecord(RecordType::kChainedTreeHead, EncodeTreeHead(sth), &buf);
    RETURN_IF_ERROR(WriteDurably(buf));
    latest_ = sth;
    latest_hash_ = TreeHeadRecordHash(sth);
    ++heads_;
  }
  return OkStatus();
}

Status LogWriter::WriteDurably(const std::vector<uint8_t>& buf) {
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = ::pwrite(fd_, buf.data() + done, buf.size() - done, static_cast<off_t>(end_offset_ + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("appending to " + path_, errno);
    }
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync " + path_, errno);
  end_offset_ += buf.size();
  return OkStatus();
}

Status LogWriter::WriteBatch(std::deque<Pending*>& batch) {
  const uint64_t now = std::max(Now(), latest_.head.timestamp_ms);
  const std::string now_text = FormatTimestampMs(now);
  CompactRange tree = tree_;
  std::vector<uint8_t> buf;
  for (Pending* p : batch) {
    if (p->event.time.empty()) p->event.time = now_text;
    auto bytes = SerializeEntry(p->event, tree.size());
    if (!bytes.ok()) {
      p->status = bytes.status();
      continue;
    }
    p->index = tree.size();
    AppendRecord(RecordType::kEntry, *bytes, &buf);
    p->leaf = LeafHash(*bytes);
    tree.Append(p->leaf);
    p->bytes = std::move(*bytes);
  }
  if (buf.empty()) return OkStatus();
  ASSIGN_OR_RETURN(SignedTreeHead sth,
                   SignChainedTreeHead(key_, TreeHead{tree.size(), now, tree.Root()}, heads_, latest_hash_));
  AppendRecord(RecordType::kChainedTreeHead, EncodeTreeHead(sth), &buf);
  RETURN_IF_ERROR(WriteDurably(buf));
  std::vector<std::span<const uint8_t>> written;
  {
    std::unique_lock<std::shared_mutex> nodes_lock(nodes_mu_);
    for (Pending* p : batch) {
      if (!p->status.ok()) continue;
      nodes_.Append(p->leaf);
      written.emplace_back(p->bytes);
    }
  }
  tree_ = tree;
  heads_ += 1;
  latest_hash_ = TreeHeadRecordHash(sth);
  {
    std::lock_guard<std::mutex> lk(mu_);
    latest_ = sth;
    stats_.batches += 1;
  }
  if (tiles_) {
    // The batch is durable: from here on, a failure stops the writer but not this batch.
    auto note = FormatCheckpointNote(key_.public_key(), sth);
    TileBatch t;
    if (note.ok()) {
      t.checkpoint = {sth.head.tree_size, sth.head.root, std::move(*note)};
      for (std::span<const uint8_t> e : written) t.entries.emplace_back(e.begin(), e.end());
    }
    std::unique_lock<std::mutex> lk(tiles_mu_);
    // Bounded: when the tiles fall this far behind, appends wait for them.
    tiles_cv_.wait(lk, [this] { return tiles_queue_.size() < kMaxQueuedTileBatches || !tiles_failed_.ok(); });
    if (!note.ok()) {
      if (tiles_failed_.ok()) tiles_failed_ = note.status().Annotate("the checkpoint for the tiles of " + path_);
    } else {
      tiles_queue_.push_back(std::move(t));
      ++tiles_queued_;
      tiles_queued_size_ = sth.head.tree_size;
      tiles_cv_.notify_all();
    }
  }
  return OkStatus();
}

Result<uint64_t> LogWriter::Append(Event event, std::vector<uint8_t>* entry_bytes) {
  RETURN_IF_ERROR(ValidateEvent(event));
  Pending p;
  p.event = std::move(event);
  std::unique_lock<std::mutex> lk(mu_);
  queue_.push_back(&p);
  while (!p.done) {
    if (flushing_) {
      p.wake.wait(lk);
      continue;
    }
    flushing_ = true;
    std::deque<Pending*> batch;
    while (!queue_.empty() && batch.size() < std::max<size_t>(options_.max_batch, 1)) {
      batch.push_back(queue_.front());
      queue_.pop_front();
    }
    Status s = failed_;
    if (s.ok() && tiles_) {
      std::lock_guard<std::mutex> tiles_lock(tiles_mu_);
      if (!tiles_failed_.ok()) s = failed_ = tiles_failed_;  // the writer stops with its tiles
    }
    if (s.ok()) {
      lk.unlock();
      s = WriteBatch(batch);
      lk.lock();
      if (!s.ok()) failed_ = s;
    } else {
      s = FailedPrecondition("the writer stopped after an earlier failure (" + failed_.message() +
                             "); reopen the log to recover");
    }
    for (Pending* b : batch) {
      if (!s.ok()) b->status = s;
      else if (b->status.ok()) stats_.appended += 1;
      b->done = true;
      if (b != &p) b->wake.notify_one();
    }
    flushing_ = false;
    // The first appender still queued flushes the next batch (it takes the others along).
    if (!queue_.empty()) queue_.front()->wake.notify_one();
  }
  if (!p.status.ok()) return p.status;
  if (entry_bytes != nullptr) *entry_bytes = std::move(p.bytes);
  return p.index;
}

Result<std::vector<Hash>> LogWriter::InclusionProof(uint64_t index, uint64_t tree_size) const {
  std::shared_lock<std::shared_mutex> lock(nodes_mu_);
  return nodes_.InclusionProof(index, tree_size);
}

Result<std::vector<Hash>> LogWriter::ConsistencyProof(uint64_t first, uint64_t second) const {
  std::shared_lock<std::shared_mutex> lock(nodes_mu_);
  return nodes_.ConsistencyProof(first, second);
}

SignedTreeHead LogWriter::LatestTreeHead() const {
  std::lock_guard<std::mutex> lk(mu_);
  return latest_;
}

std::string LogWriter::LatestCheckpoint() const {
  // Recover() leaves a chained latest head and WriteBatch signs only chained ones.
  auto note = FormatCheckpointNote(key_.public_key(), LatestTreeHead());
  return note.ok() ? *note : std::string();
}

WriterStats LogWriter::stats() const {
  WriterStats s;
  {
    std::lock_guard<std::mutex> lk(mu_);
    s = stats_;
  }
  if (!tiles_) {
    s.published = s.batches;
  } else {
    std::lock_guard<std::mutex> lk(tiles_mu_);
    s.published = publications_;
  }
  return s;
}

}  // namespace enclave::audit
