#include "enclave/audit/merkle.h"

#include <bit>
#include <string>

#include "enclave/common/bytes.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::audit {
namespace {

// The largest power of two strictly smaller than n (n >= 2).
uint64_t SplitPoint(uint64_t n) { return uint64_t{1} << (std::bit_width(n - 1) - 1); }

bool Equal(const Hash& a, const Hash& b) { return crypto::ConstantTimeEquals(a, b); }

std::string Short(const Hash& h) { return HexEncode(h); }

// MTH over leaf_hashes[begin, end).
Hash RangeRoot(std::span<const Hash> leaves, uint64_t begin, uint64_t end) {
  const uint64_t n = end - begin;
  if (n == 0) return EmptyTreeHash();
  if (n == 1) return leaves[begin];
  const uint64_t k = SplitPoint(n);
  return NodeHash(RangeRoot(leaves, begin, begin + k), RangeRoot(leaves, begin + k, end));
}

// RFC 9162 2.1.3.1: PATH(m, D[begin:end]); `root(b, e)` is MTH(D[b:e]).
template <typename RootOf>
void Path(const RootOf& root, uint64_t m, uint64_t begin, uint64_t end, std::vector<Hash>* out) {
  const uint64_t n = end - begin;
  if (n <= 1) return;
  const uint64_t k = SplitPoint(n);
  if (m < k) {
    Path(root, m, begin, begin + k, out);
    out->push_back(root(begin + k, end));
  } else {
    Path(root, m - k, begin + k, end, out);
    out->push_back(root(begin, begin + k));
  }
}

// RFC 9162 2.1.4.1: SUBPROOF(m, D[begin:end], b).
template <typename RootOf>
void Subproof(const RootOf& root, uint64_t m, uint64_t begin, uint64_t end, bool b, std::vector<Hash>* out) {
  const uint64_t n = end - begin;
  if (m == n) {
    if (!b) out->push_back(root(begin, end));
    return;
  }
  const uint64_t k = SplitPoint(n);
  if (m <= k) {
    Subproof(root, m, begin, begin + k, b, out);
    out->push_back(root(begin + k, end));
  } else {
    Subproof(root, m - k, begin + k, end, false, out);
    out->push_back(root(begin, begin + k));
  }
}

Status CheckInclusionArgs(uint64_t available, uint64_t index, uint64_t tree_size) {
  if (tree_size > available) {
    return InvalidInput("inclusion proof: tree size " + std::to_string(tree_size) + " exceeds the " +
                        std::to_string(available) + " leaves available");
  }
  if (index >= tree_size) {
    return InvalidInput("inclusion proof: entry " + std::to_string(index) + " is not in a tree of size " +
                        std::to_string(tree_size));
  }
  return OkStatus();
}

Status CheckConsistencyArgs(uint64_t available, uint64_t first, uint64_t second) {
  if (second > available) {
    return InvalidInput("consistency proof: tree size " + std::to_string(second) + " exceeds the " +
                        std::to_string(available) + " leaves available");
  }
  if (first == 0 || first > second) {
    return InvalidInput("consistency proof: needs 0 < first <= second, got first " + std::to_string(first) +
                        ", second " + std::to_string(second));
  }
  return OkStatus();
}

}  // namespace

Hash LeafHash(std::span<const uint8_t> entry) {
  crypto::Sha256Hasher h;
  const uint8_t prefix = 0x00;
  h.Update({&prefix, 1});
  h.Update(entry);
  return h.Final();
}

Hash NodeHash(const Hash& left, const Hash& right) {
  uint8_t buf[65];
  buf[0] = 0x01;
  std::copy(left.begin(), left.end(), buf + 1);
  std::copy(right.begin(), right.end(), buf + 33);
  return crypto::Sha256({buf, sizeof buf});
}

Hash EmptyTreeHash() { return crypto::Sha256({}); }

Hash RootFromLeafHashes(std::span<const Hash> leaf_hashes) {
  CompactRange r;
  for (const Hash& h : leaf_hashes) r.Append(h);
  return r.Root();
}

Result<std::vector<Hash>> InclusionProof(std::span<const Hash> leaf_hashes, uint64_t index, uint64_t tree_size) {
  RETURN_IF_ERROR(CheckInclusionArgs(leaf_hashes.size(), index, tree_size));
  std::vector<Hash> out;
  Path([&](uint64_t b, uint64_t e) { return RangeRoot(leaf_hashes, b, e); }, index, 0, tree_size, &out);
  return out;
}

