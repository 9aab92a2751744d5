// Checkpoints as C2SP signed notes and the note verifier key (docs/formats/audit-log.md,
// section 4.1): what is written, and what the strict reader refuses.
#include <gtest/gtest.h>
#include <sodium.h>

#include "audit_test_util.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/crypto/hash.h"

namespace enclave::audit {
namespace {

using namespace testing;

struct Signed {
  LogSigningKey key;
  SignedTreeHead sth;
  std::string note;
};

Signed MakeNote(uint64_t size) {
  auto key = LogSigningKey::Generate();
  EXPECT_TRUE(key.ok());
  auto sth = SignChainedTreeHead(*key, TreeHead{size, 1714554000000, LeafHash(AsBytes("root"))}, 1, Hash{});
  EXPECT_TRUE(sth.ok());
  auto note = FormatCheckpointNote(key->public_key(), *sth);
  EXPECT_TRUE(note.ok());
  return {std::move(*key), *sth, *note};
}

TEST(Checkpoint, NoteLayoutAndRoundTrip) {
  Signed s = MakeNote(1234);
  const LogPublicKey& pub = s.key.public_key();
  const std::string origin = "enclave-audit-log/" + HexEncode(pub.log_id);
  EXPECT_EQ(CheckpointOrigin(pub.log_id), origin);
  const std::string body = origin + "\n1234\n" + Base64Encode(s.sth.head.root) + "\n";
  ASSERT_EQ(s.note.substr(0, body.size()), body);
  EXPECT_EQ(s.note.substr(body.size(), 1 + 4 + origin.size() + 1), "\n\xe2\x80\x94 " + origin + " ");
  // The signature line's key hash is SHA-256(name || "\n" || 0x01 || key)[:4], computed here by hand.
  std::string kh_input = origin + "\n\x01";
  kh_input.append(reinterpret_cast<const char*>(pub.key.data()), 32);
  const Hash kh = crypto::Sha256(AsBytes(kh_input));
  auto blob = Base64DecodeStrict(s.note.substr(body.size() + 1 + 4 + origin.size() + 1,
                                               s.note.size() - body.size() - 1 - 4 - origin.size() - 1 - 1));
  ASSERT_TRUE(blob.ok());
  ASSERT_EQ(blob->size(), 68u);
  EXPECT_TRUE(std::equal(kh.begin(), kh.begin() + 4, blob->begin()));
  EXPECT_EQ(crypto_sign_verify_detached(blob->data() + 4, reinterpret_cast<const uint8_t*>(body.data()), body.size(),
                                        pub.key.data()),
            0);
  auto cp = VerifyCheckpointNote(s.note, pub, "note");
  ASSERT_TRUE(cp.ok()) << cp.status().ToString();
  EXPECT_EQ(cp->tree_size, 1234u);
  EXPECT_EQ(cp->root, s.sth.head.root);
  // The verifier key reads back to the same key.
  const std::string vkey = NoteVerifierKey(pub);
  EXPECT_EQ(vkey.substr(0, origin.size() + 1 + 8 + 1), origin + "+" + HexEncode(ByteSpan(kh.data(), 4)) + "+");
  auto back = ParseNoteVerifierKey(vkey, "vkey");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->key, pub.key);
}

TEST(Checkpoint, OtherSignersAreSkippedOursMustVerify) {
  Signed s = MakeNote(7);
  Signed other = MakeNote(7);
  const LogPublicKey& pub = s.key.public_key();
  // A cosignature line of another key (a witness) after ours: still fine.
  const std::string other_line = other.note.substr(other.note.rfind("\xe2\x80\x94"));
  EXPECT_TRUE(VerifyCheckpointNote(s.note + other_line, pub, "n").ok());
  // Only another key's signature: no signature by the log.
  const std::string body = s.note.substr(0, s.note.find("\n\n") + 2);
  auto r = VerifyCheckpointNote(body + other_line, pub, "n");
  EXPECT_EQ(r.status().code(), Code::kAuthFailed);
  // Our name and key hash with a wrong signature: refused, not skipped.
  std::string bad = s.note;
  bad[bad.size() - 4] = bad[bad.size() - 4] == 'A' ? 'B' : 'A';
  EXPECT_EQ(VerifyCheckpointNote(bad, pub, "n").status().code(), Code::kAuthFailed);
  EXPECT_EQ(VerifyCheckpointNote(s.note, other.key.public_key(), "n").status().code(), Code::kAuthFailed);
}

TEST(Checkpoint, MalformedNotesAreRefusedWithWhere) {
  Signed s = MakeNote(42);
  const LogPublicKey& pub = s.key.public_key();
  const size_t split = s.note.find("\n\n");
  const std::string sigline = s.note.substr(split + 2);
  auto refused = [&](const std::string& note, const std::string& what) {
    auto r = VerifyCheckpointNote(note, pub, "where.json");
    EXPECT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find("where.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  refused(s.note.substr(0, s.note.size() - 1), "does not end in a signature line");
  refused(s.note.substr(0, split) + "\n" + sigline, "no blank line");
  refused(s.note.substr(0, split + 2) + "- x y\n", "em dash");
  refused(std::string(kMaxNoteBytes + 1, 'a'), "16 KiB");
  // Bodies signed by the right key but not what this log writes: sign them here.
  auto sign_body = [&](const std::string& body) {
    auto sig = s.key.Sign(AsBytes(body));
    std::vector<uint8_t> blob;
    const auto kh = NoteKeyHash(CheckpointOrigin(pub.log_id), pub.key);
    blob.insert(blob.end(), kh.begin(), kh.end());
    blob.insert(blob.end(), sig->begin(), sig->end());
    return body + "\n\xe2\x80\x94 " + CheckpointOrigin(pub.log_id) + " " + Base64Encode(blob) + "\n";
  };
  const std::string origin = CheckpointOrigin(pub.log_id), root = Base64Encode(s.sth.head.root);
  EXPECT_TRUE(VerifyCheckpointNote(sign_body(origin + "\n42\n" + root + "\n"), pub, "where.json").ok());
  refused(sign_body(origin + "\n42\n" + root + "\nextension\n"), "extension lines");
  refused(sign_body(origin + "\n042\n" + root + "\n"), "tree size");
  refused(sign_body(origin + "\n18446744073709551616\n" + root + "\n"), "tree size");
  refused(sign_body(origin + "x\n42\n" + root + "\n"), "origin");
  refused(sign_body(origin + "\n42\n" + root.substr(0, 43) + "\n"), "line 3");
  refused(sign_body(origin + "\n42\n"), "fewer than 3 lines");
}

TEST(Checkpoint, VerifierKeysAreStrict) {
  auto key = LogSigningKey::Generate();
  ASSERT_TRUE(key.ok());
  const std::string vkey = NoteVerifierKey(key->public_key());
  const size_t p1 = vkey.find('+'), p2 = vkey.find('+', p1 + 1);
  EXPECT_EQ(ParseNoteVerifierKey("x" + vkey, "k").status().code(), Code::kInvalidInput) << "hash no longer matches";
  std::string upper = vkey;
  for (size_t i = p1 + 1; i < p2; ++i) upper[i] = static_cast<char>(std::toupper(upper[i]));
  if (upper != vkey) EXPECT_EQ(ParseNoteVerifierKey(upper, "k").status().code(), Code::kInvalidInput);
  EXPECT_EQ(ParseNoteVerifierKey(vkey.substr(0, p2), "k").status().code(), Code::kInvalidInput);
  // Another key under this log's name: the hash is right for it, the name is not its origin.
  auto other = LogSigningKey::Generate();
  const std::string name = vkey.substr(0, p1);
  std::vector<uint8_t> alg{1};
  alg.insert(alg.end(), other->public_key().key.begin(), other->public_key().key.end());
  const std::string forged = name + "+" + HexEncode(NoteKeyHash(name, other->public_key().key)) + "+" + Base64Encode(alg);
  auto r = ParseNoteVerifierKey(forged, "k");
  EXPECT_EQ(r.status().code(), Code::kInvalidInput);
  EXPECT_NE(r.status().message().find("not this key's log origin"), std::string::npos) << r.status().message();
  alg[0] = 2;
  EXPECT_EQ(ParseNoteVerifierKey(name + "+" + vkey.substr(p1 + 1, 8) + "+" + Base64Encode(alg), "k").status().code(),
            Code::kUnsupported);
}

}  // namespace
}  // namespace enclave::audit
