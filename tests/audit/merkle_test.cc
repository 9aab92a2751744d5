// RFC 6962 / RFC 9162 Merkle tree: known-answer vectors from a data file
// (tests/data/audit/rfc6962_ct_vectors.txt, which names its sources), the corruption probes
// certificate-transparency runs against each known-good proof, and an exhaustive
// cross-check against an independent naive reference for small trees.
#include "enclave/audit/merkle.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "enclave/common/bytes.h"

namespace enclave::audit {
namespace {

Hash H(const std::string& hex) {
  auto b = HexDecode(hex);
  EXPECT_TRUE(b.ok()) << hex;
  Hash h{};
  if (b.ok() && b->size() == 32) std::copy(b->begin(), b->end(), h.begin());
  return h;
}

std::vector<Hash> HashList(const std::string& s) {
  std::vector<Hash> out;
  if (s == "-") return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(H(item));
  return out;
}

struct Vectors {
  Hash empty_root{};
  std::vector<std::vector<uint8_t>> leaves;
  std::map<uint64_t, Hash> roots;
  struct Incl {
    uint64_t index, size;
    std::vector<Hash> path;
  };
  struct Cons {
    uint64_t first, second;
    std::vector<Hash> proof;
  };
  std::vector<Incl> inclusion;
  std::vector<Cons> consistency;
};

Vectors Load() {
  Vectors v;
  std::ifstream in(std::string(ENCLAVE_TEST_DATA) + "/audit/rfc6962_ct_vectors.txt");
  EXPECT_TRUE(in.good()) << "cannot open the vector file";
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::stringstream ss(line);
    std::string kind;
    ss >> kind;
    if (kind == "empty_root") {
      std::string h;
      ss >> h;
      v.empty_root = H(h);
    } else if (kind == "leaf") {
      size_t i;
      std::string hex;
      ss >> i >> hex;
      EXPECT_EQ(i, v.leaves.size());
      auto b = HexDecode(hex == "-" ? "" : hex);
      EXPECT_TRUE(b.ok());
      v.leaves.push_back(*b);
    } else if (kind == "root") {
      uint64_t size;
      std::string h;
      ss >> size >> h;
      v.roots[size] = H(h);
    } else if (kind == "inclusion") {
      Vectors::Incl t;
      std::string p;
      ss >> t.index >> t.size >> p;
      t.path = HashList(p);
      v.inclusion.push_back(t);
    } else if (kind == "consistency") {
      Vectors::Cons t;
      std::string p;
      ss >> t.first >> t.second >> p;
      t.proof = HashList(p);
      v.consistency.push_back(t);
    } else {
      ADD_FAILURE() << "unknown line: " << line;
    }
  }
  return v;
}

std::vector<Hash> LeafHashes(const std::vector<std::vector<uint8_t>>& leaves) {
  std::vector<Hash> out;
  for (const auto& l : leaves) out.push_back(LeafHash(l));
  return out;
}

TEST(MerkleKat, VectorFileIsComplete) {
  Vectors v = Load();
  EXPECT_EQ(v.leaves.size(), 8u);
  EXPECT_EQ(v.roots.size(), 8u);
  EXPECT_EQ(v.inclusion.size(), 5u);
  EXPECT_EQ(v.consistency.size(), 5u);
}

TEST(MerkleKat, Roots) {
  Vectors v = Load();
  EXPECT_EQ(EmptyTreeHash(), v.empty_root);
  EXPECT_EQ(RootFromLeafHashes({}), v.empty_root);
  const auto leaves = LeafHashes(v.leaves);
  CompactRange incremental;
  for (uint64_t size = 1; size <= 8; ++size) {
    incremental.Append(leaves[size - 1]);
    EXPECT_EQ(RootFromLeafHashes(std::span<const Hash>(leaves).first(size)), v.roots.at(size)) << "size " << size;
    EXPECT_EQ(incremental.Root(), v.roots.at(size)) << "incremental, size " << size;
  }
}

// The probes of certificate-transparency's VerifierCheck: each must be rejected.
void ExpectInclusionProbesFail(uint64_t index, uint64_t size, const std::vector<Hash>& path, const Hash& root,
                               const Hash& leaf) {
  const Hash empty = EmptyTreeHash();
  EXPECT_FALSE(VerifyInclusion(index - 1, size, leaf, path, root).ok()) << "index - 1";
  EXPECT_FALSE(VerifyInclusion(index + 1, size, leaf, path, root).ok()) << "index + 1";
  EXPECT_FALSE(VerifyInclusion(index ^ 2, size, leaf, path, root).ok()) << "index ^ 2";
  EXPECT_FALSE(VerifyInclusion(index, size * 2, leaf, path, root).ok()) << "size * 2";
  EXPECT_FALSE(VerifyInclusion(index, size / 2, leaf, path, root).ok()) << "size / 2";
  EXPECT_FALSE(VerifyInclusion(index, size, LeafHash(AsBytes("WrongLeaf")), path, root).ok()) << "wrong leaf";
  EXPECT_FALSE(VerifyInclusion(index, size, leaf, path, empty).ok()) << "empty root";
  for (size_t j = 0; j < path.size(); ++j) {
    auto wrong = path;
    wrong[j] = empty;
    EXPECT_FALSE(VerifyInclusion(index, size, leaf, wrong, root).ok()) << "replaced path[" << j << "]";
    wrong = path;
    wrong[j][0] ^= 8;
    EXPECT_FALSE(VerifyInclusion(index, size, leaf, wrong, root).ok()) << "bit flip in path[" << j << "]";
  }
  auto longer = path;
  longer.push_back(root);
  EXPECT_FALSE(VerifyInclusion(index, size, leaf, longer, root).ok()) << "trailing root";
  longer = path;
  longer.insert(longer.begin(), empty);
  EXPECT_FALSE(VerifyInclusion(index, size, leaf, longer, root).ok()) << "preceding garbage";
  if (!path.empty()) {
    auto shorter = path;
    shorter.pop_back();
    EXPECT_FALSE(VerifyInclusion(index, size, leaf, shorter, root).ok()) << "removed component";
  }
}

TEST(MerkleKat, InclusionProofs) {
  Vectors v = Load();
  const auto leaves = LeafHashes(v.leaves);
  for (const auto& t : v.inclusion) {
    SCOPED_TRACE("index " + std::to_string(t.index) + " size " + std::to_string(t.size));
    auto path = InclusionProof(leaves, t.index, t.size);
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    EXPECT_EQ(*path, t.path);
    const Hash& root = v.roots.at(t.size);
    Status s = VerifyInclusion(t.index, t.size, leaves[t.index], t.path, root);
    EXPECT_TRUE(s.ok()) << s.ToString();
    auto recomputed = RootFromInclusionProof(t.index, t.size, leaves[t.index], t.path);
    ASSERT_TRUE(recomputed.ok());
    EXPECT_EQ(*recomputed, root);
    ExpectInclusionProbesFail(t.index, t.size, t.path, root, leaves[t.index]);
  }
}

TEST(MerkleKat, InclusionInvalidParameters) {
  const Hash some = LeafHash(AsBytes("x"));
  EXPECT_FALSE(VerifyInclusion(0, 0, some, {}, EmptyTreeHash()).ok());
  EXPECT_FALSE(VerifyInclusion(1, 0, some, {}, EmptyTreeHash()).ok());
  EXPECT_FALSE(VerifyInclusion(2, 1, some, {}, some).ok());
  EXPECT_TRUE(VerifyInclusion(0, 1, some, {}, some).ok());  // a one-leaf tree: root = leaf hash
  Vectors v = Load();
  const auto leaves = LeafHashes(v.leaves);
  EXPECT_FALSE(InclusionProof(leaves, 8, 8).ok());
  EXPECT_FALSE(InclusionProof(leaves, 0, 9).ok());
}

void ExpectConsistencyProbesFail(uint64_t m, uint64_t n, const Hash& r1, const Hash& r2,
                                 const std::vector<Hash>& proof) {
  const Hash empty = EmptyTreeHash();
  EXPECT_FALSE(VerifyConsistency(m - 1, n, r1, r2, proof).ok()) << "first - 1";
  EXPECT_FALSE(VerifyConsistency(m + 1, n, r1, r2, proof).ok()) << "first + 1";
  EXPECT_FALSE(VerifyConsistency(m ^ 2, n, r1, r2, proof).ok()) << "first ^ 2";
  EXPECT_FALSE(VerifyConsistency(m, n * 2, r1, r2, proof).ok()) << "second * 2";
  EXPECT_FALSE(VerifyConsistency(m, n / 2, r1, r2, proof).ok()) << "second / 2";
  EXPECT_FALSE(VerifyConsistency(m, n, empty, r2, proof).ok()) << "wrong first root";
  EXPECT_FALSE(VerifyConsistency(m, n, r1, empty, proof).ok()) << "wrong second root";
  EXPECT_FALSE(VerifyConsistency(m, n, r2, r1, proof).ok()) << "swapped roots";
  EXPECT_FALSE(VerifyConsistency(m, n, r1, r2, {}).ok()) << "empty proof";
  for (size_t j = 0; j < proof.size(); ++j) {
    auto wrong = proof;
    wrong[j][0] ^= 16;
    EXPECT_FALSE(VerifyConsistency(m, n, r1, r2, wrong).ok()) << "bit flip in proof[" << j << "]";
  }
  for (const Hash& extra : {empty, r1, r2}) {
    auto longer = proof;
    longer.push_back(extra);
    EXPECT_FALSE(VerifyConsistency(m, n, r1, r2, longer).ok()) << "trailing hash";
    longer = proof;
    longer.insert(longer.begin(), extra);
    EXPECT_FALSE(VerifyConsistency(m, n, r1, r2, longer).ok()) << "preceding hash";
  }
  auto shorter = proof;
  shorter.pop_back();
  EXPECT_FALSE(VerifyConsistency(m, n, r1, r2, shorter).ok()) << "truncated proof";
}

TEST(MerkleKat, ConsistencyProofs) {
  Vectors v = Load();
  const auto leaves = LeafHashes(v.leaves);
  for (const auto& t : v.consistency) {
    SCOPED_TRACE("first " + std::to_string(t.first) + " second " + std::to_string(t.second));
    auto proof = ConsistencyProof(leaves, t.first, t.second);
    ASSERT_TRUE(proof.ok()) << proof.status().ToString();
    EXPECT_EQ(*proof, t.proof);
    const Hash& r1 = v.roots.at(t.first);
    const Hash& r2 = v.roots.at(t.second);
    Status s = VerifyConsistency(t.first, t.second, r1, r2, t.proof);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!t.proof.empty()) ExpectConsistencyProbesFail(t.first, t.second, r1, r2, t.proof);
  }
}

