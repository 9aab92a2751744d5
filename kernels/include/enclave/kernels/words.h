// Little-endian word access for the host+device crypto code. On the GPU a byte-wise load
// from global memory is one instruction per byte, and the chunk kernels read every byte of
// the data: whole 16-byte pieces go through Load16Le/Store16Le, which use one 128-bit (or
// four 32-bit) accesses when the address allows and fall back to bytes otherwise. The host
// build takes the byte path (the compiler merges it), so the tests check the same words.
#pragma once

#include <cstdint>

#include "enclave/kernels/hd.h"

namespace enclave::kernels {

ENCLAVE_HD uint32_t Load32Le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

ENCLAVE_HD void Store32Le(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

ENCLAVE_HD uint32_t Rotl32(uint32_t x, int n) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(x, x, n);
#else
  return (x << n) | (x >> ((32 - n) & 31));
#endif
}

ENCLAVE_HD uint32_t Bswap32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, 0, 0x0123);
#else
  return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
#endif
}

// w[i] = bytes 4i..4i+3 of p as a little-endian u32 (the GPU is little-endian).
ENCLAVE_HD void Load16Le(const uint8_t* p, uint32_t w[4]) {
#if defined(__CUDA_ARCH__)
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if ((a & 15) == 0) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
    return;
  }
  if ((a & 3) == 0) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(p);
    for (int i = 0; i < 4; ++i) w[i] = q[i];
    return;
  }
#endif
  for (int i = 0; i < 4; ++i) w[i] = Load32Le(p + 4 * i);
}

ENCLAVE_HD void Store16Le(uint8_t* p, const uint32_t w[4]) {
#if defined(__CUDA_ARCH__)
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if ((a & 15) == 0) {
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    return;
  }
  if ((a & 3) == 0) {
    uint32_t* q = reinterpret_cast<uint32_t*>(p);
    for (int i = 0; i < 4; ++i) q[i] = w[i];
    return;
  }
#endif
  for (int i = 0; i < 4; ++i) Store32Le(p + 4 * i, w[i]);
}

}  // namespace enclave::kernels
