#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace enclave {

// A progress bar on stderr, drawn only when stderr is a terminal (and not with --json).
class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total, bool enabled);
  ~ProgressBar();
  void Update(uint64_t done);
  void Finish();

 private:
  void Draw(uint64_t done);
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

bool StderrIsTerminal();

}  // namespace enclave