TEST(MerkleKat, ConsistencyTrivialCases) {
  const Hash a = LeafHash(AsBytes("a")), b = LeafHash(AsBytes("b")), empty = EmptyTreeHash();
  EXPECT_TRUE(VerifyConsistency(0, 0, a, a, {}).ok());
  EXPECT_TRUE(VerifyConsistency(0, 1, a, b, {}).ok());
  EXPECT_TRUE(VerifyConsistency(1, 1, b, b, {}).ok());
  EXPECT_FALSE(VerifyConsistency(0, 0, a, b, {}).ok()) << "equal sizes, different roots";
  EXPECT_FALSE(VerifyConsistency(1, 1, a, b, {}).ok());
  EXPECT_FALSE(VerifyConsistency(1, 0, a, b, {}).ok()) << "shrinking";
  EXPECT_FALSE(VerifyConsistency(2, 1, a, b, {}).ok());
  EXPECT_FALSE(VerifyConsistency(1, 2, a, b, {}).ok()) << "empty proof";
  const std::vector<Hash> one{empty};
  EXPECT_FALSE(VerifyConsistency(0, 0, empty, empty, one).ok()) << "non-empty proof for equal trees";
  EXPECT_FALSE(VerifyConsistency(0, 1, empty, empty, one).ok());
  EXPECT_FALSE(VerifyConsistency(1, 1, empty, empty, one).ok());
}

