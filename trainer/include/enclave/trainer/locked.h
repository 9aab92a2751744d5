// A fixed-size array in locked memory (crypto::SecretBytes) for host-side values derived
// from the plaintext data: labels, split indices, predictions, weights.
#pragma once

#include <cstddef>
#include <type_traits>

#include "enclave/crypto/secret_bytes.h"

namespace enclave::trainer {

template <typename T>
class LockedArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  LockedArray() = default;
  static Result<LockedArray> Create(size_t n) {
    LockedArray a;
    ASSIGN_OR_RETURN(a.mem_, crypto::SecretBytes::Create(n * sizeof(T)));
    a.n_ = n;
    return a;
  }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T* data() { return n_ == 0 ? nullptr : reinterpret_cast<T*>(mem_.ExposeSecretMutable().data()); }
  const T* data() const { return n_ == 0 ? nullptr : reinterpret_cast<const T*>(mem_.ExposeSecret().data()); }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + n_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + n_; }
  Result<LockedArray> Clone() const {
    LockedArray a;
    ASSIGN_OR_RETURN(a.mem_, mem_.Clone());
    a.n_ = n_;
    return a;
  }

 private:
  crypto::SecretBytes mem_;
  size_t n_ = 0;
};

}  // namespace enclave::trainer
