# Sourced by the tpm2-tools interop tests: start_swtpm DIR starts a plain swtpm (no EK
# certificates) with its state in DIR/state, sets swtpm_pid and exports TPM2TOOLS_TCTI, and
# returns only once the TPM answers a PCR read. A probed port can be taken by a concurrent
# test before swtpm binds it; swtpm then exits and another pair is tried. On a loaded machine
# swtpm can take seconds to answer, so it is given 60 s before the test fails with its log.
start_swtpm() {
  local dir=$1 attempt port i
  mkdir -p "$dir/state"
  for attempt in 1 2 3 4 5; do
    port=$("$(dirname "${BASH_SOURCE[0]}")/../../scripts/free-port-pair" || true)
    [ -n "$port" ] || { echo "start_swtpm: no two adjacent free loopback ports" >&2; return 1; }
    swtpm socket --tpm2 --tpmstate dir="$dir/state" --server type=tcp,port="$port",bindaddr=127.0.0.1 \
      --ctrl type=tcp,port=$((port + 1)),bindaddr=127.0.0.1 --flags not-need-init,startup-clear \
      >>"$dir/swtpm.log" 2>&1 &
    swtpm_pid=$!
    export TPM2TOOLS_TCTI="swtpm:host=127.0.0.1,port=$port"
    for i in $(seq 600); do
      kill -0 "$swtpm_pid" 2>/dev/null || break
      tpm2_pcrread sha256:0 >/dev/null 2>&1 && return 0
      sleep 0.1
    done
    if kill -0 "$swtpm_pid" 2>/dev/null; then
      echo "start_swtpm: swtpm on port $port did not answer within 60 s; its log:" >&2
      cat "$dir/swtpm.log" >&2
      return 1
    fi
    wait "$swtpm_pid" 2>/dev/null || true
    swtpm_pid=""
    echo "start_swtpm: attempt $attempt: swtpm exited (port $port taken?)" >>"$dir/swtpm.log"
  done
  echo "start_swtpm: swtpm did not start in 5 attempts; its log:" >&2
  cat "$dir/swtpm.log" >&2
  return 1
}