// --- independent naive reference (recursive definitions of RFC 6962 2.1, over entries) ---

Hash RefMth(const std::vector<std::vector<uint8_t>>& d, size_t lo, size_t hi) {
  const size_t n = hi - lo;
  if (n == 0) return crypto::Sha256({});
  if (n == 1) {
    std::vector<uint8_t> buf{0x00};
    buf.insert(buf.end(), d[lo].begin(), d[lo].end());
    return crypto::Sha256(buf);
  }
  size_t k = 1;
  while (k * 2 < n) k *= 2;
  std::vector<uint8_t> buf{0x01};
  Hash l = RefMth(d, lo, lo + k), r = RefMth(d, lo + k, hi);
  buf.insert(buf.end(), l.begin(), l.end());
  buf.insert(buf.end(), r.begin(), r.end());
  return crypto::Sha256(buf);
}

TEST(MerkleReference, AllSizesUpTo40) {
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 40; ++i) data.push_back({static_cast<uint8_t>(i), static_cast<uint8_t>(i * 7)});
  const auto leaves = LeafHashes(data);
  for (uint64_t n = 1; n <= data.size(); ++n) {
    const Hash root = RefMth(data, 0, n);
    ASSERT_EQ(RootFromLeafHashes(std::span<const Hash>(leaves).first(n)), root) << "size " << n;
    for (uint64_t i = 0; i < n; ++i) {
      auto path = InclusionProof(leaves, i, n);
      ASSERT_TRUE(path.ok());
      ASSERT_TRUE(VerifyInclusion(i, n, leaves[i], *path, root).ok()) << "inclusion " << i << " in " << n;
      if (!path->empty()) {
        auto bad = *path;
        bad.back()[31] ^= 1;
        ASSERT_FALSE(VerifyInclusion(i, n, leaves[i], bad, root).ok());
      }
    }
    for (uint64_t m = 1; m <= n; ++m) {
      const Hash old_root = RefMth(data, 0, m);
      auto proof = ConsistencyProof(leaves, m, n);
      ASSERT_TRUE(proof.ok());
      ASSERT_TRUE(VerifyConsistency(m, n, old_root, root, *proof).ok()) << "consistency " << m << " -> " << n;
      if (m < n) {
        // A fork: the same sizes with one old entry changed must not verify.
        auto forked = data;
        forked[m - 1].push_back(0xff);
        ASSERT_FALSE(VerifyConsistency(m, n, RefMth(forked, 0, m), root, *proof).ok());
      }
    }
  }
}


