// libFuzzer target: what a witness and its clients read from others (docs/formats/witness.md).
// The first byte picks the reader:
//   '0' an add-checkpoint body: ParseAddCheckpointRequest (a parsed body re-encodes to the
//       same bytes), then EvaluateAddCheckpoint for the fixed fuzz log (Ed25519 seed
//       0x20..0x3f, leaves SHA-256(0x00 || "0".."9")) that has cosigned size 2; the decision
//       must be one the spec allows and agree with the state;
//   '1' HTTP/1.1 bytes for internal::HttpRequestReader, fed in pieces of the size the next
//       byte gives (0: at once), requests one after another until a refusal;
//   '2' a witness policy (WitnessPolicy::Parse): all witnesses satisfy its quorum, none
//       satisfy it only with "quorum none";
//   '3' a witness's answer, read as signature lines under a fixed checkpoint text, with the
//       fixed fuzz witness (seed 0x40..0x5f, name "fuzz.example/w");
//   else a verifier key of type 0x01 or 0x04 that must print back identically.
// Seeds: tests/fuzz/make_witness_seeds.py (Python, PyNaCl).
#include <sodium.h>

#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "enclave/audit/checkpoint.h"
#include "enclave/audit/cosignature.h"
#include "enclave/audit/internal/witness_http.h"
#include "enclave/audit/witness.h"
#include "enclave/audit/witness_policy.h"

using namespace enclave;
using namespace enclave::audit;

namespace {

PublicKeyBytes KeyFromSeed(uint8_t first) {
  uint8_t seed[32], sk[64];
  for (int i = 0; i < 32; ++i) seed[i] = static_cast<uint8_t>(first + i);
  PublicKeyBytes pk{};
  if (crypto_sign_seed_keypair(pk.data(), sk, seed) != 0) std::abort();
  return pk;
}

struct Fixed {
  WitnessedLog log;
  CosignedState state;
  WitnessPublicKey witness;
  Fixed() {
    const LogPublicKey key = LogPublicKey::FromKey(KeyFromSeed(0x20));
    log = {CheckpointOrigin(key.log_id), key.key, NoteKeyHash(CheckpointOrigin(key.log_id), key.key)};
    std::vector<Hash> leaves;
    for (char c = '0'; c <= '9'; ++c) leaves.push_back(LeafHash(AsBytes(std::string(1, c))));
    state.tree_size = 2;
    state.root = RootFromLeafHashes(std::span<const Hash>(leaves.data(), 2));
    witness = WitnessPublicKey::FromKey("fuzz.example/w", KeyFromSeed(0x40));
  }
};

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixed fixed;
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0]) {
    case '0': {
      auto r = ParseAddCheckpointRequest(rest);
      if (r.ok()) Check(FormatAddCheckpointRequest(*r) == rest);
      const WitnessedLog logs[] = {fixed.log};
      Evaluation e = EvaluateAddCheckpoint(rest, logs, [](const std::string& origin) -> const CosignedState* {
        return origin == fixed.log.origin ? &fixed.state : nullptr;
      });
      static const std::set<int> kAllowed = {200, 400, 403, 404, 409, 422};
      Check(kAllowed.count(e.status) == 1 && (e.status == 200 || !e.message.empty()));
      Check(!r.ok() ? e.status == 400 : true);
      if (e.status == 200) {
        Check(e.log_signed && e.origin == fixed.log.origin && r->old_size == fixed.state.tree_size);
        Check(e.tree_size >= fixed.state.tree_size && e.text == ParseNote(r->checkpoint, "n")->text);
      }
      if (e.current_size) Check(e.status == 409 && *e.current_size == fixed.state.tree_size);
      if (e.status == 403 || e.status == 409 || e.status == 422) Check(e.origin == fixed.log.origin);
      return 0;
    }
    case '1': {
      if (rest.empty()) return 0;
      const size_t piece = static_cast<uint8_t>(rest[0]);
      std::string_view input = rest.substr(1);
      internal::HttpRequestReader reader;
      std::string pending;
      while (reader.error_status() == 0 && (!input.empty() || !pending.empty())) {
        const size_t take = piece == 0 ? input.size() : std::min(piece, input.size());
        pending.append(input.substr(0, take));
        input.remove_prefix(take);
        const size_t used = reader.Feed(pending);
        Check(used <= pending.size());
        pending.erase(0, used);
        if (reader.done()) {
          internal::HttpRequest req = reader.Take();
          Check(req.body.size() <= kMaxAddCheckpointBytes);
          internal::HttpResponse res =
              internal::Route(req, [](std::string_view) { return WitnessAnswer{200, "text/plain", "ok\n"}; });
          Check(res.status == 200 || res.status == 404 || res.status == 405 || res.status == 415);
          continue;
        }
        if (take == 0 && used == 0) break;  // nothing more will arrive
      }
      if (reader.error_status() != 0) {
        Check(reader.error_status() == 400 || reader.error_status() == 413 || reader.error_status() == 431);
        Check(!reader.error().empty());
      }
      return 0;
    }
    case '2': {
      auto p = WitnessPolicy::Parse(rest, "fuzz");
      if (!p.ok()) {
        Check(!p.status().message().empty());
        return 0;
      }
      std::set<std::string> all;
      for (const PolicyWitness& w : p->witnesses()) all.insert(w.name);
      Check(p->Satisfied(all));
      Check(p->Satisfied({}) == p->quorum_none());
      Check(!p->Describe().empty());
      return 0;
    }
    case '3': {
      const std::string text = fixed.log.origin + "\n2\n" + Base64Encode(fixed.state.root) + "\n";
      auto note = ParseNote(text + "\n" + std::string(rest), "fuzz");
      if (!note.ok()) return 0;
      auto c = FindCosignature(*note, fixed.witness);
      if (c.ok()) Check(rest.find(c->line) != std::string_view::npos && c->timestamp <= kMaxCosignatureTime);
      return 0;
    }
    default: {
      for (uint8_t type : {kNoteAlgEd25519, kNoteAlgCosignatureV1}) {
        auto k = ParseVerifierKey(rest, type, 32, "fuzz");
        if (k.ok()) Check(FormatVerifierKey(*k) == rest);
      }
      return 0;
    }
  }
}
