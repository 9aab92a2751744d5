// The witness's parts without a process (docs/formats/witness.md): the add-checkpoint body,
// cosignature/v1 lines computed by hand, the witness key file, every decision of
// EvaluateAddCheckpoint, the state directory across reopenings, and the HTTP request reader.
#include <gtest/gtest.h>
#include <sodium.h>
#include <sys/stat.h>

#include <map>

#include "audit_test_util.h"
#include "enclave/audit/checkpoint.h"
#include "enclave/audit/cosignature.h"
#include "enclave/audit/internal/witness_http.h"
#include "enclave/audit/witness.h"
#include "enclave/audit/witness_policy.h"
#include "enclave/crypto/hash.h"

namespace enclave::audit {
namespace {

using namespace testing;

// A log of `n` entries, one head per entry, and its checkpoints by size.
struct LogWithCheckpoints {
  TestLog log;
  std::vector<Hash> leaves;
  std::vector<std::string> notes;  // notes[s]: the checkpoint of size s
  std::vector<WitnessedLog> witnessed() const {
    const std::string origin = CheckpointOrigin(log.pub.log_id);
    return {{origin, log.pub.key, NoteKeyHash(origin, log.pub.key)}};
  }
};

LogWithCheckpoints MakeCheckpoints(const std::string& name, uint64_t n) {
  LogWithCheckpoints l{MakeLog(name), {}, {}};
  AppendSamples(l.log, 0, n);
  auto v = VerifyLog(l.log.dir.string(), l.log.pub);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  l.leaves = v->leaf_hashes;
  l.notes.resize(n + 1);
  for (const TreeHeadAt& h : v->tree_heads) l.notes[h.sth.head.tree_size] = *FormatCheckpointNote(l.log.pub, h.sth);
  return l;
}

std::string Body(uint64_t old, const std::vector<Hash>& proof, const std::string& note) {
  return FormatAddCheckpointRequest({old, proof, note});
}

std::vector<Hash> Proof(const LogWithCheckpoints& l, uint64_t from, uint64_t to) {
  if (from == 0 || from == to) return {};
  auto p = ConsistencyProof(l.leaves, from, to);
  EXPECT_TRUE(p.ok());
  return *p;
}

TEST(WitnessRequest, BodyRoundTripsAndIsStrict) {
  Hash h1{}, h2{};
  h1[0] = 1;
  h2[31] = 2;
  const std::string note = "o\n1\nAAAA\n\n\xe2\x80\x94 o AAAAAAA=\n";
  const std::string body = Body(20852014, {h1, h2}, note);
  EXPECT_EQ(body, "old 20852014\n" + Base64Encode(h1) + "\n" + Base64Encode(h2) + "\n\n" + note);
  auto r = ParseAddCheckpointRequest(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->old_size, 20852014u);
  ASSERT_EQ(r->proof.size(), 2u);
  EXPECT_EQ(r->proof[1], h2);
  EXPECT_EQ(r->checkpoint, note);
  auto refused = [](const std::string& b, const std::string& why) {
    auto p = ParseAddCheckpointRequest(b);
    ASSERT_FALSE(p.ok()) << why;
    EXPECT_EQ(p.status().code(), Code::kInvalidInput);
    EXPECT_NE(p.status().message().find(why), std::string::npos) << p.status().message();
  };
  refused("old 012\n\n" + note, "old size");
  refused("old -1\n\n" + note, "old size");
  refused("old 18446744073709551616\n\n" + note, "old size");
  refused("Old 1\n\n" + note, "'old N'");
  refused("old 1\n" + Base64Encode(h1) + "\n" + note, "consistency proof line 2");  // no blank line: the note is read as proof
  std::string noncanonical = Base64Encode(h1);
  noncanonical[42] = 'B';  // padding bits set
  refused("old 1\n" + noncanonical + "\n\n" + note, "consistency proof line 1");
  refused("old 1\n" + Base64Encode(std::vector<uint8_t>(31, 7)) + "\n\n" + note, "consistency proof line 1");
  refused("old 1\n\n", "no checkpoint");
  refused("old 1\n" + Base64Encode(h1), "no blank line");
  std::vector<Hash> many(64, h1);
  refused(Body(1, many, note), "more than 63");
  many.pop_back();
  EXPECT_TRUE(ParseAddCheckpointRequest(Body(1, many, note)).ok()) << "63 lines are allowed";
  refused(Body(1, {}, std::string(kMaxNoteBytes + 1, 'x')), "16 KiB");
  refused(std::string(kMaxAddCheckpointBytes + 1, 'x'), "32 KiB");
}

TEST(Cosignature, LineComputedByHand) {
  auto key = WitnessSigningKey::Generate("witness.example/w1");
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  const std::string text = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
  auto line = key->Cosign(text, 1679315147);
  ASSERT_TRUE(line.ok());
  const std::string prefix = "\xe2\x80\x94 witness.example/w1 ";
  ASSERT_EQ(line->substr(0, prefix.size()), prefix);
  ASSERT_EQ(line->back(), '\n');
  auto blob = Base64DecodeStrict(line->substr(prefix.size(), line->size() - prefix.size() - 1));
  ASSERT_TRUE(blob.ok());
  ASSERT_EQ(blob->size(), 4u + 8 + 64);
  const PublicKeyBytes& pk = key->public_key().key;
  std::string id_input = "witness.example/w1\n\x04";
  id_input.append(reinterpret_cast<const char*>(pk.data()), pk.size());
  const Hash id = crypto::Sha256(AsBytes(id_input));
  EXPECT_TRUE(std::equal(id.begin(), id.begin() + 4, blob->begin())) << "key id = SHA-256(name || 0x0A || 0x04 || key)[:4]";
  uint64_t t = 0;
  for (int i = 4; i < 12; ++i) t = (t << 8) | (*blob)[static_cast<size_t>(i)];
  EXPECT_EQ(t, 1679315147u) << "big-endian timestamp";
  const std::string message = "cosignature/v1\ntime 1679315147\n" + text;
  EXPECT_EQ(crypto_sign_verify_detached(blob->data() + 12, reinterpret_cast<const uint8_t*>(message.data()),
                                        message.size(), pk.data()),
            0);
  // The verifier key: name+keyid+base64(0x04 || key), and it reads back.
  const std::string vkey = key->public_key().VerifierKey();
  std::vector<uint8_t> typed{0x04};
  typed.insert(typed.end(), pk.begin(), pk.end());
  EXPECT_EQ(vkey, "witness.example/w1+" + HexEncode(ByteSpan(id.data(), 4)) + "+" + Base64Encode(typed));
  auto parsed = WitnessPublicKey::Parse(vkey, "vkey");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->key, pk);
  // A log's Ed25519 vkey (type 0x01) is not a cosigner key.
  auto log = LogSigningKey::Generate();
  EXPECT_EQ(WitnessPublicKey::Parse(NoteVerifierKey(log->public_key()), "vkey").status().code(), Code::kUnsupported);
}

TEST(Cosignature, FindCosignatureChecksNameKeyIdTextAndSignature) {
  auto w1 = WitnessSigningKey::Generate("w.example/1");
  auto w2 = WitnessSigningKey::Generate("w.example/2");
  ASSERT_TRUE(w1.ok() && w2.ok());
  const std::string text = "origin\n5\n" + Base64Encode(Hash{}) + "\n";
  const std::string line = *w1->Cosign(text, 1700000000);
  auto note = ParseNote(text + "\n" + line, "n");
  ASSERT_TRUE(note.ok()) << note.status().ToString();
  auto c = FindCosignature(*note, w1->public_key());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->timestamp, 1700000000u);
  EXPECT_EQ(c->line, line);
  EXPECT_EQ(FindCosignature(*note, w2->public_key()).status().code(), Code::kNotFound);
  // Another text under the same line: the signature does not verify.
  auto other = ParseNote("origin\n6\n" + Base64Encode(Hash{}) + "\n\n" + line, "n");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(FindCosignature(*other, w1->public_key()).status().code(), Code::kAuthFailed);
  // w2's key under w1's name: the key id does not match, so it is not w1's line.
  WitnessPublicKey renamed = WitnessPublicKey::FromKey("w.example/1", w2->public_key().key);
  EXPECT_EQ(FindCosignature(*note, renamed).status().code(), Code::kNotFound);
  // A changed timestamp byte, or a line of the wrong length, with w1's name and key id.
  std::vector<uint8_t> blob(w1->public_key().key_id.begin(), w1->public_key().key_id.end());
  auto sig = Base64DecodeStrict(line.substr(line.find(' ', 4) + 1, line.size() - line.find(' ', 4) - 2));
  ASSERT_TRUE(sig.ok());
  std::vector<uint8_t> changed = *sig;
  changed[11] ^= 1;
  auto changed_note = ParseNote(text + "\n" + FormatSignatureLine({"w.example/1", w1->public_key().key_id,
                                                                     std::vector<uint8_t>(changed.begin() + 4, changed.end())}),
                                "n");
  ASSERT_TRUE(changed_note.ok());
  EXPECT_EQ(FindCosignature(*changed_note, w1->public_key()).status().code(), Code::kAuthFailed);
  auto short_note = ParseNote(text + "\n" + FormatSignatureLine({"w.example/1", w1->public_key().key_id,
                                                                   std::vector<uint8_t>(sig->begin() + 4, sig->end() - 1)}),
                              "n");
  ASSERT_TRUE(short_note.ok());
  EXPECT_EQ(FindCosignature(*short_note, w1->public_key()).status().code(), Code::kAuthFailed);
}

