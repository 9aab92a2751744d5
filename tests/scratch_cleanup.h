// Scratch folders that go when the test process exits normally (ctest runs each test in a
// process of its own), so test runs do not pile folders up in /tmp. A forked child that
// exits does not remove its parent's folders; a test that crashes leaves its folder for
// inspection.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <vector>

namespace enclave::testing {

inline void RemoveAtExit(const std::filesystem::path& dir) {
  struct Registry {
    pid_t owner = ::getpid();
    std::vector<std::filesystem::path> dirs;
    ~Registry() {
      if (::getpid() != owner) return;
      for (const auto& d : dirs) {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    }
  };
  static Registry registry;
  registry.dirs.push_back(dir);
}

}  // namespace enclave::testing