Result<std::vector<Hash>> ConsistencyProof(std::span<const Hash> leaf_hashes, uint64_t first, uint64_t second) {
  RETURN_IF_ERROR(CheckConsistencyArgs(leaf_hashes.size(), first, second));
  std::vector<Hash> out;
  Subproof([&](uint64_t b, uint64_t e) { return RangeRoot(leaf_hashes, b, e); }, first, 0, second, true, &out);
  return out;
}

Result<Hash> RootFromInclusionProof(uint64_t index, uint64_t tree_size, const Hash& leaf_hash,
                                    std::span<const Hash> proof) {
  // Step 1.
  if (index >= tree_size) {
    return AuthFailed("inclusion proof: entry index " + std::to_string(index) + " is not below tree size " +
                      std::to_string(tree_size));
  }
  // Steps 2-3.
  uint64_t fn = index;
  uint64_t sn = tree_size - 1;
  Hash r = leaf_hash;
  // Step 4.
  for (size_t i = 0; i < proof.size(); ++i) {
    const Hash& p = proof[i];
    if (sn == 0) {
      return AuthFailed("inclusion proof: " + std::to_string(proof.size()) + " hashes, but the path for entry " +
                        std::to_string(index) + " in a tree of size " + std::to_string(tree_size) + " has only " +
                        std::to_string(i));
    }
    if ((fn & 1) != 0 || fn == sn) {
      r = NodeHash(p, r);
      if ((fn & 1) == 0) {
        while ((fn & 1) == 0 && fn != 0) {
          fn >>= 1;
          sn >>= 1;
        }
      }
    } else {
      r = NodeHash(r, p);
    }
    fn >>= 1;
    sn >>= 1;
  }
  // Step 5 (first half).
  if (sn != 0) {
    return AuthFailed("inclusion proof: " + std::to_string(proof.size()) + " hashes are too few for entry " +
                      std::to_string(index) + " in a tree of size " + std::to_string(tree_size));
  }
  return r;
}

Status VerifyInclusion(uint64_t index, uint64_t tree_size, const Hash& leaf_hash, std::span<const Hash> proof,
                       const Hash& root) {
  ASSIGN_OR_RETURN(Hash r, RootFromInclusionProof(index, tree_size, leaf_hash, proof));
  if (!Equal(r, root)) {
    return AuthFailed("inclusion proof: entry " + std::to_string(index) + " and its path give root " + Short(r) +
                      ", the tree head of size " + std::to_string(tree_size) + " has root " + Short(root));
  }
  return OkStatus();
}

Status VerifyConsistency(uint64_t first, uint64_t second, const Hash& first_root, const Hash& second_root,
                         std::span<const Hash> proof) {
  const std::string sizes = "sizes " + std::to_string(first) + " -> " + std::to_string(second);
  if (first > second) return AuthFailed("consistency proof: the tree shrank (" + sizes + ")");
  if (first == second) {
    if (!proof.empty()) return AuthFailed("consistency proof: must be empty for equal " + sizes);
    if (!Equal(first_root, second_root)) {
      return AuthFailed("consistency proof: equal " + sizes + " but different roots " + Short(first_root) +
                        " and " + Short(second_root));
    }
    return OkStatus();
  }
  if (first == 0) {
    if (!proof.empty()) return AuthFailed("consistency proof: must be empty from the empty tree (" + sizes + ")");
    return OkStatus();
  }
  // RFC 9162 2.1.4.2, 0 < first < second.
  // Step 1.
  if (proof.empty()) return AuthFailed("consistency proof: empty for " + sizes);
  // Step 2: if first is an exact power of 2, prepend first_hash.
  std::vector<Hash> path;
  path.reserve(proof.size() + 1);
  if ((first & (first - 1)) == 0) path.push_back(first_root);
  path.insert(path.end(), proof.begin(), proof.end());
  // Step 3.
  uint64_t fn = first - 1;
  uint64_t sn = second - 1;
  // Step 4.
  while ((fn & 1) != 0) {
    fn >>= 1;
    sn >>= 1;
  }
  // Step 5.
  Hash fr = path[0];
  Hash sr = path[0];
  // Step 6.
  for (size_t i = 1; i < path.size(); ++i) {
    const Hash& c = path[i];
    if (sn == 0) return AuthFailed("consistency proof: too many hashes (" + std::to_string(proof.size()) + ") for " + sizes);
    if ((fn & 1) != 0 || fn == sn) {
      fr = NodeHash(c, fr);
      sr = NodeHash(c, sr);
      if ((fn & 1) == 0) {
        while ((fn & 1) == 0 && fn != 0) {
          fn >>= 1;
          sn >>= 1;
        }
      }
    } else {
      sr = NodeHash(sr, c);
    }
    fn >>= 1;
    sn >>= 1;
  }
  // Step 7.
  if (sn != 0) return AuthFailed("consistency proof: too few hashes (" + std::to_string(proof.size()) + ") for " + sizes);
  if (!Equal(fr, first_root)) {
    return AuthFailed("consistency proof: reconstructed old root " + Short(fr) + " differs from the root " +
                      Short(first_root) + " of size " + std::to_string(first));
  }
  if (!Equal(sr, second_root)) {
    return AuthFailed("consistency proof: reconstructed new root " + Short(sr) + " differs from the root " +
                      Short(second_root) + " of size " + std::to_string(second));
  }
  return OkStatus();
}

