// What a job asks the broker for: the release request of a training job file (its claims
// and the key ids its sealed datasets' headers name). Shared by `enclave-attest attest` and
// `enclave-train` in attested mode, so both ask for exactly the same thing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enclave/broker/release.h"
#include "enclave/common/status.h"
#include "enclave/trainer/job.h"

namespace enclave::session {

struct JobReleaseOptions {
  std::string policy_id;   // "": the job's [broker] policy
  std::string requester;   // "": the job's [broker] requester
  std::string kind = "train";  // "train" (run) or "cv"
  uint32_t rank = 0;
  uint32_t world_size = 1;
  // Whether the requester writes the released keys out of its memory (`enclave-attest
  // attest` does, into a keystore file); the data-use policy decides if it may.
  bool writes_keys = false;
  // For an interpreter (the Python package): the files of code it runs, relative to
  // `code_dir` (no absolute paths, no ".."), hashed into the workload in this order under
  // those relative names (broker::Workload::code): what the data-use policy approves.
  std::string code_dir;
  std::vector<std::string> code;
  // The clear outputs claimed: enclave-train's (trainer::ClearOutputsOf the job, kind and
  // task); false for a requester that itself shows no result in clear (the Python
  // package: what the approved script prints is the script's, approved by its digest).
  bool trainer_outputs = true;
};

// The workload is this process's executable (/proc/self/exe, hashed as IMA measures it
// when it starts) and options.code. Every dataset must be sealed (the broker releases keys of sealed datasets only) and
// sealed under the dataset id the job names. recipient, report_key and evidence are left
// for the client to fill.
Result<broker::ReleaseRequest> ReleaseRequestForJob(const trainer::JobSpec& job, const JobReleaseOptions& options);

}  // namespace enclave::session
