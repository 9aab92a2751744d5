#include "enclave/common/progress.h"

#include <unistd.h>

#include <cstdio>

namespace enclave {

bool StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled && StderrIsTerminal()),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (enabled_ && !finished_) std::fputs("\n", stderr);
}

void ProgressBar::Update(uint64_t done) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  Draw(done);
}

void ProgressBar::Finish() {
  if (!enabled_ || finished_) return;
  Draw(total_);
  std::fputs("\n", stderr);
  finished_ = true;
}

void ProgressBar::Draw(uint64_t done) {
  constexpr int kWidth = 30;
  double fraction = total_ == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total_);
  if (fraction > 1.0) fraction = 1.0;
  int filled = static_cast<int>(fraction * kWidth);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double mib_s = seconds > 0 ? static_cast<double>(done) / (1 << 20) / seconds : 0.0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %8.1f MiB/s", label_.c_str(), bar.c_str(), fraction * 100.0,
               mib_s);
  std::fflush(stderr);
}

}  // namespace enclave
