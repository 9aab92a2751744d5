// Damage for the fail-closed tests: one bit of a file flipped in place.
#pragma once

#include <fstream>
#include <string>

namespace enclave::trainer::test_util {

// Flips the lowest bit of the byte `back` bytes before the end of `path` (for a sealed
// file and a small `back`: inside its last chunk).
inline void FlipByteFromEnd(const std::string& path, long back) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-back, std::ios::end);
  char ch = 0;
  f.read(&ch, 1);
  f.seekp(-back, std::ios::end);
  ch = static_cast<char>(ch ^ 1);
  f.write(&ch, 1);
}

}  // namespace enclave::trainer::test_util
