// Fuzz target: the training job parser (trainer::ParseJob: toml++ and the strict schema
// walk over it). The job file comes from the data scientist, who is not trusted with the
// data. An accepted job must satisfy every documented range (docs/formats/job.md), and
// parsing is a pure function of the bytes.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "enclave/trainer/job.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enclave::trainer;
  if (size > kMaxJobBytes) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto job = ParseJob(text, "fuzz.toml", "/base");
  if (!job.ok()) {
    if (job.status().message().empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  const JobSpec& j = *job;
  if (j.datasets.empty() || j.datasets.size() > 64 || j.output_dir.empty()) __builtin_trap();
  std::set<std::string> ids;
  for (const DatasetSpec& d : j.datasets) {
    if (d.id.empty() || d.path.empty() || !ids.insert(d.id).second) __builtin_trap();
    if (d.format == DatasetFormat::kSealed && (!d.label.empty() || d.positive || !d.classes.empty())) __builtin_trap();
    if (d.format == DatasetFormat::kCsv && d.label.empty()) __builtin_trap();
  }
  if (j.epochs < 1 || j.epochs > 1000000 || j.batch_size < 1 || j.batch_size > (1u << 20)) __builtin_trap();
  if (!(j.validation_fraction >= 0.0 && j.validation_fraction <= 0.9)) __builtin_trap();
  if (j.model.hidden.size() > 16) __builtin_trap();
  for (uint32_t h : j.model.hidden) {
    if (h < 1 || h > 65536) __builtin_trap();
  }
  if (!(j.optimizer.lr > 0.0f) || j.metrics == 0) __builtin_trap();
  if (j.schedule.warmup_epochs > 0 && j.schedule.warmup_epochs >= j.epochs) __builtin_trap();
  auto again = ParseJob(text, "fuzz.toml", "/base");
  if (!again.ok() || again->digest != j.digest || again->seed != j.seed) __builtin_trap();
  return 0;
}
