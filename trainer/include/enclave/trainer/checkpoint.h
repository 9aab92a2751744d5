// Encrypted checkpoints (docs/training.md#checkpoints): the full training state, sealed
// in chunks with a per-file key derived from a checkpoint key and bound to the job digest,
// written atomically as OUTPUT_DIR/checkpoints/step-<12 digits>.ckpt. The state is
// assembled and sealed where the backend keeps it: on the GPU backend the parameters and
// optimizer moments never leave the device in the clear (chunks sealed there, as the
// model is); version 1 files (one AEAD message) are still read.
//
// Development mode: the checkpoint key is a data key of the local tenant keystore under the
// reserved dataset id "enclave-train.checkpoint" (created on first use). With the broker it
// will be released like the data keys, sealed to the trainer's attested ephemeral key.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "enclave/common/bytes.h"
#include "enclave/common/status.h"
#include "enclave/crypto/hash.h"
#include "enclave/crypto/keystore.h"
#include "enclave/crypto/secret_bytes.h"
#include "enclave/trainer/backend.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {

inline constexpr char kCheckpointKeyId[] = "enclave-train.checkpoint";
inline constexpr char kCheckpointMagic[8] = {'E', 'N', 'C', 'L', 'C', 'K', 'P', 'T'};
inline constexpr uint16_t kCheckpointVersion = 2;  // written; 1 is read too
inline constexpr size_t kCheckpointHeaderBytes = 128;
inline constexpr size_t kCheckpointV1HeaderBytes = 136;
inline constexpr uint32_t kCheckpointChunkBytes = 1u << 20;
inline constexpr char kCheckpointDirName[] = "checkpoints";

// The key checkpoints are sealed under, with the keystore ids that name it.
struct CheckpointKey {
  crypto::Id128 keystore_id{};
  crypto::Id128 key_id{};
  crypto::SecretBytes key;
};

// The newest "enclave-train.checkpoint" data key of the keystore; made (and stored) when
// there is none and `create` is true, else kNotFound.
Result<CheckpointKey> CheckpointKeyFromKeystore(crypto::Keystore& keystore, bool create);

// The largest training state a checkpoint holds: it is sealed as one AEAD message.
inline constexpr uint64_t kMaxCheckpointStateBytes = (uint64_t{1} << 31) - 1;
// EncodeTrainState's size for a state of these dimensions (moment_floats: the optimizer's
// state, P for SGD, 2P for AdamW).
uint64_t TrainStateBytes(size_t hidden_layers, size_t features, size_t params, size_t moment_floats,
                         uint64_t train_rows, size_t epochs);
// kInvalidInput when a job of this shape could not write its checkpoints (checked before
// training, so that a run does not fail at its first checkpoint).
Status CheckpointsFit(const ModelShape& shape, uint64_t train_rows, bool adamw, uint32_t epochs);

// The state as bytes (plaintext, locked) and back. Decoding checks structure only; Train
// checks that the state fits the job.
Result<crypto::SecretBytes> EncodeTrainState(const TrainState& state);
Result<TrainState> DecodeTrainState(ByteSpan bytes);

// Seals `state` for the job with digest `job_digest` into `path` (atomic; overwrites),
// from host memory.
Status WriteCheckpoint(const CheckpointKey& key, const crypto::Digest256& job_digest, const TrainState& state,
                       const std::string& path);
// The same for the state where training keeps it (ResidentTrainState, trainer.h): its
// encoding is assembled in the backend's memory and sealed there (the GPU backend: on
// the device; only ciphertext is copied to the host). The same file format.
Status WriteCheckpoint(const CheckpointKey& key, const crypto::Digest256& job_digest, const ResidentTrainState& state,
                       const std::string& path);
// The resident state with its arrays copied to locked host memory (tests; what a
// checkpoint written from it decodes to).
Result<TrainState> DownloadTrainState(const ResidentTrainState& state);

// Opens a checkpoint: structure (kInvalidInput / kUnsupported), then that it was written
// for this job (kPermissionDenied: another job's checkpoint) and with this keystore
// (kNotFound: its key is not here), then authentication (kAuthFailed: tampered).
Result<TrainState> ReadCheckpoint(const std::string& path, const crypto::Keystore& keystore,
                                  const crypto::Digest256& job_digest);

std::string CheckpointPath(const std::string& dir, uint64_t step);
// The checkpoint with the highest step in `dir`; kNotFound when there is none.
Result<std::string> LatestCheckpoint(const std::string& dir);
// Deletes all but the `keep` newest checkpoints in `dir`.
Status PruneCheckpoints(const std::string& dir, uint32_t keep);

}  // namespace enclave::trainer
