// Fuzz target: the keystore reader (crypto::Keystore::Unlock), which parses the tenant's
// JSON keystore file, unwraps the KEK with a key derived by Argon2id from the fixed fuzz
// passphrase, then (here) unwraps every data key it lists.
//
// Argon2id runs whenever the JSON parses, with the cost the file asks for; Unlock caps it
// at 64 passes and 4 GiB, far beyond what a fuzzer can afford per input. Inputs asking
// for more than 4 passes or 1 MiB are therefore skipped here, before Unlock; the seeds
// (tests/fuzz/corpus/keystore) use 1 pass and 8 KiB, the smallest Unlock accepts.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "enclave/crypto/keystore.h"
#include "fuzz_util.h"

namespace {

constexpr uint64_t kMaxFuzzOpslimit = 4;
constexpr uint64_t kMaxFuzzMemlimit = 1u << 20;

// True when the input asks Argon2id for more than the fuzzer can afford. Uses the same
// parser and settings as the keystore, so it sees the same values.
bool TooExpensive(const uint8_t* data, size_t size) {
  auto doc = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return false;
  auto kdf = doc.find("kdf");
  if (kdf == doc.end() || !kdf->is_object()) return false;
  auto ops = kdf->find("opslimit");
  auto mem = kdf->find("memlimit_bytes");
  if (ops != kdf->end() && ops->is_number_unsigned() && ops->get<uint64_t>() > kMaxFuzzOpslimit) return true;
  if (mem != kdf->end() && mem->is_number_unsigned() && mem->get<uint64_t>() > kMaxFuzzMemlimit) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enclave;
  static const crypto::SecretBytes passphrase = fuzz::FixedPassphrase();
  static fuzz::MemFile file;
  if (TooExpensive(data, size)) return 0;

  auto ks = crypto::Keystore::Unlock(file.Fill(data, size), passphrase);
  if (!ks.ok()) return 0;
  for (const crypto::DataKeyEntry& e : ks->entries()) {
    auto dek = ks->GetDataKey(e.dataset_id, e.key_id);
    if (dek.ok() && dek->size() != crypto::kAeadKeyBytes) __builtin_trap();
  }
  return 0;
}
