// Fuzz target: the exported-model parsers (docs/formats/model-export.md). The first byte
// chooses what the input is:
//   '{'  an export public key file: crypto::ParseExportPublicKey; an accepted key must
//        encode and parse back to the same key;
//   'E'  a whole exported-model file (memfd): SealedFileReader::Open, ParseModelMetadata
//        (accepted metadata must re-encode to the same bytes), UnwrapModelDek with the
//        fixed fuzz private key below, then the key commitment, header tag and every chunk;
//   else the input is model metadata on its own: ParseModelMetadata and re-encode.
//
// Seeds (tests/fuzz/corpus/model_export/) are sealed to the fixed key's public half, so the
// fuzzer starts past the recipient unwrap; tests/interop/make_fuzz_seeds.py makes them with
// the independent Python implementation.
#include <sodium.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "enclave/crypto/model_export.h"
#include "fuzz_util.h"

namespace {

using namespace enclave;

// A fuzz-only X25519 private key (bytes 0x40..0x5f): it protects nothing.
crypto::SecretBytes FixedRecipientKey() {
  std::vector<uint8_t> k(32);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(0x40 + i);
  auto s = crypto::SecretBytes::CopyFrom(k);
  if (!s.ok()) __builtin_trap();
  return std::move(s).value();
}

void CheckMetadataRoundTrip(ByteSpan bytes) {
  auto meta = crypto::ParseModelMetadata(bytes);
  if (!meta.ok()) return;
  const std::vector<uint8_t> again = crypto::EncodeModelMetadata(*meta);
  if (!std::equal(again.begin(), again.end(), bytes.begin(), bytes.end())) __builtin_trap();
}

void FuzzPublicKey(ByteSpan bytes) {
  auto key = crypto::ParseExportPublicKey(bytes);
  if (!key.ok()) return;
  const std::string text = crypto::EncodeExportPublicKey(*key);
  auto back = crypto::ParseExportPublicKey(AsBytes(text));
  if (!back.ok() || back->public_key != key->public_key || back->key_id != key->key_id ||
      back->keystore_id != key->keystore_id || back->name != key->name) {
    __builtin_trap();
  }
}

void FuzzModelFile(const uint8_t* data, size_t size) {
  static const crypto::SecretBytes recipient = FixedRecipientKey();
  static fuzz::MemFile file;
  auto reader = crypto::SealedFileReader::Open(file.Fill(data, size));
  if (!reader.ok()) return;
  const crypto::SealedHeader& h = (*reader)->header();
  if (h.params.content_type != crypto::ContentType::kExportedModel) return;
  CheckMetadataRoundTrip(h.params.metadata);
  auto meta = crypto::ParseModelMetadata(h.params.metadata);
  if (!meta.ok()) return;
  auto dek = crypto::UnwrapModelDek(h, *meta, recipient);
  if (!dek.ok()) return;
  if (dek->size() != crypto::kAeadKeyBytes) __builtin_trap();
  if (!(*reader)->Unlock(*dek).ok()) return;
  std::vector<uint8_t> out;
  for (uint64_t i = 0; i < h.chunk_count; ++i) {
    out.resize(h.ChunkPlaintextSize(i));
    if (!(*reader)->ReadChunk(i, out).ok()) return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (enclave::crypto::InitCrypto().ok() == false) __builtin_trap();
  const ByteSpan bytes(data, size);
  if (data[0] == '{') {
    FuzzPublicKey(bytes);
  } else if (data[0] == 'E') {
    FuzzModelFile(data, size);
  } else {
    CheckMetadataRoundTrip(bytes);
  }
  return 0;
}
