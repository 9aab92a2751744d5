// Temporary files for dataset tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../scratch_cleanup.h"

namespace enclave::testing {

inline std::filesystem::path TestDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("enclave-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  RemoveAtExit(dir);
  return dir;
}

inline std::string WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace enclave::testing
