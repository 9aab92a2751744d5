#include "enclave/audit/tiles.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "enclave/audit/record.h"
#include "enclave/common/files.h"

namespace enclave::audit {
namespace {

// The tile index as zero-padded 3-digit path elements, all but the last prefixed "x".
std::string EncodeIndex(uint64_t index) {
  std::vector<unsigned> groups;
  do {
    groups.push_back(static_cast<unsigned>(index % 1000));
    index /= 1000;
  } while (index > 0);
  std::string out;
  for (size_t i = groups.size(); i-- > 0;) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%s%03u", i > 0 ? "x" : "", groups[i]);
    out += buf;
    if (i > 0) out += '/';
  }
  return out;
}

// A decimal number without leading zeroes, at most `max`.
bool ParseSmallDecimal(std::string_view s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 3 || (s.size() > 1 && s[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

bool IsThreeDigits(std::string_view s) {
  return s.size() == 3 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Hashes per tile row at `level` in a tree of `size` entries (nodes of height 8 * level).
uint64_t NodesAtLevel(uint64_t size, int level) {
  const int shift = kTileHeight * level;
  return shift >= 64 ? 0 : size >> shift;
}

Status WriteAll(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("writing " + path, errno);
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

// Spares are empty (moved ones) or a replaced checkpoint: this bounds inodes, not bytes.
constexpr size_t kMaxSpareFiles = 4096;

Status MakeParents(const std::string& root, const std::string& rel) {
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
    const std::string dir = root + "/" + rel.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("creating tile directory " + dir, errno);
  }
  return OkStatus();
}

}  // namespace

std::string TilePath(const TileId& tile) {
  std::string out = "tile/" + (tile.entries ? std::string("entries") : std::to_string(tile.level)) + "/" +
                    EncodeIndex(tile.index);
  if (tile.width < kTileWidth) out += ".p/" + std::to_string(tile.width);
  return out;
}

Result<TileId> ParseTilePath(std::string_view path) {
  auto bad = [&](const char* why) {
    return InvalidInput("tile path '" + std::string(path.substr(0, 200)) + "': " + why);
  };
  if (path.size() > 100) return bad("too long");
  if (!path.starts_with("tile/")) return bad("does not start with tile/");
  std::string_view rest = path.substr(5);
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return bad("no index");
  TileId t;
  const std::string_view level = rest.substr(0, slash);
  uint64_t v = 0;
  if (level == "entries") {
    t.entries = true;
  } else if (ParseSmallDecimal(level, kMaxTileLevel, &v)) {
    t.level = static_cast<int>(v);
  } else {
    return bad("level is not 'entries' or 0..63 without leading zeroes");
  }
  rest = rest.substr(slash + 1);
  std::string_view width;
  if (const size_t p = rest.find(".p/"); p != std::string_view::npos) {
    width = rest.substr(p + 3);
    rest = rest.substr(0, p);
    if (!ParseSmallDecimal(width, kTileWidth - 1, &v) || v == 0) return bad("partial width is not 1..255");
    t.width = static_cast<uint32_t>(v);
  }
  // Elements "xDDD/" ... "DDD"; at most 7 (20 decimal digits hold any u64).
  uint64_t index = 0;
  for (int elements = 1;; ++elements) {
    if (elements > 7) return bad("index has too many elements");
    const size_t next = rest.find('/');
    const std::string_view element = rest.substr(0, next);
    const bool last = next == std::string_view::npos;
    const std::string_view digits = last ? element : (element.starts_with('x') ? element.substr(1) : "");
    if (!IsThreeDigits(digits)) return bad(last ? "last index element is not three digits" : "index element is not xDDD");
    const auto group = static_cast<uint64_t>((digits[0] - '0') * 100 + (digits[1] - '0') * 10 + (digits[2] - '0'));
    if (index > (UINT64_MAX - group) / 1000) return bad("index does not fit 64 bits");
    index = index * 1000 + group;
    if (last) break;
    rest = rest.substr(next + 1);
  }
  t.index = index;
  // One spelling per tile: "x000/001" or a leading zero element is not how TilePath writes it.
  if (TilePath(t) != path) return bad("not in canonical form");
  return t;
}

std::vector<TileId> TilesOfTree(uint64_t tree_size) {
  std::vector<TileId> out;
  for (int level = 0; level <= kMaxTileLevel; ++level) {
    const uint64_t nodes = NodesAtLevel(tree_size, level);
    if (nodes == 0) break;
    for (uint64_t n = 0; n < nodes / kTileWidth; ++n) out.push_back(TileId{false, level, n, kTileWidth});
    if (nodes % kTileWidth != 0)
      out.push_back(TileId{false, level, nodes / kTileWidth, static_cast<uint32_t>(nodes % kTileWidth)});
  }
  for (uint64_t n = 0; n < tree_size / kTileWidth; ++n) out.push_back(TileId{true, 0, n, kTileWidth});
  if (tree_size % kTileWidth != 0)
    out.push_back(TileId{true, 0, tree_size / kTileWidth, static_cast<uint32_t>(tree_size % kTileWidth)});
  return out;
}

Status AppendToBundle(std::span<const uint8_t> entry, std::vector<uint8_t>* bundle) {
  if (entry.empty() || entry.size() > kMaxBundledEntryBytes) {
    return InvalidInput("an entry of " + std::to_string(entry.size()) +
                        " bytes does not fit an entry bundle (1..65535 bytes)");
  }
  bundle->push_back(static_cast<uint8_t>(entry.size() >> 8));
  bundle->push_back(static_cast<uint8_t>(entry.size()));
  bundle->insert(bundle->end(), entry.begin(), entry.end());
  return OkStatus();
}

Result<std::vector<std::span<const uint8_t>>> ParseEntryBundle(std::span<const uint8_t> bundle) {
  std::vector<std::span<const uint8_t>> out;
  size_t pos = 0;
  while (pos < bundle.size()) {
    if (out.size() == kTileWidth) return InvalidInput("entry bundle: more than 256 entries");
    if (bundle.size() - pos < 2) return InvalidInput("entry bundle: a length prefix is cut short at byte " + std::to_string(pos));
    const size_t len = (size_t{bundle[pos]} << 8) | bundle[pos + 1];
    if (len == 0) return InvalidInput("entry bundle: an empty entry at byte " + std::to_string(pos));
    if (bundle.size() - pos - 2 < len) {
      return InvalidInput("entry bundle: the entry at byte " + std::to_string(pos) + " runs past the end");
    }
    out.push_back(bundle.subspan(pos + 2, len));
    pos += 2 + len;
  }
  if (out.empty()) return InvalidInput("entry bundle: empty");
  return out;
}

Status TileWriter::PutFile(const std::string& rel, std::span<const uint8_t> bytes, bool compare) {
  const std::string path = dir_ + "/" + rel;
  if (compare) {
    auto have = ReadWholeFile(path, bytes.size());
    if (have.ok() && std::equal(have->begin(), have->end(), bytes.begin(), bytes.end())) return OkStatus();
  }
  // One writer holds the log's flock, so a fixed temporary name cannot collide.
  const size_t slash = path.rfind('/');
  const std::string temp = path.substr(0, slash + 1) + "." + path.substr(slash + 1) + ".tmp";
  auto open_temp = [&] {  // a spare's inode when there is one, else a new file
    if (TakeSpare(temp)) {
      const int f = ::open(temp.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
      if (f >= 0) return f;
    }
    return ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  };
  int fd = open_temp();
  if (fd < 0 && errno == ENOENT) {
    RETURN_IF_ERROR(MakeParents(dir_, rel));
    fd = open_temp();
  }
  if (fd < 0) return ErrnoStatus("creating " + temp, errno);
  Status s = WriteAll(fd, bytes, temp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoStatus("closing " + temp, errno);
  if (s.ok()) (void)KeepAsSpare(path, /*move=*/false);  // the file this one replaces, if any
  // Readers see the old file or the new one, never a part.
  if (s.ok() && ::rename(temp.c_str(), path.c_str()) != 0) s = ErrnoStatus("renaming " + temp, errno);
  if (!s.ok()) ::unlink(temp.c_str());
  return s;
}

bool TileWriter::TakeSpare(const std::string& temp) {
  if (spares_.empty() || std::chrono::steady_clock::now() - spares_.front().since < spare_min_age_) return false;
  const std::string spare = spare_dir_ + "/" + spares_.front().name;
  if (::rename(spare.c_str(), temp.c_str()) == 0) {
    spares_.pop_front();
    return true;
  }
  // The temporary's folder may not exist yet (a new tile's .p folder): the caller makes it.
  if (errno != ENOENT || ::access(spare.c_str(), F_OK) != 0) spares_.pop_front();  // gone or unusable
  return false;
}

Status TileWriter::KeepAsSpare(const std::string& path, bool move) {
  auto remove = [&]() -> Status {  // a moved file that cannot be kept is deleted, as before spares
    if (move && ::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("removing " + path, errno);
    return OkStatus();
  };
  if (spares_.size() >= kMaxSpareFiles) return remove();
  const std::string name = std::to_string(next_spare_);
  const std::string spare = spare_dir_ + "/" + name;
  if (move ? ::rename(path.c_str(), spare.c_str()) != 0 : ::link(path.c_str(), spare.c_str()) != 0) return remove();
  ++next_spare_;
  // A moved file is emptied now, so that spares hold no data; a linked one is still the
  // live file until the rename that follows replaces it. Either way a reader that opened
  // it before has spare_min_age_ to finish before the inode is written again.
  if (move) (void)::truncate(spare.c_str(), 0);
  spares_.push_back({name, std::chrono::steady_clock::now()});
  return OkStatus();
}

// The spare folder, made if missing; what an earlier writer left there is taken as spares
// (old enough: no reader of that writer's files is still at them).
Status TileWriter::AdoptSpares() {
  if (::mkdir(spare_dir_.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("creating " + spare_dir_, errno);
  DIR* d = ::opendir(spare_dir_.c_str());
  if (d == nullptr) return ErrnoStatus("opening " + spare_dir_, errno);
  std::vector<uint64_t> numbers;
  std::vector<std::string> other;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (!n.empty() && n.size() <= 19 && n.find_first_not_of("0123456789") == std::string::npos) {
      numbers.push_back(std::stoull(n));
    } else {
      other.push_back(n);
    }
  }
  ::closedir(d);
  for (const std::string& n : other) ::unlink((spare_dir_ + "/" + n).c_str());  // not ours: never reused
  std::sort(numbers.begin(), numbers.end());
  for (uint64_t n : numbers) {
    if (spares_.size() < kMaxSpareFiles) {
      spares_.push_back({std::to_string(n), std::chrono::steady_clock::time_point{}});
    } else {
      ::unlink((spare_dir_ + "/" + std::to_string(n)).c_str());
    }
  }
  next_spare_ = numbers.empty() ? 0 : numbers.back() + 1;
  return OkStatus();
}

Status TileWriter::Put(const TileId& tile, std::span<const uint8_t> bytes, bool compare) {
  return PutFile(TilePath(tile), bytes, compare);
}

Status TileWriter::RemovePartials(const TileId& full) {
  const std::string dir = dir_ + "/" + TilePath(full) + ".p";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return errno == ENOENT ? OkStatus() : ErrnoStatus("opening " + dir, errno);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  for (const std::string& n : names) {
    RETURN_IF_ERROR(KeepAsSpare(dir + "/" + n, /*move=*/true));
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("removing " + dir, errno);
  return OkStatus();
}

void TileWriter::PlanHashTiles(const MerkleTree& tree, uint64_t old_size, uint64_t size, bool every_partial,
                               TilePlan* plan) const {
  for (int level = 0; level <= kMaxTileLevel; ++level) {
    const uint64_t nodes = NodesAtLevel(size, level);
    if (nodes == 0) break;
    const uint64_t old_nodes = NodesAtLevel(old_size, level);
    std::span<const Hash> row = tree.level(kTileHeight * level);
    auto tile_bytes = [&](uint64_t n, uint32_t width) {
      const uint8_t* first = row[n * kTileWidth].data();
      return std::vector<uint8_t>(first, first + size_t{width} * sizeof(Hash));
    };
    for (uint64_t n = old_nodes / kTileWidth; n < nodes / kTileWidth; ++n) {
      plan->push_back({TileId{false, level, n, kTileWidth}, tile_bytes(n, kTileWidth)});
    }
    const auto width = static_cast<uint32_t>(nodes % kTileWidth);
    if (width != 0 && (every_partial || nodes != old_nodes)) {
      plan->push_back({TileId{false, level, nodes / kTileWidth, width}, tile_bytes(nodes / kTileWidth, width)});
    }
  }
}

Status TileWriter::PlanOpenBundle(TilePlan* plan) {
  std::vector<uint8_t> bundle;
  for (const std::vector<uint8_t>& e : open_) RETURN_IF_ERROR(AppendToBundle(e, &bundle));
  // open_ holds entries [size_ - open_.size(), size_).
  const TileId tile{true, 0, (size_ - 1) / kTileWidth, static_cast<uint32_t>(open_.size())};
  if (open_.size() == kTileWidth) open_.clear();
  plan->push_back({tile, std::move(bundle)});
  return OkStatus();
}

Status TileWriter::Apply(const TilePlan& plan, bool compare) {
  for (const PlannedTile& p : plan) {
    RETURN_IF_ERROR(Put(p.tile, p.bytes, compare));
    // A full tile replaces its partial ones (the spec lets a log delete them then).
    if (p.tile.width == kTileWidth) RETURN_IF_ERROR(RemovePartials(p.tile));
  }
  return OkStatus();
}

Result<TilePlan> TileWriter::Plan(const MerkleTree& tree, std::span<const std::span<const uint8_t>> new_entries) {
  const uint64_t size = size_ + new_entries.size();
  if (tree.size() < size) {
    return Internal("tiles: the tree holds " + std::to_string(tree.size()) + " entries, the tiles need " +
                    std::to_string(size));
  }
  TilePlan plan;
  PlanHashTiles(tree, size_, size, /*every_partial=*/false, &plan);
  for (std::span<const uint8_t> e : new_entries) {
    open_.emplace_back(e.begin(), e.end());
    ++size_;
    if (open_.size() == kTileWidth) RETURN_IF_ERROR(PlanOpenBundle(&plan));
  }
  if (!open_.empty() && !new_entries.empty()) RETURN_IF_ERROR(PlanOpenBundle(&plan));
  return plan;
}

Status TileWriter::Write(const TilePlan& plan, const std::string& checkpoint_note) {
  RETURN_IF_ERROR(Apply(plan, /*compare=*/false));
  // Last: a reader that finds this checkpoint finds every tile it needs.
  if (checkpoint_note.empty()) return OkStatus();
  return PutFile("checkpoint", AsBytes(checkpoint_note), false);
}

Status TileWriter::Publish(const MerkleTree& tree, std::span<const std::span<const uint8_t>> new_entries,
                           const std::string& checkpoint_note) {
  ASSIGN_OR_RETURN(TilePlan plan, Plan(tree, new_entries));
  return Write(plan, checkpoint_note);
}

Result<std::unique_ptr<TileWriter>> TileWriter::Rebuild(const std::string& log_dir, const MerkleTree& tree,
                                                        const std::string& checkpoint_note,
                                                        std::chrono::milliseconds spare_min_age) {
  std::unique_ptr<TileWriter> w(
      new TileWriter(log_dir + "/" + kTilesDirName, log_dir + "/" + kTileSparesDirName, spare_min_age));
  if (::mkdir(w->dir_.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("creating " + w->dir_, errno);
  RETURN_IF_ERROR(w->AdoptSpares());
  const uint64_t final_size = tree.size();
  TilePlan hash_tiles;
  w->PlanHashTiles(tree, 0, final_size, /*every_partial=*/true, &hash_tiles);
  RETURN_IF_ERROR(w->Apply(hash_tiles, /*compare=*/true));
  // Entry bundles from the log itself, and the partial tiles of every earlier checkpoint
  // that still lies in a tile that is partial today (the spec keeps those served).
  std::set<std::pair<int, uint32_t>> partials;  // (level, width) already put
  Hash log_id{};
  ScanEnd end;
  RETURN_IF_ERROR(ScanLogFile(
      log_dir + "/" + kLogFileName, &log_id,
      [&](const RecordView& rec, uint64_t offset) -> Status {
        if (rec.type == RecordType::kEntry) {
          if (w->size_ == final_size) return Internal("tiles: the log holds more entries than its tree");
          if (rec.payload.size() > kMaxBundledEntryBytes) {
            return FailedPrecondition(log_dir + ": entry " + std::to_string(w->size_) + " (offset " +
                                      std::to_string(offset) + ") is " + std::to_string(rec.payload.size()) +
                                      " bytes, more than an entry bundle holds (65535); this log cannot be tiled");
          }
          w->open_.emplace_back(rec.payload.begin(), rec.payload.end());
          ++w->size_;
          if (w->open_.size() != kTileWidth) return OkStatus();
          TilePlan full;
          RETURN_IF_ERROR(w->PlanOpenBundle(&full));
          return w->Apply(full, /*compare=*/true);
        }
        const uint64_t s = w->size_;  // a head covers every entry before it
        if (!w->open_.empty() && s / kTileWidth == final_size / kTileWidth) {
          TilePlan partial;
          RETURN_IF_ERROR(w->PlanOpenBundle(&partial));
          RETURN_IF_ERROR(w->Apply(partial, /*compare=*/true));
        }
        for (int level = 0; level <= kMaxTileLevel; ++level) {
          const uint64_t nodes = NodesAtLevel(s, level), final_nodes = NodesAtLevel(final_size, level);
          if (nodes == 0) break;
          const auto width = static_cast<uint32_t>(nodes % kTileWidth);
          if (width == 0 || nodes / kTileWidth != final_nodes / kTileWidth || !partials.insert({level, width}).second)
            continue;
          std::span<const Hash> row = tree.level(kTileHeight * level);
          const uint64_t n = nodes / kTileWidth;
          RETURN_IF_ERROR(w->Put(TileId{false, level, n, width},
                                 std::span<const uint8_t>(row[n * kTileWidth].data(), width * sizeof(Hash)), true));
        }
        return OkStatus();
      },
      &end));
  if (!end.clean || w->size_ != final_size) {
    return Internal("tiles: " + log_dir + " changed while its tiles were rebuilt");
  }
  RETURN_IF_ERROR(w->PutFile("checkpoint", AsBytes(checkpoint_note), true));
  return w;
}

}  // namespace enclave::audit
