/* The one way a job key enters libnccl-net-enclave.so (the encrypted NCCL network
 * plugin): the trainer, after the broker released the key to its attested process,
 * calls enclave_net_set_job_key() before NCCL initialises the network (ncclCommInit*).
 * Never environment variables, files or command lines. Resolve the functions from the
 * same library NCCL loads: dlopen("libnccl-net-enclave.so", RTLD_NOW) then dlsym, or
 * link against it. docs/formats/net-transport.md describes the protocol. */
#ifndef ENCLAVE_NET_PLUGIN_H_
#define ENCLAVE_NET_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copies key[0, len) (32 to 64 bytes) into locked, guarded memory. Later v11 init()
 * calls (one per communicator) take their own copy; communicators initialised before
 * keep theirs. The older tables (v10..v6) share one context per process that keeps the
 * first key and refuse new connections once the key is cleared or replaced
 * (docs/formats/net-transport.md, "Older NCCL releases"). Returns 0, or -1 when key is
 * NULL or len is outside 32..64. The caller wipes its own copy. */
int enclave_net_set_job_key(const uint8_t* key, size_t len);

/* Wipes the key: every later init() fails (fail closed), e.g. when the lease expired.
 * Existing connections keep their derived keys until closed. */
void enclave_net_clear_job_key(void);

#ifdef __cplusplus
}
#endif

#endif /* ENCLAVE_NET_PLUGIN_H_ */
