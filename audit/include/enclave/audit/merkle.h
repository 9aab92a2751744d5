// The Merkle tree of the audit log, exactly as RFC 6962 section 2.1 / RFC 9162 section 2.1
// with SHA-256:
//   MTH({})      = SHA-256()                       (the empty tree)
//   leaf hash    = SHA-256(0x00 || entry bytes)
//   node hash    = SHA-256(0x01 || left || right)
//   MTH(D[0:n])  = node(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two < n
// Proof generation follows RFC 9162 2.1.3.1 (PATH) and 2.1.4.1 (SUBPROOF); verification
// follows the iterative algorithms of RFC 9162 2.1.3.2 and 2.1.4.2 step by step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"

namespace enclave::audit {

using Hash = crypto::Digest256;

Hash LeafHash(std::span<const uint8_t> entry);
Hash NodeHash(const Hash& left, const Hash& right);
Hash EmptyTreeHash();

// MTH over already-hashed leaves (leaf_hashes[i] = LeafHash(entry i)).
Hash RootFromLeafHashes(std::span<const Hash> leaf_hashes);

// The audit path for leaf `index` in the tree of the first `tree_size` leaves.
// Fails unless index < tree_size <= leaf_hashes.size().
Result<std::vector<Hash>> InclusionProof(std::span<const Hash> leaf_hashes, uint64_t index, uint64_t tree_size);

// The consistency proof between the trees of the first `first` and `second` leaves.
// Fails unless 0 < first <= second <= leaf_hashes.size() (first == second gives an empty proof).
Result<std::vector<Hash>> ConsistencyProof(std::span<const Hash> leaf_hashes, uint64_t first, uint64_t second);

// RFC 9162 2.1.3.2. The error says which check failed.
Status VerifyInclusion(uint64_t index, uint64_t tree_size, const Hash& leaf_hash, std::span<const Hash> proof,
                       const Hash& root);
// Recomputes the root an inclusion proof commits to (steps 1-4 of 2.1.3.2).
Result<Hash> RootFromInclusionProof(uint64_t index, uint64_t tree_size, const Hash& leaf_hash,
                                    std::span<const Hash> proof);

// RFC 9162 2.1.4.2, plus the trivial cases the RFC leaves to the caller:
// first > second fails; first == second needs an empty proof and equal roots;
// first == 0 needs an empty proof (the empty tree is consistent with every tree).
Status VerifyConsistency(uint64_t first, uint64_t second, const Hash& first_root, const Hash& second_root,
                         std::span<const Hash> proof);

// Incremental root over a growing list of leaves: a stack of the roots of the perfect
// subtrees (RFC 6962's "compact" form). O(log n) memory; Root() is O(log n).
class CompactRange {
 public:
  void Append(const Hash& leaf_hash);
  uint64_t size() const { return size_; }
  Hash Root() const;

 private:
  struct Node {
    Hash hash;
    int height;
  };
  std::vector<Node> stack_;
  uint64_t size_ = 0;
};

// Every stored node of a growing tree: the leaf hashes and the root of each perfect,
// aligned subtree (about two hashes per leaf), so that roots and proofs for any size up to
// size() cost O(log n) hashes instead of O(n). Kept in memory; the same nodes are what
// tlog-tiles would hold on disk.
class MerkleTree {
 public:
  void Append(const Hash& leaf_hash);
  uint64_t size() const { return levels_.empty() ? 0 : levels_[0].size(); }
  const Hash& leaf(uint64_t i) const { return levels_[0][i]; }
  // The roots of the perfect subtrees of 2^height leaves, left to right: size() >> height
  // of them (level(0) are the leaf hashes). What tlog-tiles stores, every 8th height.
  std::span<const Hash> level(int height) const {
    return static_cast<size_t>(height) < levels_.size() ? std::span<const Hash>(levels_[static_cast<size_t>(height)])
                                                        : std::span<const Hash>();
  }
  Result<Hash> Root(uint64_t tree_size) const;
  // As the free functions above, for trees of the first tree_size <= size() leaves.
  Result<std::vector<Hash>> InclusionProof(uint64_t index, uint64_t tree_size) const;
  Result<std::vector<Hash>> ConsistencyProof(uint64_t first, uint64_t second) const;

 private:
  Hash RangeRoot(uint64_t begin, uint64_t end) const;
  // levels_[h][i]: the root of leaves [i * 2^h, (i + 1) * 2^h).
  std::vector<std::vector<Hash>> levels_;
};

}  // namespace enclave::audit
