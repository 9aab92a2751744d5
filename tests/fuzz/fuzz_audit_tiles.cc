// libFuzzer target: the tlog-tiles readers (audit/include/enclave/audit/tiles.h). The
// input is tried as a tile path (which the broker parses from request targets) and as an
// entry bundle. Invariants: no crash, no read outside the input; a path that parses is
// exactly the canonical path of what it parsed to; a bundle that parses re-encodes to
// exactly its own bytes and holds 1..256 entries of 1..65535 bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "enclave/audit/tiles.h"

using namespace enclave::audit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto tile = ParseTilePath(text); tile.ok()) {
    if (TilePath(*tile) != text) std::abort();
    if (tile->width < 1 || tile->width > kTileWidth || tile->level < 0 || tile->level > kMaxTileLevel) std::abort();
    if (tile->entries && tile->level != 0) std::abort();
  }
  if (auto bundle = ParseEntryBundle(std::span<const uint8_t>(data, size)); bundle.ok()) {
    if (bundle->empty() || bundle->size() > kTileWidth) std::abort();
    std::vector<uint8_t> again;
    for (std::span<const uint8_t> e : *bundle) {
      if (e.empty() || e.size() > kMaxBundledEntryBytes) std::abort();
      if (!AppendToBundle(e, &again).ok()) std::abort();
    }
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  }
  return 0;
}