TEST(Cosignature, KeyFileRoundTripAndRefusals) {
  const fs::path dir = ScratchDir("witness-key");
  const std::string path = (dir / "w.key").string();
  auto key = WitnessSigningKey::Generate("witness.example/w1");
  ASSERT_TRUE(key.ok());
  ASSERT_TRUE(key->Save(path).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(key->Save(path).code(), Code::kAlreadyExists) << "never overwrites";
  auto back = WitnessSigningKey::Load(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->public_key().VerifierKey(), key->public_key().VerifierKey());
  EXPECT_EQ(*back->Cosign("t\n", 1), *key->Cosign("t\n", 1)) << "Ed25519 is deterministic: the same key";
  std::vector<uint8_t> bytes = ReadBytes(path);
  ASSERT_EQ(bytes.size(), 72u + 18);
  ::chmod(path.c_str(), 0640);
  EXPECT_EQ(WitnessSigningKey::Load(path).status().code(), Code::kPermissionDenied);
  auto rewrite = [&](std::vector<uint8_t> b) {
    ::unlink(path.c_str());
    WriteBytes(path, b);
    ::chmod(path.c_str(), 0600);
    return WitnessSigningKey::Load(path).status();
  };
  std::vector<uint8_t> b = bytes;
  b[0] = 'X';
  EXPECT_EQ(rewrite(b).code(), Code::kInvalidInput);
  b = bytes;
  b[50] ^= 1;  // the stored public key
  EXPECT_NE(rewrite(b).message().find("does not match the seed"), std::string::npos);
  b = bytes;
  b.push_back(' ');  // a space in the name
  EXPECT_EQ(rewrite(b).code(), Code::kInvalidInput);
  b.assign(bytes.begin(), bytes.begin() + 72);  // no name
  EXPECT_EQ(rewrite(b).code(), Code::kInvalidInput);
  EXPECT_EQ(rewrite(bytes).code(), Code::kOk);
  EXPECT_EQ(WitnessSigningKey::Generate("has space").status().code(), Code::kInvalidInput);
  EXPECT_EQ(WitnessSigningKey::Generate("a+b").status().code(), Code::kInvalidInput);
  EXPECT_EQ(WitnessSigningKey::Generate(std::string(256, 'n')).status().code(), Code::kInvalidInput);
}

// Key names as the signed-note specification (and Go's note package) have them: valid
// UTF-8 without any of Unicode's white space; other non-ASCII letters are fine. Checked where
// a name is made (keygen), read (a verifier key) and met on a signature line.
TEST(NoteKeyNames, Utf8WithoutUnicodeSpace) {
  for (const char* good : {"w\xc3\xa9", "\xe8\xa8\xbc\xe4\xba\xba/1", "w\xf0\x9f\x94\x91", "w\xc2\x80x"})
    EXPECT_TRUE(ValidNoteKeyName(good)) << good;
  for (const char* bad : {"w\xc2\x85x", "w\xc2\xa0x", "w\xe1\x9a\x80", "w\xe2\x80\x80", "w\xe2\x80\x8a",
                          "w\xe2\x80\xa8", "w\xe2\x80\xa9", "w\xe2\x80\xaf", "w\xe2\x81\x9f", "w\xe3\x80\x80",
                          "w\xff", "w\xc3", "w\xc0\xaf", "w\xed\xa0\x80", "w\tx", "w x", "w+x", ""}) {
    EXPECT_FALSE(ValidNoteKeyName(bad)) << bad;
    EXPECT_EQ(WitnessSigningKey::Generate(bad).status().code(), Code::kInvalidInput) << bad;
  }
  auto key = WitnessSigningKey::Generate("w\xc3\xa9");
  ASSERT_TRUE(key.ok());
  const std::string vkey = key->public_key().VerifierKey();
  EXPECT_TRUE(WitnessPublicKey::Parse(vkey, "vkey").ok());
  std::string spaced = vkey;
  spaced.replace(0, 3, "w\xc2\xa0");  // "w\xc3\xa9" is 3 bytes: another name of the same length
  const Status spaced_status = WitnessPublicKey::Parse(spaced, "vkey").status();
  EXPECT_EQ(spaced_status.code(), Code::kInvalidInput);
  EXPECT_NE(spaced_status.message().find("name"), std::string::npos) << spaced_status.ToString();
  auto line = key->Cosign("t\n", 1);
  ASSERT_TRUE(line.ok());
  std::string note = "t\n\n" + *line;
  ASSERT_TRUE(ParseNote(note, "note").ok());
  note.replace(note.find("w\xc3\xa9"), 3, "w\xc2\xa0");
  EXPECT_EQ(ParseNote(note, "note").status().code(), Code::kInvalidInput);
}

TEST(WitnessDecision, EveryRefusalOfTheSpec) {
  LogWithCheckpoints l = MakeCheckpoints("witness-decide", 10);
  const auto logs = l.witnessed();
  std::optional<CosignedState> st;
  auto eval = [&](const std::string& body) {
    return EvaluateAddCheckpoint(body, logs, [&](const std::string& origin) -> const CosignedState* {
      return st && origin == logs[0].origin ? &*st : nullptr;
    });
  };
  auto expect = [&](const std::string& body, int status, const std::string& why) {
    Evaluation e = eval(body);
    EXPECT_EQ(e.status, status) << why << ": " << e.message;
    if (!why.empty()) {
      EXPECT_NE(e.message.find(why), std::string::npos) << e.message;
    }
    return e;
  };
  // Nothing cosigned yet: old 0 and an empty proof, the checkpoint trusted on first use.
  Evaluation e = expect(Body(0, {}, l.notes[4]), 200, "");
  EXPECT_TRUE(e.log_signed);
  EXPECT_EQ(e.tree_size, 4u);
  expect(Body(0, Proof(l, 1, 4), l.notes[4]), 422, "from size 0 must be empty");
  expect(Body(3, Proof(l, 3, 4), l.notes[4]), 409, "not the size last cosigned, 0");
  st = CosignedState{4, e.root, e.note};
  expect(Body(4, Proof(l, 4, 9), l.notes[9]), 200, "");
  expect(Body(4, {}, l.notes[4]), 200, "");  // the same checkpoint again
  e = expect(Body(0, {}, l.notes[9]), 409, "not the size last cosigned, 4");
  ASSERT_TRUE(e.current_size);
  EXPECT_EQ(*e.current_size, 4u);
  expect(Body(5, {}, l.notes[4]), 400, "larger than the checkpoint's");
  expect(Body(4, Proof(l, 4, 9), l.notes[4]), 422, "between equal sizes must be empty");
  expect(Body(4, Proof(l, 5, 9), l.notes[9]), 422, "does not verify");
  std::vector<Hash> p = Proof(l, 4, 9);
  p[0][0] ^= 1;
  expect(Body(4, p, l.notes[9]), 422, "does not verify");
  p = Proof(l, 4, 9);
  p.pop_back();
  expect(Body(4, p, l.notes[9]), 422, "does not verify");
  p = Proof(l, 4, 9);
  p.push_back(p[0]);
  expect(Body(4, p, l.notes[9]), 422, "does not verify");
  // Another tree at the cosigned size.
  st->root[0] ^= 1;
  e = expect(Body(4, {}, l.notes[4]), 409, "the log forked");
  EXPECT_FALSE(e.current_size) << "a fork is not an old-size conflict: no size in the answer";
  st->root[0] ^= 1;
  // Signatures: another key for the same origin, a damaged signature, an unknown origin.
  LogWithCheckpoints other = MakeCheckpoints("witness-decide-other", 2);
  expect(Body(4, {}, other.notes[2]), 404, "unknown log origin");
  const std::string origin = logs[0].origin;
  auto forger = LogSigningKey::Generate();
  const std::string text = l.notes[5].substr(0, l.notes[5].find("\n\n") + 1);
  auto forged_sig = forger->Sign(AsBytes(text));
  const std::string forged =
      text + "\n" + FormatSignatureLine({origin, NoteKeyHash(origin, forger->public_key().key),
                                         std::vector<uint8_t>(forged_sig->begin(), forged_sig->end())});
  expect(Body(4, Proof(l, 4, 5), forged), 403, "not signed by a key of the log");
  std::string damaged = l.notes[5];
  damaged[damaged.size() - 5] = damaged[damaged.size() - 5] == 'A' ? 'B' : 'A';
  expect(Body(4, Proof(l, 4, 5), damaged), 403, "does not verify");
  // Our line and another signer's: the other is ignored.
  expect(Body(4, Proof(l, 4, 5), l.notes[5] + forged.substr(forged.rfind("\xe2\x80\x94"))), 200, "");
  expect(Body(4, {}, "not a note"), 400, "");
  expect(Body(4, {}, "o\n1\nAAAA\n\n\xe2\x80\x94 o AAAAAAA=\n"), 400, "line 3");
  expect("old 4", 400, "");
}

TEST(WitnessState, DurableAcrossReopeningAndFailsClosedOnDamage) {
  LogWithCheckpoints l = MakeCheckpoints("witness-state", 6);
  const fs::path dir = ScratchDir("witness-state-dir") / "state";
  auto open = [&]() { return Witness::Open(dir.string(), *WitnessSigningKey::Generate("w.example/x"), l.witnessed()); };
  {
    auto w = open();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ(open().status().code(), Code::kFailedPrecondition) << "one witness per state directory";
    EXPECT_EQ((*w)->AddCheckpoint(Body(0, {}, l.notes[3])).status, 200);
    WitnessAnswer a = (*w)->AddCheckpoint(Body(0, {}, l.notes[6]));
    EXPECT_EQ(a.status, 409);
    EXPECT_EQ(a.content_type, "text/x.tlog.size");
    EXPECT_EQ(a.body, "3\n");
  }
  const std::string file = (dir / "logs" / StateFileName(l.witnessed()[0].origin)).string();
  {
    std::vector<uint8_t> b = ReadBytes(file);
    EXPECT_EQ(std::string(b.begin(), b.end()), l.notes[3]) << "the state is the cosigned checkpoint";
    auto w = open();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ((*w)->Cosigned(l.witnessed()[0].origin)->tree_size, 3u);
    EXPECT_EQ((*w)->AddCheckpoint(Body(0, {}, l.notes[6])).body, "3\n");
    EXPECT_EQ((*w)->AddCheckpoint(Body(3, Proof(l, 3, 6), l.notes[6])).status, 200);
  }
  std::vector<uint8_t> good = ReadBytes(file);
  std::vector<uint8_t> bad = good;
  bad[bad.size() - 10] ^= 1;  // the log's signature
  WriteBytes(file, bad);
  auto w = open();
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), Code::kAuthFailed);
  EXPECT_NE(w.status().message().find(file), std::string::npos) << w.status().message();
  // A checkpoint of another log in this log's state file.
  LogWithCheckpoints other = MakeCheckpoints("witness-state-other", 1);
  std::vector<WitnessedLog> both = l.witnessed();
  both.push_back(other.witnessed()[0]);
  WriteBytes(file, std::vector<uint8_t>(other.notes[1].begin(), other.notes[1].end()));
  auto w2 = Witness::Open(dir.string(), *WitnessSigningKey::Generate("w.example/x"), both);
  ASSERT_FALSE(w2.ok());
  EXPECT_NE(w2.status().message().find("holds a checkpoint of"), std::string::npos) << w2.status().message();
  WriteBytes(file, good);
  EXPECT_TRUE(open().ok());
}

