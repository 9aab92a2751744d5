// Fuzz target: the sealed-file header parser (crypto::ParseSealedHeader) and the tabular
// schema decoder (dataset::DecodeSchema) that reads the header's metadata. Both see
// attacker-controlled bytes before any key is involved (`enclave-data inspect`).
//
// The input is parsed as a header; when that succeeds, the derived sizes are computed,
// the schema in its metadata is decoded and the header is checked against the fixed
// fuzz DEK (reaching the commitment and HMAC code with seeds sealed under it). The
// whole input is also decoded as a schema on its own, so schema-only seeds exercise
// DecodeSchema without having to keep a header consistent around it.
#include <cstddef>
#include <cstdint>

#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/schema.h"
#include "fuzz_util.h"

namespace {

void CheckSchema(enclave::ByteSpan bytes) {
  auto schema = enclave::dataset::DecodeSchema(bytes);
  if (!schema.ok()) return;
  // A decoded schema is valid: exactly one label, re-encoding gives the same bytes.
  if (!schema->Validate().ok()) __builtin_trap();
  if (schema->label_column() >= schema->columns.size()) __builtin_trap();
  if (enclave::dataset::EncodeSchema(*schema) != std::vector<uint8_t>(bytes.begin(), bytes.end())) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enclave;
  static const crypto::SecretBytes dek = fuzz::FixedDek();
  ByteSpan bytes(data, size);

  CheckSchema(bytes);

  auto length = crypto::PeekHeaderLength(bytes);
  auto header = crypto::ParseSealedHeader(bytes);
  if (!header.ok()) return 0;
  const crypto::SealedHeader& h = *header;
  // What the parser promises its callers.
  if (!length.ok() || *length != h.header_length || h.header_length > size) __builtin_trap();
  if (h.chunk_count == 0 || h.params.chunk_size == 0) __builtin_trap();
  volatile uint64_t sink = h.FileSize() + h.ChunkOffset(h.chunk_count - 1) + h.ChunkPlaintextSize(h.chunk_count - 1) +
                           h.ChunkPlaintextSize(0);
  (void)sink;
  if (h.ChunkPlaintextSize(h.chunk_count - 1) > h.params.chunk_size) __builtin_trap();

  CheckSchema(h.params.metadata);
  (void)crypto::SealedFileKey::Unlock(h, dek);
  return 0;
}
