// The benchmarks' Python baselines (scikit-learn, python3-xgboost): a script run through the
// shell that prints one JSON line with its timings.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

// The first line the command printed, or nothing when it could not run or exited non-zero.
inline std::optional<std::string> PythonBaselineLine(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  char line[512] = {};
  const bool got = std::fgets(line, sizeof line, p) != nullptr;
  const int rc = ::pclose(p);
  if (!got || rc != 0) return std::nullopt;
  return std::string(line);
}

// The number after `"key": ` in that line, or nothing.
inline std::optional<double> JsonNumberAfter(const std::string& line, const char* key) {
  const std::string k = std::string("\"") + key + "\": ";
  const size_t at = line.find(k);
  if (at == std::string::npos) return std::nullopt;
  return std::strtod(line.c_str() + at + k.size(), nullptr);
}
