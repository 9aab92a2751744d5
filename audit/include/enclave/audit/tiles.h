// The audit log laid out as C2SP tlog-tiles (c2sp.org/tlog-tiles) in DIR/tiles, beside
// DIR/audit.log: the latest signed checkpoint, the Merkle tree's hash tiles and the entries
// in entry bundles, as plain files that any tlog-tiles client can read offline or that the
// broker serves read-only (docs/formats/audit-log.md, section 13).
//
// The tiles are derived data: audit.log stays the record of truth. They are written after a
// batch is durable in the log and are not fsynced; LogWriter::Open() checks and rebuilds
// them from the log, so a crash costs at most a rewrite.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/audit/merkle.h"
#include "enclave/common/status.h"

namespace enclave::audit {

inline constexpr char kTilesDirName[] = "tiles";
// Beside it: files the tile writer no longer needs (replaced checkpoints, partial tiles
// that a full one replaced), emptied and kept to be rewritten as new tiles instead of
// creating and deleting a file per checkpoint. Not part of the format; safe to delete
// while no writer runs.
inline constexpr char kTileSparesDirName[] = "tiles.spare";
inline constexpr uint32_t kTileWidth = 256;  // hashes per full tile, entries per full bundle
inline constexpr int kTileHeight = 8;        // tree levels a tile spans (256 = 2^8)
inline constexpr int kMaxTileLevel = 63;
// An entry bundle prefixes each entry with a big-endian u16 length.
inline constexpr size_t kMaxBundledEntryBytes = 65535;

// One tile or entry bundle: tile/<level>/<index>[.p/<width>] or tile/entries/<index>[.p/<width>].
struct TileId {
  bool entries = false;   // an entry bundle (then level is 0)
  int level = 0;          // 0 .. 63
  uint64_t index = 0;
  uint32_t width = kTileWidth;  // 1 .. 256; below 256 a partial tile
  bool operator==(const TileId&) const = default;
};

// The path relative to the tiles directory, e.g. "tile/0/x001/x234/067.p/8".
std::string TilePath(const TileId& tile);
// The exact grammar of TilePath (no leading slash; no extra zeroes, no empty or dot
// segments); anything else fails with InvalidInput. For paths from requests.
Result<TileId> ParseTilePath(std::string_view path);

// The tiles and bundles a tree of `tree_size` entries consists of (full ones and the
// partial ones of that size), in level order.
std::vector<TileId> TilesOfTree(uint64_t tree_size);

// An entry bundle: entries each as u16 big-endian length || bytes (1 .. 65535 bytes each).
Status AppendToBundle(std::span<const uint8_t> entry, std::vector<uint8_t>* bundle);
// Splits a bundle; fails on a length running past the end, an empty entry, or more than
// 256 entries. The spans point into `bundle`.
Result<std::vector<std::span<const uint8_t>>> ParseEntryBundle(std::span<const uint8_t> bundle);

// A tile or bundle to write; a full one replaces its partial ones.
struct PlannedTile {
  TileId tile;
  std::vector<uint8_t> bytes;
};
using TilePlan = std::vector<PlannedTile>;

// Keeps DIR/tiles in step with the log. Not thread-safe: one thread at a time (LogWriter's
// tiles thread).
class TileWriter {
 public:
  // Brings DIR/tiles in step with DIR/audit.log (which must be a complete log, as
  // LogWriter::Open leaves it): every tile and bundle of the latest tree and the partial
  // ones of every earlier checkpoint whose tile is still partial, compared with what is on
  // disk and rewritten where it differs or is missing; then the checkpoint.
  // A spare file is reused only once it has been spare for `spare_min_age` (a reader that
  // opened the file before it was replaced has long finished reading it).
  static Result<std::unique_ptr<TileWriter>> Rebuild(const std::string& log_dir, const MerkleTree& tree,
                                                     const std::string& checkpoint_note,
                                                     std::chrono::milliseconds spare_min_age = std::chrono::seconds(1));

  // After a batch of `new_entries` (in log order), whose head `tree` covers (it may hold
  // more): the new full tiles and bundles and the partial ones of the new size, in memory,
  // so that the caller can hold its tree's lock only for this.
  Result<TilePlan> Plan(const MerkleTree& tree, std::span<const std::span<const uint8_t>> new_entries);
  // Writes a plan, removes the partial tiles its full ones replace, then replaces the
  // checkpoint with `checkpoint_note` (unless it is empty).
  Status Write(const TilePlan& plan, const std::string& checkpoint_note);
  // Plan, then Write.
  Status Publish(const MerkleTree& tree, std::span<const std::span<const uint8_t>> new_entries,
                 const std::string& checkpoint_note);

  uint64_t published_size() const { return size_; }
  const std::string& dir() const { return dir_; }
  size_t spare_files() const { return spares_.size(); }

 private:
  TileWriter(std::string dir, std::string spare_dir, std::chrono::milliseconds spare_min_age)
      : dir_(std::move(dir)), spare_dir_(std::move(spare_dir)), spare_min_age_(spare_min_age) {}
  // Writes a file atomically (temporary file, rename); with `compare` only when it is
  // missing or differs.
  Status Put(const TileId& tile, std::span<const uint8_t> bytes, bool compare);
  Status PutFile(const std::string& rel, std::span<const uint8_t> bytes, bool compare);
  Status Apply(const TilePlan& plan, bool compare);
  // The hash tiles that a tree of `size` has and one of `old_size` had not (with
  // `every_partial`, its partial ones even when old_size had them too).
  void PlanHashTiles(const MerkleTree& tree, uint64_t old_size, uint64_t size, bool every_partial,
                     TilePlan* plan) const;
  // The open bundle (entries since the last full one) as a full or partial bundle.
  Status PlanOpenBundle(TilePlan* plan);
  Status RemovePartials(const TileId& full);
  // Why spares: ext4 without a journal skips inodes freed in the last minutes when it
  // allocates one, so with files created and deleted for every checkpoint, creating one
  // came to cost about 200 us and the tile thread half a core in the broker benchmark.
  // Renames a spare old enough to `temp` (false: none, or it failed; then a file is made).
  bool TakeSpare(const std::string& temp);
  // Keeps the file at `path` as a spare: moved there and emptied (`move`: a file to
  // remove, deleted instead when the pool is full), or hard-linked there before a rename
  // replaces it (nothing when there is no such file).
  Status KeepAsSpare(const std::string& path, bool move);
  Status AdoptSpares();

  const std::string dir_;
  const std::string spare_dir_;
  const std::chrono::milliseconds spare_min_age_;
  struct Spare {
    std::string name;
    std::chrono::steady_clock::time_point since;
  };
  std::deque<Spare> spares_;  // oldest first
  uint64_t next_spare_ = 0;
  uint64_t size_ = 0;  // entries the planned tiles cover
  // Entries of the bundle that is not full yet: indexes [size_ - open_.size(), size_).
  std::vector<std::vector<uint8_t>> open_;
};

}  // namespace enclave::audit
