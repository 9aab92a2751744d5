// The PCR files tpm2-tools 5.x writes (`tpm2_quote -o FILE -F values|serialized`,
// `tpm2_pcrread -o FILE -F ...`), read exactly: docs/formats/evidence.md, "Third-party
// evidence". The quote itself (-m: TPMS_ATTEST, -s: TPMT_SIGNATURE) needs no reader of its
// own (tpm_types.h).
#pragma once

#include "enclave/attest/appraisal.h"
#include "enclave/attest/tpm_types.h"
#include "enclave/common/bytes.h"
#include "enclave/common/status.h"

namespace enclave::attest {

enum class Tpm2ToolsPcrFormat { kValues, kSerialized };

// "values": the digests concatenated, banks in the order of `order` (the quoted selection,
// as tpm2_quote reads its -l list), indices ascending, each its bank's size, nothing else.
Result<PcrValues> ParseTpm2ToolsPcrValues(ByteSpan file, const PcrSelection& order);

// "serialized": tpm2-tools' in-memory structures, little-endian: TPML_PCR_SELECTION (u32
// count <= 16, then 16 slots of {u16 hash, u8 sizeofSelect, u8 pcrSelect[4], u8 pad}, 132
// bytes), u32 n, then n TPML_DIGEST (u32 count 1..8, then 8 slots of {u16 size, u8
// buffer[64]}, 532 bytes each), holding the selected values in selection order. Unused
// slots, padding and bytes past a digest must be zero; the size must be exact.
Result<PcrValues> ParseTpm2ToolsPcrSerialized(ByteSpan file);

}  // namespace enclave::attest
