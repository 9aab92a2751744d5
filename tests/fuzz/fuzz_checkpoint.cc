// Fuzz target: checkpoint files (docs/training.md#checkpoints), which `--resume` reads
// from the host's disk. The first byte chooses what the rest is:
//   'E'  a checkpoint file (memfd): its keystore id, key id and job digest are first set to
//        this process's keystore, checkpoint key and a fixed digest, so the input gets past
//        the ownership checks into the size checks, the key derivation and the chunk (or
//        version 1 message) authentication; it cannot authenticate (the key is random).
//   else the decrypted state's encoding: trainer::DecodeTrainState; an accepted state must
//        encode back to the same bytes.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "enclave/crypto/keystore.h"
#include "enclave/trainer/checkpoint.h"
#include "fuzz_util.h"

namespace {

using namespace enclave;

// A keystore of this process's own (a temporary file), with a checkpoint key.
struct Fixture {
  std::optional<crypto::Keystore> keystore;
  trainer::CheckpointKey key;
  Fixture() {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("enclave-fuzz-checkpoint-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "keystore.json").string();
    const crypto::SecretBytes pass = fuzz::FixedPassphrase();
    if (!crypto::Keystore::Init(path, pass, crypto::KdfParams{crypto::kMinOpslimit, crypto::kMinMemlimitBytes}).ok()) {
      std::abort();
    }
    auto ks = crypto::Keystore::Unlock(path, pass);
    if (!ks.ok()) std::abort();
    keystore.emplace(std::move(ks).value());
    auto k = trainer::CheckpointKeyFromKeystore(*keystore, true);
    if (!k.ok()) std::abort();
    key = std::move(k).value();
    std::filesystem::remove_all(dir);  // the keystore stays in memory
  }
};

crypto::Digest256 FixedJobDigest() {
  crypto::Digest256 d{};
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(0xd0 + i);
  return d;
}

void FuzzFile(const uint8_t* data, size_t size) {
  static const Fixture fixture;
  static const crypto::Digest256 digest = FixedJobDigest();
  static fuzz::MemFile file;
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() >= 76) {
    std::copy(fixture.key.keystore_id.begin(), fixture.key.keystore_id.end(), bytes.begin() + 12);
    std::copy(fixture.key.key_id.begin(), fixture.key.key_id.end(), bytes.begin() + 28);
    std::copy(digest.begin(), digest.end(), bytes.begin() + 44);
  }
  auto st = trainer::ReadCheckpoint(file.Fill(bytes.data(), bytes.size()), *fixture.keystore, digest);
  if (st.ok()) __builtin_trap();  // nothing here was sealed under the random key
}

void FuzzState(const uint8_t* data, size_t size) {
  auto st = trainer::DecodeTrainState(ByteSpan(data, size));
  if (!st.ok()) return;
  auto again = trainer::EncodeTrainState(*st);
  if (!again.ok() || again->size() != size || !std::equal(data, data + size, again->ExposeSecret().begin())) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] == 'E') {
    FuzzFile(data + 1, size - 1);
  } else {
    FuzzState(data + 1, size - 1);
  }
  return 0;
}