// The stored tree must give exactly what the reference functions give from all leaves, for
// every size it has passed through (so proofs of old sizes stay right as it grows).
TEST(MerkleTree, MatchesLeafFunctionsAtEverySize) {
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 70; ++i) data.push_back({static_cast<uint8_t>(i), static_cast<uint8_t>(i * 13)});
  const auto leaves = LeafHashes(data);
  MerkleTree tree;
  EXPECT_EQ(*tree.Root(0), EmptyTreeHash());
  EXPECT_EQ(tree.Root(1).status().code(), Code::kInvalidInput);
  for (const Hash& h : leaves) tree.Append(h);
  ASSERT_EQ(tree.size(), leaves.size());
  for (uint64_t n = 1; n <= leaves.size(); ++n) {
    ASSERT_EQ(*tree.Root(n), RefMth(data, 0, n)) << "size " << n;
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(*tree.InclusionProof(i, n), *InclusionProof(leaves, i, n)) << i << "/" << n;
    for (uint64_t m = 1; m <= n; ++m)
      ASSERT_EQ(*tree.ConsistencyProof(m, n), *ConsistencyProof(leaves, m, n)) << m << " -> " << n;
  }
  EXPECT_EQ(tree.InclusionProof(3, 71).status().code(), Code::kInvalidInput);
  EXPECT_EQ(tree.InclusionProof(70, 70).status().code(), Code::kInvalidInput);
  EXPECT_EQ(tree.ConsistencyProof(0, 5).status().code(), Code::kInvalidInput);
  EXPECT_EQ(tree.ConsistencyProof(6, 5).status().code(), Code::kInvalidInput);
  EXPECT_EQ(tree.ConsistencyProof(5, 71).status().code(), Code::kInvalidInput);
}

}  // namespace
}  // namespace enclave::audit
