// The log as C2SP tlog-tiles (audit/include/enclave/audit/tiles.h, docs/formats/audit-log.md
// section 13): paths, the tile set of a tree, entry bundles, and the writer keeping DIR/tiles
// in step with every checkpoint and rebuilding it on open. Tile contents are checked against
// MTH computed from the leaves (RootFromLeafHashes), not against the writer's own nodes.
#include "enclave/audit/tiles.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <set>

#include "audit_test_util.h"
#include "enclave/audit/checkpoint.h"

namespace enclave::audit {
namespace {

using testing::MakeLog;
using testing::ReadBytes;
using testing::SampleEvent;
using testing::ScratchDir;
using testing::WriteBytes;
namespace fs = std::filesystem;

TEST(TilePathTest, WritesTheSpecsForm) {
  EXPECT_EQ(TilePath({false, 0, 1234067, 256}), "tile/0/x001/x234/067");
  EXPECT_EQ(TilePath({true, 0, 1234067, 8}), "tile/entries/x001/x234/067.p/8");
  EXPECT_EQ(TilePath({false, 2, 0, 1}), "tile/2/000.p/1");
  EXPECT_EQ(TilePath({false, 63, 1000, 255}), "tile/63/x001/000.p/255");
  EXPECT_EQ(TilePath({false, 0, UINT64_MAX, 256}), "tile/0/x018/x446/x744/x073/x709/x551/615");
}

TEST(TilePathTest, ParsesExactlyTheCanonicalForm) {
  for (uint64_t index : {uint64_t{0}, uint64_t{1}, uint64_t{999}, uint64_t{1000}, uint64_t{1234067}, UINT64_MAX}) {
    for (uint32_t width : {1u, 17u, 255u, 256u}) {
      for (bool entries : {false, true}) {
        const TileId t{entries, entries ? 0 : 5, index, width};
        auto back = ParseTilePath(TilePath(t));
        ASSERT_TRUE(back.ok()) << TilePath(t) << ": " << back.status().ToString();
        EXPECT_EQ(*back, t) << TilePath(t);
      }
    }
  }
  for (const char* bad :
       {"", "tile", "tile/", "tile/0", "tile/0/", "/tile/0/000", "tile/00/000", "tile/64/000", "tile/-1/000",
        "tile/0/1", "tile/0/0000", "tile/0/x000/001", "tile/0/x001", "tile/0/001/", "tile/0/y001/000",
        "tile/0/x1000/000", "tile/0/000.p/0", "tile/0/000.p/256", "tile/0/000.p/01", "tile/0/000.p/", "tile/0/000.p",
        "tile/0/000.p/5/", "tile/0/../000", "tile/0/./000", "tile/entries/000.p/x", "tile/Entries/000",
        "tile/0/x018/x446/x744/x073/x709/x551/616", "tile/0/x001/x000/x000/x000/x000/x000/x000/000",
        "tile/0/000?x", "tile//000", "checkpoint"}) {
    EXPECT_FALSE(ParseTilePath(bad).ok()) << "accepted '" << bad << "'";
  }
}

TEST(TilesOfTreeTest, MatchesTheSpecsExamples) {
  // c2sp.org/tlog-tiles: 70,000 entries are 273 full level-0 tiles and one of width 112,
  // one full level-1 tile and one of width 17, one level-2 tile of width 1 (and the bundles).
  std::map<std::pair<bool, int>, std::vector<TileId>> by_level;
  for (const TileId& t : TilesOfTree(70000)) by_level[{t.entries, t.level}].push_back(t);
  auto at = [&](bool entries, int level) -> const std::vector<TileId>& { return by_level[{entries, level}]; };
  ASSERT_EQ(by_level.size(), 4u);
  ASSERT_EQ(at(false, 0).size(), 274u);
  EXPECT_EQ(at(false, 0).back(), (TileId{false, 0, 273, 112}));
  ASSERT_EQ(at(false, 1).size(), 2u);
  EXPECT_EQ(at(false, 1).back(), (TileId{false, 1, 1, 17}));
  ASSERT_EQ(at(false, 2).size(), 1u);
  EXPECT_EQ(at(false, 2)[0], (TileId{false, 2, 0, 1}));
  ASSERT_EQ(at(true, 0).size(), 274u);
  EXPECT_EQ(at(true, 0).back(), (TileId{true, 0, 273, 112}));
  // "A tree of size 256 will be represented by a full level 0 tile and a partial level 1 tile of width 1."
  const std::vector<TileId> t256 = TilesOfTree(256);
  EXPECT_EQ(t256, (std::vector<TileId>{{false, 0, 0, 256}, {false, 1, 0, 1}, {true, 0, 0, 256}}));
  EXPECT_TRUE(TilesOfTree(0).empty());
}

TEST(EntryBundleTest, LengthPrefixedEntriesAndTheirLimits) {
  std::vector<uint8_t> bundle;
  const std::vector<uint8_t> a(300, 'a'), b{'b'}, max(65535, 'm'), too_long(65536, 'x');
  ASSERT_TRUE(AppendToBundle(a, &bundle).ok());
  ASSERT_TRUE(AppendToBundle(b, &bundle).ok());
  ASSERT_TRUE(AppendToBundle(max, &bundle).ok());
  EXPECT_EQ(bundle[0], 0x01);  // 300 = 0x012c, big-endian
  EXPECT_EQ(bundle[1], 0x2c);
  EXPECT_FALSE(AppendToBundle(too_long, &bundle).ok());
  EXPECT_FALSE(AppendToBundle({}, &bundle).ok());
  auto parsed = ParseEntryBundle(bundle);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_TRUE(std::equal((*parsed)[0].begin(), (*parsed)[0].end(), a.begin(), a.end()));
  EXPECT_TRUE(std::equal((*parsed)[2].begin(), (*parsed)[2].end(), max.begin(), max.end()));
  std::vector<uint8_t> cut(bundle.begin(), bundle.end() - 1);
  EXPECT_FALSE(ParseEntryBundle(cut).ok());
  std::vector<uint8_t> odd = bundle;
  odd.push_back(0x00);
  EXPECT_FALSE(ParseEntryBundle(odd).ok());
  EXPECT_FALSE(ParseEntryBundle(std::vector<uint8_t>{0x00, 0x00}).ok());
  EXPECT_FALSE(ParseEntryBundle(std::vector<uint8_t>{}).ok());
  std::vector<uint8_t> many;
  for (int i = 0; i < 257; ++i) ASSERT_TRUE(AppendToBundle(b, &many).ok());
  EXPECT_FALSE(ParseEntryBundle(many).ok());
}

// MTH over leaves[begin, end), from the leaf hashes alone.
Hash Mth(const std::vector<Hash>& leaves, uint64_t begin, uint64_t end) {
  return RootFromLeafHashes(std::span<const Hash>(leaves).subspan(begin, end - begin));
}

// What tile `t` must hold in a tree with these leaves (tlog-tiles' formula).
std::vector<uint8_t> ExpectedHashTile(const std::vector<Hash>& leaves, const TileId& t) {
  const uint64_t span = uint64_t{1} << (8 * t.level);
  std::vector<uint8_t> out;
  for (uint64_t i = 0; i < t.width; ++i) {
    const uint64_t begin = (t.index * 256 + i) * span;
    const Hash h = Mth(leaves, begin, begin + span);
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

std::vector<uint8_t> ExpectedBundle(const std::vector<std::vector<uint8_t>>& entries, const TileId& t) {
  std::vector<uint8_t> out;
  for (uint64_t i = 0; i < t.width; ++i) EXPECT_TRUE(AppendToBundle(entries[t.index * 256 + i], &out).ok());
  return out;
}

void ExpectTilesOf(const fs::path& tiles, const std::vector<std::vector<uint8_t>>& entries, uint64_t size) {
  std::vector<Hash> leaves;
  for (uint64_t i = 0; i < size; ++i) leaves.push_back(LeafHash(entries[i]));
  for (const TileId& t : TilesOfTree(size)) {
    const fs::path file = tiles / TilePath(t);
    ASSERT_TRUE(fs::exists(file)) << file;
    EXPECT_EQ(ReadBytes(file.string()), t.entries ? ExpectedBundle(entries, t) : ExpectedHashTile(leaves, t)) << file;
  }
}

std::map<std::string, std::vector<uint8_t>> Snapshot(const fs::path& dir) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = ReadBytes(e.path().string());
  }
  return out;
}

// Above level 0, without writing 65,536 log entries one by one: the tile writer fed directly.
TEST(TileWriterTest, WritesEveryLevelAndKeepsThePartialsOfEarlierCheckpoints) {
  testing::TestLog log = MakeLog("tiles-levels");
  MerkleTree tree;
  auto w = TileWriter::Rebuild(log.dir.string(), tree, "checkpoint 0\n");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::vector<std::vector<uint8_t>> entries;
  const fs::path tiles = log.dir / kTilesDirName;
  for (uint64_t step : {1000, 68000, 1000}) {
    std::vector<std::span<const uint8_t>> batch;
    const size_t first = entries.size();
    for (uint64_t i = 0; i < step; ++i) {
      const std::string e = "entry " + std::to_string(entries.size());
      entries.emplace_back(e.begin(), e.end());
      tree.Append(LeafHash(entries.back()));
    }
    for (size_t i = first; i < entries.size(); ++i) batch.emplace_back(entries[i]);
    const std::string note = "checkpoint " + std::to_string(entries.size()) + "\n";
    ASSERT_TRUE((*w)->Publish(tree, batch, note).ok());
    EXPECT_EQ(ReadBytes((tiles / "checkpoint").string()), std::vector<uint8_t>(note.begin(), note.end()));
    ExpectTilesOf(tiles, entries, entries.size());
  }
  // At 69,000: level 1 had 269 hashes, the partial tile/1/001.p/13; at 70,000 that tile is
  // still partial (width 17), so the older partial stays, a prefix of the newer one.
  const auto p13 = ReadBytes((tiles / "tile/1/001.p/13").string());
  const auto p17 = ReadBytes((tiles / "tile/1/001.p/17").string());
  ASSERT_EQ(p13.size(), 13u * 32);
  EXPECT_TRUE(std::equal(p13.begin(), p13.end(), p17.begin()));
  // Partials whose full tile now exists are gone: level 0 at 1,000 (tile 3) and 69,000
  // (tile 269), level 1 at 1,000 (tile 0), bundle 3.
  for (const char* gone : {"tile/0/003.p", "tile/0/269.p", "tile/1/000.p", "tile/entries/003.p"}) {
    EXPECT_FALSE(fs::exists(tiles / gone)) << gone;
  }
  EXPECT_TRUE(fs::exists(tiles / "tile/2/000.p/1"));
  // Nothing else lies around: every file is a tile of some checkpoint or the checkpoint.
  for (const auto& [rel, bytes] : Snapshot(tiles)) {
    EXPECT_TRUE(rel == "checkpoint" || ParseTilePath(rel).ok()) << rel;
  }
}

// Files replaced (the checkpoint) or removed (partials a full tile replaces) are kept as
// spares and rewritten as later tiles: after the first checkpoints the writer makes no new
// inode, and every tile still holds what it must (a spare is reused here at once: age 0).
TEST(TileWriterTest, RecyclesReplacedFilesInsteadOfMakingNewOnes) {
  testing::TestLog log = MakeLog("tiles-spares");
  MerkleTree tree;
  auto w = TileWriter::Rebuild(log.dir.string(), tree, "checkpoint 0\n", std::chrono::milliseconds(0));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const fs::path tiles = log.dir / kTilesDirName, spares = log.dir / kTileSparesDirName;
  std::vector<std::vector<uint8_t>> entries;
  std::set<ino_t> inodes;  // every inode a tile or the checkpoint ever had
  for (int i = 0; i < 1100; ++i) {  // one entry per checkpoint: 4 full tiles and bundles
    const std::string e = "entry " + std::to_string(i);
    entries.emplace_back(e.begin(), e.end());
    tree.Append(LeafHash(entries.back()));
    std::vector<std::span<const uint8_t>> batch{entries.back()};
    const std::string note = "checkpoint " + std::to_string(entries.size()) + "\n";
    ASSERT_TRUE((*w)->Publish(tree, batch, note).ok());
    for (const auto& f : fs::recursive_directory_iterator(tiles)) {
      if (!f.is_regular_file()) continue;
      struct stat st {};
      ASSERT_EQ(::stat(f.path().c_str(), &st), 0);
      inodes.insert(st.st_ino);
    }
    if (i % 97 == 0 || i == 255 || i == 256 || i == 1099) {
      ExpectTilesOf(tiles, entries, entries.size());
      EXPECT_EQ(ReadBytes((tiles / "checkpoint").string()), std::vector<uint8_t>(note.begin(), note.end()));
    }
  }
  ExpectTilesOf(tiles, entries, entries.size());
  // Without spares each checkpoint makes 3 files (a hash tile, a bundle, the checkpoint):
  // over 3,300 inodes. With them the writer needs about as many as it ever holds at once:
  // the 255 + 255 partials of an open tile and bundle (every earlier checkpoint's stay
  // until the tile is full), the full tiles, the checkpoint and a few in between.
  EXPECT_LT(inodes.size(), 800u) << "replaced files were not reused";
  EXPECT_GT((*w)->spare_files(), 0u);
  // Nothing but spares in the spare folder, and they are empty or a replaced checkpoint.
  for (const auto& f : fs::directory_iterator(spares)) {
    EXPECT_LE(fs::file_size(f.path()), 64u) << f.path();
  }
}

size_t FilesIn(const fs::path& dir) {
  size_t n = 0;
  for (const auto& f : fs::directory_iterator(dir)) n += f.is_regular_file() ? 1 : 0;
  return n;
}

TEST(LogWriterTilesTest, KeptInStepWithEveryCheckpointAndRebuiltOnOpen) {
  testing::TestLog log = MakeLog("tiles-writer");
  const fs::path tiles = log.dir / kTilesDirName;
  std::vector<std::vector<uint8_t>> entries;
  {
    auto w = LogWriter::Open(log.dir.string(), log.Key());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ((*w)->tiles_dir(), tiles.string());
    for (uint64_t i = 0; i < 300; ++i) {  // one batch, so one checkpoint, each
      entries.emplace_back();
      auto idx = (*w)->Append(SampleEvent(i), &entries.back());
      ASSERT_TRUE(idx.ok()) << idx.status().ToString();
      ASSERT_TRUE((*w)->WaitForTiles().ok());
      const std::string cp = (*w)->LatestCheckpoint();
      ASSERT_EQ(ReadBytes((tiles / "checkpoint").string()), std::vector<uint8_t>(cp.begin(), cp.end()));
      if (i == 0 || i == 255 || i == 256 || i == 299) ExpectTilesOf(tiles, entries, i + 1);
    }
  }
  // Every checkpoint 257..300 lies in tile 1, still partial: all its partials are served.
  for (int w = 1; w <= 44; ++w) {
    EXPECT_TRUE(fs::exists(tiles / ("tile/0/001.p/" + std::to_string(w)))) << w;
    EXPECT_TRUE(fs::exists(tiles / ("tile/entries/001.p/" + std::to_string(w)))) << w;
  }
  EXPECT_FALSE(fs::exists(tiles / "tile/0/000.p"));
  const auto before = Snapshot(tiles);
  // Tile 0's 255 + 255 partials went to the spares when it filled up.
  const size_t spares_before = FilesIn(log.dir / kTileSparesDirName);
  EXPECT_GE(spares_before, 255u);

  // Damage what a crash or an operator could: a full tile gone, a partial bundle changed,
  // an earlier checkpoint's partial gone, a level-1 tile zeroed, the checkpoint gone.
  fs::remove(tiles / "tile/0/000");
  std::vector<uint8_t> bundle = ReadBytes((tiles / "tile/entries/001.p/44").string());
  bundle[10] ^= 1;
  WriteBytes((tiles / "tile/entries/001.p/44").string(), bundle);
  fs::remove(tiles / "tile/0/001.p/20");
  WriteBytes((tiles / "tile/1/000.p/1").string(), std::vector<uint8_t>(32, 0));
  fs::remove(tiles / "checkpoint");
  {
    auto w = LogWriter::Open(log.dir.string(), log.Key());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }
  EXPECT_EQ(Snapshot(tiles), before);
  // The reopened writer took the spares over (and used a few of them for the repairs).
  EXPECT_GE(FilesIn(log.dir / kTileSparesDirName) + 8, spares_before);
  // And from nothing.
  fs::remove_all(tiles);
  {
    auto w = LogWriter::Open(log.dir.string(), log.Key());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }
  EXPECT_EQ(Snapshot(tiles), before);
}

// Publication: the batches of one interval are published together, as the newest one's
// checkpoint, with that tree's tiles; a waiter (AwaitPublished, WaitForTiles) gets one at once.
TEST(LogWriterTilesTest, BatchesArePublishedTogetherAndAtOnceForAWaiter) {
  testing::TestLog log = MakeLog("tiles-publish");
  const fs::path tiles = log.dir / kTilesDirName;
  WriterOptions o;
  o.publish_interval = std::chrono::hours(1);
  auto w = LogWriter::Open(log.dir.string(), log.Key(), o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::string empty_checkpoint = (*w)->LatestCheckpoint();
  std::vector<std::vector<uint8_t>> entries;
  for (uint64_t i = 0; i < 40; ++i) {  // 40 batches
    entries.emplace_back();
    ASSERT_TRUE((*w)->Append(SampleEvent(i), &entries.back()).ok());
  }
  // Nothing asked for a publication within the hour: the tiles still show the empty tree.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(ReadBytes((tiles / "checkpoint").string()), std::vector<uint8_t>(empty_checkpoint.begin(), empty_checkpoint.end()));
  EXPECT_EQ((*w)->stats().batches, 40u);
  EXPECT_EQ((*w)->stats().published, 0u);
  auto published = (*w)->AwaitPublished(40, std::chrono::seconds(10));
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(published->tree_size, 40u);
  EXPECT_EQ(published->note, (*w)->LatestCheckpoint());
  EXPECT_EQ(ReadBytes((tiles / "checkpoint").string()), std::vector<uint8_t>(published->note.begin(), published->note.end()));
  ExpectTilesOf(tiles, entries, 40);
  EXPECT_EQ((*w)->stats().published, 1u);
  // The sizes in between were never published: no partial tiles of theirs.
  EXPECT_FALSE(fs::exists(tiles / "tile/0/000.p/20"));
  EXPECT_FALSE(fs::exists(tiles / "tile/entries/000.p/39"));
  // Asking for what is published answers at once; a size not yet signed waits, then fails.
  ASSERT_TRUE((*w)->AwaitPublished(10, std::chrono::milliseconds(0)).ok());
  auto future = (*w)->AwaitPublished(41, std::chrono::milliseconds(200));
  EXPECT_EQ(future.status().code(), Code::kUnavailable) << future.status().ToString();
  entries.emplace_back();
  ASSERT_TRUE((*w)->Append(SampleEvent(40), &entries.back()).ok());
  ASSERT_TRUE((*w)->WaitForTiles().ok());
  ExpectTilesOf(tiles, entries, 41);
  EXPECT_EQ((*w)->stats().published, 2u);
}

TEST(LogWriterTilesTest, AWriterThatCannotUpdateItsTilesStopsAfterTheDurableBatch) {
  testing::TestLog log = MakeLog("tiles-fail");
  const fs::path tiles = log.dir / kTilesDirName;
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Append(SampleEvent(0)).ok());
  ASSERT_TRUE((*w)->WaitForTiles().ok());
  // The tiles directory replaced by a file: no tile can be written.
  fs::remove_all(tiles);
  WriteBytes(tiles.string(), {'x'});
  auto durable = (*w)->Append(SampleEvent(1));
  ASSERT_TRUE(durable.ok()) << "the entry is in the log and its head is signed: " << durable.status().ToString();
  const Status tiles_status = (*w)->WaitForTiles();
  EXPECT_FALSE(tiles_status.ok());
  auto refused = (*w)->Append(SampleEvent(2));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tiles"), std::string::npos) << refused.status().ToString();
  w->reset();
  fs::remove(tiles);
  auto reopened = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->LatestTreeHead().head.tree_size, 2u);
  EXPECT_TRUE(fs::exists(tiles / "tile/entries/000.p/2"));
}

// Found while adding bundles: an entry longer than a record may hold was written, and the
// log then could not be opened again (every reader refuses the record). Now refused first.
TEST(LogWriterTilesTest, AnEntryLongerThanTheLimitIsRefusedBeforeAnythingIsWritten) {
  testing::TestLog log = MakeLog("tiles-long-entry");
  std::vector<std::string> datasets;
  for (int i = 0; i < 300; ++i) datasets.push_back("dataset-" + std::to_string(i) + "-" + std::string(240, 'd'));
  {
    auto w = LogWriter::Open(log.dir.string(), log.Key());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    auto r = (*w)->Append(JobStarted("trainer@gpu", testing::Digest('c'), "gpu-host-1", datasets));
    ASSERT_FALSE(r.ok()) << "a 75 KB entry was appended";
    EXPECT_EQ(r.status().code(), Code::kInvalidInput) << r.status().ToString();
    ASSERT_TRUE((*w)->Append(SampleEvent(0)).ok());
  }
  auto w = LogWriter::Open(log.dir.string(), log.Key());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->LatestTreeHead().head.tree_size, 1u);
  auto v = VerifyLog(log.dir.string(), log.pub);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
}

}  // namespace
}  // namespace enclave::audit

namespace enclave::audit {
namespace {

// The fuzz target's seeds decide as their names say (tests/fuzz/corpus/audit_tiles).
TEST(TileFuzzSeeds, EachDecidesAsItsNameSays) {
  int seen = 0;
  for (const auto& e : fs::directory_iterator(fs::path(ENCLAVE_FUZZ_CORPUS) / "audit_tiles")) {
    const std::string name = e.path().filename().string();
    const std::vector<uint8_t> bytes = ReadBytes(e.path().string());
    const bool valid = name.rfind("valid-", 0) == 0;
    ASSERT_TRUE(valid || name.rfind("invalid-", 0) == 0) << name;
    const bool parsed = name.find("-path-") != std::string::npos
                            ? ParseTilePath(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())).ok()
                            : ParseEntryBundle(bytes).ok();
    EXPECT_EQ(parsed, valid) << name;
    ++seen;
  }
  EXPECT_GE(seen, 8);
}

}  // namespace
}  // namespace enclave::audit
