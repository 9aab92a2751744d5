// libFuzzer target: the readers of exchanged proof material (docs/formats/audit-log.md,
// sections 4.1 and 8). The first byte picks the reader: '0' a proof file (ParseStrictJson,
// Proof::FromJson, then VerifyProof with the hashes only), '1' a verifier key line then a
// signed note ("VKEY\nNOTE": ParseNoteVerifierKey, VerifyCheckpointNote), anything else a
// verifier key alone. Invariants: no crash; a proof that parses re-encodes to JSON that
// parses to the same proof; a verifier key that parses is printed back identically; an
// accepted note names a size and root whose checkpoint body it starts with.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "enclave/audit/checkpoint.h"
#include "enclave/audit/event.h"
#include "enclave/audit/proof.h"

using namespace enclave;
using namespace enclave::audit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == '0') {
    auto j = ParseStrictJson(rest, "fuzz");
    if (!j.ok()) return 0;
    auto p = Proof::FromJson(*j, "fuzz");
    if (!p.ok()) return 0;
    auto again = Proof::FromJson(p->ToJson(), "again");
    if (!again.ok() || again->ToJson() != p->ToJson()) std::abort();
    (void)VerifyProof(*p, nullptr);
    return 0;
  }
  std::string_view vkey = rest, note;
  if (data[0] == '1') {
    const size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) return 0;
    vkey = rest.substr(0, nl);
    note = rest.substr(nl + 1);
  }
  auto key = ParseNoteVerifierKey(vkey, "fuzz");
  if (!key.ok()) return 0;
  if (NoteVerifierKey(*key) != vkey) std::abort();
  if (data[0] != '1') return 0;
  auto cp = VerifyCheckpointNote(note, *key, "fuzz");
  if (cp.ok() && note.rfind(CheckpointBody(key->log_id, cp->tree_size, cp->root), 0) != 0) std::abort();
  return 0;
}
