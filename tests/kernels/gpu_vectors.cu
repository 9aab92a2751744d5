#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "enclave/kernels/aes256_gcm.h"
#include "enclave/kernels/chacha20_poly1305.h"
#include "gpu_vectors.h"

namespace enclave::kernels::testing {
namespace {

struct Args {
  bool aes;
  uint8_t key[32], nonce[12];
  uint32_t te[256];
};

// buf: aad (aad_len) | ct (len) | tag out (16) | plaintext out (len)
__global__ void AeadOpen(Args a, uint8_t* buf, size_t aad_len, size_t len) {
  const uint8_t* aad = buf;
  const uint8_t* ct = buf + aad_len;
  uint8_t* tag = buf + aad_len + len;
  uint8_t* plain = tag + 16;
  if (a.aes) {
    Aes256RoundKeys rk;
    Aes256ExpandKey(a.key, a.te, &rk);
    const uint8_t zero[16] = {0};
    uint8_t h[16];
    Aes256EncryptBlock(rk, a.te, zero, h);
    Aes256GcmTag(rk, a.te, Gf128Load(h), a.nonce, aad, aad_len, ct, len, tag);
    for (size_t b = 0; b * 16 < len; ++b) {
      Aes256GcmXorBlock(rk, a.te, a.nonce, static_cast<uint32_t>(b), ct + b * 16, plain + b * 16,
                        len - b * 16 < 16 ? len - b * 16 : 16);
    }
  } else {
    ChaCha20Poly1305Tag(a.key, a.nonce, aad, aad_len, ct, len, tag);
    for (size_t b = 0; b * 64 < len; ++b) {
      ChaCha20XorBlock(a.key, static_cast<uint32_t>(b + 1), a.nonce, ct + b * 64, plain + b * 64,
                       len - b * 64 < 64 ? len - b * 64 : 64);
    }
  }
}

bool Check(cudaError_t e, const char* call, char* error, size_t size) {
  if (e == cudaSuccess) return true;
  std::snprintf(error, size, "%s failed: %s", call, cudaGetErrorString(e));
  return false;
}

}  // namespace

bool GpuAeadOpen(bool aes, const uint8_t key[32], const uint8_t nonce[12], const uint8_t* aad, size_t aad_len,
                 const uint8_t* ct, size_t len, uint8_t tag[16], uint8_t* plain, char* error, size_t error_size) {
  Args a;
  a.aes = aes;
  std::memcpy(a.key, key, 32);
  std::memcpy(a.nonce, nonce, 12);
  std::memcpy(a.te, kAesTable.t0, sizeof a.te);
  const size_t total = aad_len + len + 16 + len;
  uint8_t* buf = nullptr;
  bool ok = Check(cudaMalloc(&buf, total + 1), "cudaMalloc", error, error_size) &&
            Check(cudaMemcpy(buf, aad, aad_len, cudaMemcpyHostToDevice), "cudaMemcpy(aad)", error, error_size) &&
            Check(cudaMemcpy(buf + aad_len, ct, len, cudaMemcpyHostToDevice), "cudaMemcpy(ct)", error, error_size);
  if (ok) {
    AeadOpen<<<1, 1>>>(a, buf, aad_len, len);
    ok = Check(cudaGetLastError(), "AeadOpen launch", error, error_size) &&
         Check(cudaMemcpy(tag, buf + aad_len + len, 16, cudaMemcpyDeviceToHost), "cudaMemcpy(tag)", error,
               error_size) &&
         Check(cudaMemcpy(plain, buf + aad_len + len + 16, len, cudaMemcpyDeviceToHost), "cudaMemcpy(plain)", error,
               error_size);
  }
  if (buf != nullptr) cudaFree(buf);
  return ok;
}

}  // namespace enclave::kernels::testing