void CompactRange::Append(const Hash& leaf_hash) {
  stack_.push_back({leaf_hash, 0});
  while (stack_.size() >= 2 && stack_[stack_.size() - 2].height == stack_.back().height) {
    Node right = stack_.back();
    stack_.pop_back();
    Node& left = stack_.back();
    left.hash = NodeHash(left.hash, right.hash);
    left.height += 1;
  }
  ++size_;
}

Hash CompactRange::Root() const {
  if (stack_.empty()) return EmptyTreeHash();
  Hash r = stack_.back().hash;
  for (size_t i = stack_.size() - 1; i-- > 0;) r = NodeHash(stack_[i].hash, r);
  return r;
}

void MerkleTree::Append(const Hash& leaf_hash) {
  if (levels_.empty()) levels_.emplace_back();
  levels_[0].push_back(leaf_hash);
  // Each completed pair of subtrees of height h gives one node of height h + 1.
  for (size_t h = 0; levels_[h].size() % 2 == 0; ++h) {
    if (levels_.size() == h + 1) levels_.emplace_back();
    const std::vector<Hash>& level = levels_[h];
    levels_[h + 1].push_back(NodeHash(level[level.size() - 2], level.back()));
  }
}

Hash MerkleTree::RangeRoot(uint64_t begin, uint64_t end) const {
  const uint64_t n = end - begin;
  if (n == 0) return EmptyTreeHash();
  // The RFC's recursion only asks for ranges that start at a multiple of a power of two at
  // least their size; a perfect one is stored, any other splits into O(log n) stored ones.
  if (std::has_single_bit(n) && begin % n == 0) {
    const int h = std::countr_zero(n);
    return levels_[static_cast<size_t>(h)][begin >> h];
  }
  const uint64_t k = SplitPoint(n);
  return NodeHash(RangeRoot(begin, begin + k), RangeRoot(begin + k, end));
}

Result<Hash> MerkleTree::Root(uint64_t tree_size) const {
  if (tree_size > size()) {
    return InvalidInput("tree root: size " + std::to_string(tree_size) + " exceeds the " + std::to_string(size()) +
                        " leaves available");
  }
  return RangeRoot(0, tree_size);
}

Result<std::vector<Hash>> MerkleTree::InclusionProof(uint64_t index, uint64_t tree_size) const {
  RETURN_IF_ERROR(CheckInclusionArgs(size(), index, tree_size));
  std::vector<Hash> out;
  Path([this](uint64_t b, uint64_t e) { return RangeRoot(b, e); }, index, 0, tree_size, &out);
  return out;
}

Result<std::vector<Hash>> MerkleTree::ConsistencyProof(uint64_t first, uint64_t second) const {
  RETURN_IF_ERROR(CheckConsistencyArgs(size(), first, second));
  std::vector<Hash> out;
  Subproof([this](uint64_t b, uint64_t e) { return RangeRoot(b, e); }, first, 0, second, true, &out);
  return out;
}

}  // namespace enclave::audit