TEST(WitnessHttp, RequestsSplitAnywhereAndLimits) {
  const std::string body = "old 0\n\nsome checkpoint\n";
  const std::string one = "POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
  const std::string chunked = "POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\n"
                              "Expect: 100-continue\r\n\r\n5\r\nold 0\r\n" +
                              std::string("12\r\n\n\nsome checkpoint\n\r\n0\r\n\r\n");
  const std::string stream = one + chunked + "GET / HTTP/1.0\r\n\r\n";
  // Every split point of the two first requests gives the same requests.
  for (size_t cut = 0; cut <= stream.size(); cut += 7) {
    internal::HttpRequestReader r;
    std::string pending;
    std::vector<internal::HttpRequest> got;
    for (const std::string& piece : {stream.substr(0, cut), stream.substr(cut)}) {
      pending += piece;
      for (;;) {
        pending.erase(0, r.Feed(pending));
        ASSERT_EQ(r.error_status(), 0) << r.error();
        if (!r.done()) break;
        got.push_back(r.Take());
      }
    }
    ASSERT_EQ(got.size(), 3u) << "cut at " << cut;
    EXPECT_EQ(got[0].body, body);
    EXPECT_TRUE(got[0].keep_alive);
    EXPECT_EQ(got[1].body, body) << "chunked, decoded";
    EXPECT_TRUE(got[1].expect_continue);
    EXPECT_EQ(got[2].method, "GET");
    EXPECT_FALSE(got[2].keep_alive) << "HTTP/1.0";
  }
  auto status_of = [](const std::string& bytes) {
    internal::HttpRequestReader r;
    r.Feed(bytes);
    return r.error_status();
  };
  EXPECT_EQ(status_of("POST /add-checkpoint HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n"), 431);
  EXPECT_EQ(status_of("POST /add-checkpoint HTTP/1.1\r\nContent-Length: 40000\r\n\r\n"), 413);
  EXPECT_EQ(status_of("POST /add-checkpoint HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8001\r\n" +
                      std::string(0x8001, 'x') + "\r\n0\r\n\r\n"),
            413)
      << "a chunked body is limited too";
  EXPECT_EQ(status_of("NOT HTTP\r\n\r\n"), 400);
  // Routing.
  auto route = [](internal::HttpRequest req) {
    return internal::Route(req, [](std::string_view b) { return WitnessAnswer{200, "text/plain", std::string(b)}; });
  };
  internal::HttpRequest req{"POST", "/add-checkpoint", "x", true, false, false};
  EXPECT_EQ(route(req).status, 200);
  req.method = "GET";
  internal::HttpResponse r = route(req);
  EXPECT_EQ(r.status, 405);
  EXPECT_NE(internal::SerializeResponse(r).find("\r\nAllow: POST\r\n"), std::string::npos);
  req.method = "POST";
  req.target = "/add-checkpoint?x";
  EXPECT_EQ(route(req).status, 404);
  req.target = "/add-checkpoint";
  req.content_encoding = true;
  EXPECT_EQ(route(req).status, 415);
  EXPECT_EQ(internal::SerializeResponse({409, "text/x.tlog.size", "7\n", true, false}),
            "HTTP/1.1 409 Conflict\r\nContent-Type: text/x.tlog.size\r\nContent-Length: 2\r\nConnection: close\r\n\r\n7\n");
}

