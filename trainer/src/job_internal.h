// The job parser's pieces that [tune] (tune.cc) shares with ParseJob (job.cc): a job is
// parsed from its TOML table, so a configuration of a search is the job's own table with
// the candidate values moved in (they keep their lines: errors name the candidate's line).
#pragma once

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "enclave/common/status.h"
#include "enclave/trainer/job.h"

namespace enclave::trainer::internal {

// ParseJob after the TOML parse. `text` is the job file's bytes: their SHA-256 is the job
// digest (also of every configuration of its [tune] search).
Result<JobSpec> ParseJobTable(const toml::table& root, std::string_view text, const std::string& source,
                              const std::string& base_dir);

// root["tune"] into job->tune; `job` is everything else of `root`, already parsed. Every
// candidate is checked by parsing the job with it substituted (alone).
Status ParseTuneTable(const toml::table& root, std::string_view text, const std::string& source,
                      const std::string& base_dir, JobSpec* job);

}  // namespace enclave::trainer::internal
