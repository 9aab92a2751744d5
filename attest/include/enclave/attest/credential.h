// Software TPM2_MakeCredential (TPM 2.0 Part 1, "Credential Protection"; Part 3,
// TPM2_MakeCredential): a verifier with no TPM seals a secret to an EK and an AK name, and
// only the TPM that holds both (TPM2_ActivateCredential) can recover it. This is how the
// verifier learns that the AK lives in the same TPM as the certified EK.
//
//   seed      RSA EK: random, nameAlg-digest-sized, encrypted with RSA-OAEP (MGF1 and hash =
//             EK nameAlg, label "IDENTITY\0"); the ciphertext is the encrypted secret.
//             ECC EK: ephemeral ECDH on the EK's curve, Z = x-coordinate of the shared point,
//             seed = KDFe(nameAlg, Z, "IDENTITY", ephemeral.x, EK.x, digest bits); the
//             encrypted secret is the ephemeral public point (TPMS_ECC_POINT).
//   symKey    KDFa(nameAlg, seed, "STORAGE", AK name, "", EK symmetric keyBits)
//   encIdentity = AES-CFB(symKey, IV = 0, TPM2B_DIGEST(secret) marshalled)
//   HMACkey   KDFa(nameAlg, seed, "INTEGRITY", "", "", digest bits)
//   outerHMAC = HMAC_nameAlg(HMACkey, encIdentity || AK name)
//   credentialBlob (TPM2B_ID_OBJECT) = TPM2B_DIGEST(outerHMAC) || encIdentity
//
// Checked against tpm2-tools' `tpm2_makecredential -T none` (lib/tpm2_identity_util.c) and
// proved by activation on swtpm (tests/attest_host/credential_swtpm_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/secret_bytes.h"

namespace enclave::attest {

// A credential challenge, each part marshalled with its u16 size prefix: exactly the inputs
// of TPM2_ActivateCredential (and of host::Tpm::ActivateCredential).
struct CredentialChallenge {
  std::vector<uint8_t> credential_blob;   // TPM2B_ID_OBJECT
  std::vector<uint8_t> encrypted_secret;  // TPM2B_ENCRYPTED_SECRET
};

// Seals `secret` (1 .. digest size of the EK's nameAlg bytes; a TPM2B_DIGEST) to the EK
// `ek_public` (TPM2B_PUBLIC: RSA 2048/3072/4096 or ECC NIST P-256/P-384; restricted decrypt
// key, not a signing key; symmetric AES-CFB) and the AK name `ak_name` (TPM2B_NAME contents:
// nameAlg u16 || digest). Fresh randomness on every call. InvalidInput, naming the field,
// for any EK or name this cannot seal to; Internal when OpenSSL fails.
Result<CredentialChallenge> MakeCredential(ByteSpan ek_public, ByteSpan ak_name, const crypto::SecretBytes& secret);

// The tpm2-tools credential file (`tpm2_makecredential -o`, `tpm2_activatecredential -i`):
// u32 magic 0xBADCC0DE, u32 version 1, TPM2B_ID_OBJECT, TPM2B_ENCRYPTED_SECRET (big-endian).
inline constexpr uint32_t kTpm2ToolsCredentialMagic = 0xBADCC0DE;
inline constexpr uint32_t kTpm2ToolsCredentialVersion = 1;
std::vector<uint8_t> EncodeTpm2ToolsCredential(const CredentialChallenge& challenge);
// Strict: magic, version, both sizes, no trailing bytes.
Result<CredentialChallenge> ParseTpm2ToolsCredential(ByteSpan file);

// The key derivation functions of TPM 2.0 Part 1, section 11.4.10 (exposed for tests and
// for other verifier code; `bits` must be a positive multiple of 8):
// KDFa (SP 800-108 counter mode with HMAC_hash): K(i) = HMAC(key, [i]32 || label || 0x00 ||
// context_u || context_v || [bits]32).
Result<crypto::SecretBytes> Kdfa(uint16_t hash_alg, ByteSpan key, std::string_view label, ByteSpan context_u,
                                 ByteSpan context_v, uint32_t bits);
// KDFe (SP 800-56A concatenation KDF): K(i) = H([i]32 || Z || label || 0x00 || party_u || party_v).
Result<crypto::SecretBytes> Kdfe(uint16_t hash_alg, ByteSpan z, std::string_view label, ByteSpan party_u,
                                 ByteSpan party_v, uint32_t bits);

}  // namespace enclave::attest
