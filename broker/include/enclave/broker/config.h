// broker.toml (examples/broker/broker.toml; docs/protocol.md, "Configuration"). Parsing
// is strict: unknown tables or keys, wrong types and out-of-range values are InvalidInput
// naming the key. Relative paths resolve against the configuration file's folder.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "enclave/common/status.h"

namespace enclave::broker {

struct ServerConfig {
  std::string listen = "127.0.0.1";
  uint16_t port = 8443;           // 0: any free port (printed at start)
  std::string certificate;        // PEM chain, leaf first
  std::string private_key;        // PEM
  size_t threads = 16;            // request workers (they wait in shared durable syncs)
  size_t max_queued = 64;         // requests past their head beyond `threads` (bodies, queue)
  size_t max_body_bytes = 16u << 20;  // largest request body (evidence bundles)
  int read_timeout_s = 10;        // per read, TLS handshake included
  int write_timeout_s = 10;       // per answer
  int keep_alive_s = 5;           // idle between requests
  // HTTP limits (docs/protocol.md, "HTTP limits").
  size_t max_header_bytes = 8192;      // request line and fields (431 beyond)
  size_t max_header_fields = 64;       // (431 beyond)
  int header_timeout_s = 10;           // whole head, TLS handshake included, however slow
  int body_timeout_s = 60;             // whole body
  size_t max_connections = 256;        // in all; then the broker stops accepting
  size_t max_connections_per_peer = 32;  // per client IP address; more are closed at once
  // SHA-256 of the administrator's bearer token (read from [admin] token_file at start);
  // unset: the /v1/admin endpoints answer 404.
  std::optional<std::array<uint8_t, 32>> admin_token_sha256;
  // The audit log's tlog-tiles directory, served read-only under /v1/audit-log/ ("": not
  // served; [audit] serve_tiles).
  std::string tiles_dir;
};

struct BrokerConfig {
  std::string path;  // the file this was read from
  ServerConfig server;
  std::string store_path;
  std::string keystore_path;
  std::string audit_dir;
  std::string audit_signing_key;
  std::string actor = "broker";
  std::string attestation_policy;
  int64_t nonce_ttl_s = 60;
  int64_t challenge_ttl_s = 300;
  int64_t nonces_per_minute = 600;  // per enrolled host; more is 429
  // [audit]: the evidence archive's budget: bytes it may hold, and free bytes its file
  // system must keep; an appraisal that would break either is refused (503) before
  // anything is written, so the audit log never runs out of disk.
  int64_t archive_max_bytes = int64_t{16} << 30;
  int64_t archive_min_free_bytes = int64_t{1} << 30;
  // [audit]: a C2SP tlog-policy file naming the witnesses (with URLs) and their quorum; set,
  // every key release waits up to witness_wait_ms for a checkpoint the quorum cosigned
  // (then 503); witness_timeout_s bounds each connect, read and write to a witness;
  // witness_interval_ms is the least time from the end of one round to the next (batching).
  std::string witness_policy;
  int64_t witness_wait_ms = 5000;
  int64_t witness_timeout_s = 5;
  int64_t witness_interval_ms = 10;
  // [audit]: serve the log's checkpoint, tiles and entry bundles (C2SP tlog-tiles) to anyone
  // who reaches the port, under /v1/audit-log/. Off by default: entries name hosts,
  // datasets, jobs and requesters (never keys).
  bool serve_tiles = false;
  // [release]: Ed25519 public key files of the compliance officers whose signatures make a
  // data-use policy activatable, and the keystore export key jobs encrypt models to ("":
  // the newest).
  std::vector<std::string> policy_signers;
  std::string export_key;
  // [admin]: the file holding the administrator's bearer token; empty: no admin API.
  std::string admin_token_file;
};

Result<BrokerConfig> ParseBrokerConfig(std::string_view toml_text, const std::string& base_dir);
Result<BrokerConfig> LoadBrokerConfig(const std::string& path);

inline constexpr size_t kMaxConfigBytes = 1u << 20;

}  // namespace enclave::broker