// C2SP tlog-policy: the example of the spec (two groups of three under "all"), and the
// rules a policy file must keep.
TEST(WitnessPolicy, TheSpecExampleAndItsRules) {
  std::vector<std::string> vkeys;
  for (const char* n : {"x1", "x2", "x3", "y1", "y2", "y3"}) {
    vkeys.push_back(WitnessSigningKey::Generate(std::string("w.example/") + n)->public_key().VerifierKey());
  }
  auto log = LogSigningKey::Generate();
  const std::string log_line = "log " + NoteVerifierKey(log->public_key()) + " https://log.example/\n";
  const std::string text = log_line + "\n# X\nwitness X1 " + vkeys[0] + " http://127.0.0.1:1\n\twitness X2 " + vkeys[1] +
                           "\nwitness X3 " + vkeys[2] + "\ngroup X-witnesses 2 X1 X2 X3\n\nwitness Y1 " + vkeys[3] +
                           "\nwitness Y2 " + vkeys[4] + "\nwitness Y3 " + vkeys[5] +
                           "\ngroup Y-witnesses any Y1 Y2 Y3\n  # both\ngroup X-and-Y all X-witnesses Y-witnesses\n"
                           "quorum X-and-Y\n";
  auto p = WitnessPolicy::Parse(text, "policy");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->witnesses().size(), 6u);
  EXPECT_EQ(p->witnesses()[0].url, "http://127.0.0.1:1");
  EXPECT_EQ(p->witnesses()[1].url, "");
  ASSERT_EQ(p->logs().size(), 1u);
  EXPECT_EQ(p->logs()[0].origin, CheckpointOrigin(log->public_key().log_id));
  EXPECT_EQ(p->Describe(), "2 of {2 of {X1, X2, X3}, 1 of {Y1, Y2, Y3}}");
  EXPECT_TRUE(p->Satisfied({"X1", "X3", "Y2"}));
  EXPECT_FALSE(p->Satisfied({"X1", "Y1", "Y2", "Y3"})) << "one X is not two";
  EXPECT_FALSE(p->Satisfied({"X1", "X2", "X3"})) << "no Y";
  EXPECT_FALSE(p->Satisfied({"X-witnesses", "Y-witnesses"})) << "group names are not cosigners";
  EXPECT_FALSE(p->Satisfied({}));
  auto none = WitnessPolicy::Parse("quorum none\n", "p");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->Satisfied({}));
  EXPECT_EQ(none->Describe(), "none");
  auto refused = [&](const std::string& t, const std::string& why) {
    auto r = WitnessPolicy::Parse(t, "policy");
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_EQ(r.status().code(), why == "type" ? Code::kUnsupported : Code::kInvalidInput) << r.status().ToString();
    if (why != "type") {
      EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
    }
  };
  const std::string w1 = "witness A " + vkeys[0] + "\n";
  refused(w1, "no quorum line");
  refused(w1 + "quorum A\nquorum A\n", ":3: a second quorum line");
  refused(w1 + "quorum B\n", "'B' is not defined above");
  refused("quorum A\n" + w1, ":1: 'A' is not defined above");
  refused(w1 + "witness A " + vkeys[1] + "\nquorum A\n", "the name 'A' is taken");
  refused(w1 + "witness B " + vkeys[0] + "\nquorum A\n", "the same witness key is listed twice");
  refused(w1 + "witness none " + vkeys[1] + "\nquorum A\n", "the name 'none' is taken");
  refused(w1 + "group G 2 A\nquorum G\n", "threshold must be all, any or 1..1");
  refused(w1 + "group G 0 A\nquorum G\n", "threshold");
  refused(w1 + "group G 01 A\nquorum G\n", "threshold");
  refused(w1 + "group G any A A\nquorum G\n", "listed twice in the group");
  refused(w1 + "group G any\nquorum G\n", "expected: group");
  refused(w1 + "group G any none\nquorum G\n", "'none' is not a witness or group");
  refused(w1 + "quorum A", "does not end in a newline");
  refused(w1 + "quorum A\r\n", "control character");
  refused(w1 + "witnesses A\nquorum A\n", "unknown keyword 'witnesses'");
  refused(log_line + log_line + "quorum none\n", "the same log key is listed twice");
  refused("witness A " + NoteVerifierKey(log->public_key()) + "\nquorum A\n", "type");  // a log key as a witness
  refused("log " + vkeys[0] + "\nquorum none\n", "type");                                // a cosigner key as a log
  std::string big;
  for (int i = 0; i < 65; ++i) big += "witness W" + std::to_string(i) + " " + WitnessSigningKey::Generate("w.example/" +
                                          std::to_string(i))->public_key().VerifierKey() + "\n";
  refused(big + "quorum W0\n", "more than 64 witnesses");
}

