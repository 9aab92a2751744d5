#include "enclave/session/job_release.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "enclave/common/files.h"
#include "enclave/crypto/sealed_file.h"
#include "enclave/dataset/schema.h"
#include "enclave/trainer/clear_outputs.h"

namespace enclave::session {
namespace {

struct SealedFacts {
  crypto::Id128 key_id{};
  bool regression = false;  // the schema's task (what the clear outputs depend on)
};

// The key id and task of a sealed dataset, from its header only (its length first): the
// schema is authenticated metadata, readable without the key.
Result<SealedFacts> ReadSealedFacts(const trainer::DatasetSpec& d) {
  ASSIGN_OR_RETURN(FileReader reader, FileReader::Open(d.path));
  std::vector<uint8_t> fixed(crypto::kSealedFixedPrefix);
  if (reader.size() < fixed.size()) return InvalidInput(d.path + ": too short for a sealed file");
  RETURN_IF_ERROR(reader.ReadAt(0, fixed.data(), fixed.size()));
  auto length = crypto::PeekHeaderLength(fixed);
  if (!length.ok()) return length.status().Annotate(d.path);
  if (*length > reader.size()) return InvalidInput(d.path + ": truncated header");
  std::vector<uint8_t> head(*length);
  RETURN_IF_ERROR(reader.ReadAt(0, head.data(), head.size()));
  auto header = crypto::ParseSealedHeader(head);
  if (!header.ok()) return header.status().Annotate(d.path);
  if (header->params.content_type != crypto::ContentType::kTabularDataset)
    return InvalidInput(d.path + ": not a sealed dataset");
  if (header->params.object_id != d.id)
    return InvalidInput(d.path + ": sealed for dataset '" + header->params.object_id + "', the job says '" + d.id + "'");
  auto schema = dataset::DecodeSchema(header->params.metadata);
  if (!schema.ok()) return schema.status().Annotate(d.path);
  return SealedFacts{header->params.key_id, schema->task == dataset::Task::kRegression};
}

}  // namespace

Result<broker::ReleaseRequest> ReleaseRequestForJob(const trainer::JobSpec& job, const JobReleaseOptions& o) {
  broker::ReleaseRequest r;
  r.policy_id = o.policy_id.empty() ? job.broker.policy : o.policy_id;
  if (r.policy_id.empty()) return InvalidInput("no data-use policy: the job's [broker] policy (or --usage-policy)");
  r.job.requester = o.requester.empty() ? job.broker.requester : o.requester;
  if (r.job.requester.empty()) return InvalidInput("no requester: the job's [broker] requester (or --requester)");
  if (o.kind != "train" && o.kind != "cv") return InvalidInput("the job kind must be train or cv");
  if (o.world_size < 1 || o.world_size > 1024 || o.rank >= o.world_size)
    return InvalidInput("need 1 <= world size <= 1024 and the rank below it");
  r.job.job_id = job.broker.job_id;
  r.job.job_digest = job.digest;
  r.job.kind = o.kind;
  r.job.epochs = job.epochs;
  r.job.world_size = o.world_size;
  r.rank = o.rank;
  r.job.model_export = true;
  r.job.writes_keys = o.writes_keys;
  // The process's own executable: /proc/self/exe names the file it was started from even
  // when that path has since been replaced.
  std::error_code ec;
  const std::string exe_path = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return Unavailable("reading /proc/self/exe: " + ec.message());
  ASSIGN_OR_RETURN(r.workload, broker::WorkloadOfExecutable("/proc/self/exe", exe_path));
  RETURN_IF_ERROR(broker::AddWorkloadCode(o.code_dir, o.code, &r.workload));
  r.job.workload_digest = broker::WorkloadDigest(r.workload);
  bool regression = false;
  for (const trainer::DatasetSpec& d : job.datasets) {
    if (d.format != trainer::DatasetFormat::kSealed)
      return InvalidInput("dataset '" + d.id + "' is a clear CSV: the broker releases keys of sealed datasets only");
    ASSIGN_OR_RETURN(SealedFacts facts, ReadSealedFacts(d));
    r.keys.push_back({d.id, facts.key_id});
    r.job.datasets.push_back(d.id);
    regression = regression || facts.regression;  // the loader refuses datasets of different tasks
  }
  // What the job will show in clear, as enclave-train decides it (trainer/clear_outputs.h).
  if (o.trainer_outputs) r.job.clear_metrics = trainer::ClearOutputsOf(job, o.kind, regression).Names();
  return r;
}

}  // namespace enclave::session