// The fuzz seeds are written by an independent Python implementation of the format
// (tests/fuzz/make_witness_seeds.py); each must be decided as its name says.
TEST(WitnessDecision, IndependentSeedsAreDecidedAsNamed) {
  auto from_seed = [](uint8_t first) {
    uint8_t seed[32], sk[64];
    for (int i = 0; i < 32; ++i) seed[i] = static_cast<uint8_t>(first + i);
    PublicKeyBytes pk{};
    EXPECT_EQ(crypto_sign_seed_keypair(pk.data(), sk, seed), 0);
    return pk;
  };
  const LogPublicKey log = LogPublicKey::FromKey(from_seed(0x20));
  const std::string origin = CheckpointOrigin(log.log_id);
  const WitnessedLog logs[] = {{origin, log.key, NoteKeyHash(origin, log.key)}};
  std::vector<Hash> leaves;
  for (char c = '0'; c <= '9'; ++c) leaves.push_back(LeafHash(AsBytes(std::string(1, c))));
  const CosignedState state{2, RootFromLeafHashes(std::span<const Hash>(leaves.data(), 2)), ""};
  const std::string dir = std::string(ENCLAVE_FUZZ_CORPUS) + "/audit_witness/";
  auto seed = [&](const std::string& name) {
    std::vector<uint8_t> b = ReadBytes(dir + name);
    return b.empty() ? std::string() : std::string(b.begin() + 1, b.end());
  };
  const std::map<std::string, int> expected = {{"add-2-to-5", 200},          {"add-2-to-9", 200},
                                               {"add-same-size", 200},       {"add-with-cosignature", 200},
                                               {"add-old-0", 409},           {"add-bad-proof", 422},
                                               {"add-forged-signature", 403}, {"add-unknown-origin", 404}};
  for (const auto& [name, status] : expected) {
    Evaluation e = EvaluateAddCheckpoint(seed(name), logs, [&](const std::string& o) -> const CosignedState* {
      return o == origin ? &state : nullptr;
    });
    EXPECT_EQ(e.status, status) << name << ": " << e.message;
  }
  const WitnessPublicKey witness = WitnessPublicKey::FromKey("fuzz.example/w", from_seed(0x40));
  const std::string text = origin + "\n2\n" + Base64Encode(state.root) + "\n";
  for (const char* name : {"answer-cosignature", "answer-two-lines"}) {
    auto note = ParseNote(text + "\n" + seed(name), name);
    ASSERT_TRUE(note.ok()) << note.status().ToString();
    EXPECT_TRUE(FindCosignature(*note, witness).ok()) << name;
  }
  EXPECT_TRUE(WitnessPublicKey::Parse(seed("vkey-cosigner"), "seed").ok());
  EXPECT_TRUE(ParseNoteVerifierKey(seed("vkey-log"), "seed").ok());
}

}  // namespace
}  // namespace enclave::audit
