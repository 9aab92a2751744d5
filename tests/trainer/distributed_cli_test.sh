#!/usr/bin/env bash
# enclave-train run --world-size N --rank R --rendezvous DIR as a user runs it: every rank a
# separate process, gradients summed by the ring all-reduce over libnccl-net-enclave.
#  1. 2 ranks on loopback vs one process, sealed dataset, dev-mode keystore: every rank the
#     same parameters, rank 0's loss/accuracy those of the single process (1e-5 relative),
#     only rank 0 writes report/plot/model, the rendezvous directory is left empty.
#  2. 4 ranks, each in its own network namespace (veth on a bridge, 10.X.Y.R+1/24): same
#     checks, and each rank's ring traffic went out of its namespace's veth (not lo).
#     Skipped (SKIP line) only where namespaces cannot be made.
#  3. a rank with another keystore (another job key): both ranks refused, nothing written;
#     each listener closes the other's connection and waits for a rank with the key, so
#     both fail when --peer-timeout passes.
#  4. a rank SIGKILLed mid-run: the others fail (not hang); a SIGSTOPped (silent) rank fails
#     the others after --peer-timeout.
#  5. --stop-after-step K on rank 1 only stops both ranks with a checkpoint at step K;
#     --resume on both gives the parameters of an uninterrupted 2-rank run.
#  6. bad rank flags: the exit codes the binary gives (3 invalid input, 8 no key source, 6
#     no rendezvous directory, 2 only for a flag without its value).
# Every rank reads its own copy of the job file (identical bytes, so one job digest), with a
# relative output_dir: each rank has its own output directory, as on separate hosts, and
# what a rank > 0 writes can be told from what rank 0 writes.
set -u
TRAIN=$1 DATA=$2 SAMPLES=$(cd "$3" && pwd) || exit 1
T=$(mktemp -d)
ID=enc$$                        # prefix of the network namespaces of case 2
BRNS=$ID-br                     # the namespace holding the bridge
NETNS=()                        # namespaces made so far (cleanup)
declare -A PID LIVE               # LIVE: background processes not yet reaped (cleanup)
cleanup() {
  local p ns r
  for p in "${!LIVE[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  for ns in ${NETNS[@]+"${NETNS[@]}"}; do
    if [ "$ns" = "$BRNS" ]; then
      for r in 0 1 2 3; do ip -n "$BRNS" link del "v$r" 2>/dev/null; done
      ip -n "$BRNS" link del br0 2>/dev/null
    fi
  done
  for ns in ${NETNS[@]+"${NETNS[@]}"}; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 129' HUP INT TERM  # a signal ends the script through the EXIT trap too
. "$(dirname "$0")/cli_helpers.sh"
PASS2="another tenant's passphrase"
now_ms() { date +%s%3N; }

# launch NAME PASSPHRASE command...: in the background, stdout/stderr in $T/NAME.out/.err,
# the passphrase on fd 3; PID[NAME] is the command's own process (ip netns exec and env exec).
launch() {
  local name=$1 pw=$2; shift 2
  "$@" >"$T/$name.out" 2>"$T/$name.err" 3<<<"$pw" &
  PID[$name]=$!
  LIVE[$!]=1
}
# await NAME LIMIT: wait up to LIMIT seconds for NAME to exit; RC is its exit status. Past the
# limit it is killed and the test fails (a hang is a failure, never a CTest timeout).
await() {
  local name=$1 limit=$2 pid=${PID[$1]} deadline=$(( $(now_ms) + $2 * 1000 ))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(now_ms)" -gt "$deadline" ]; then
      kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; unset "LIVE[$pid]"
      cat "$T/$name.err" >&2; fail "$name still running after ${limit}s"
    fi
    sleep 0.05
  done
  wait "$pid" 2>/dev/null; RC=$?
  unset "LIVE[$pid]"
}
expect_ok() {  # expect_ok NAME...: each exited 0
  local n; for n in "$@"; do
    await "$n" 120; [ "$RC" = 0 ] || { cat "$T/$n.err" >&2; fail "$n: exit $RC, want 0"; }
  done
}
# A refused or failed rank: an error exit of its own (2..127; 1 is an internal error, >= 128
# a signal, e.g. a crash) with its one error line on stderr.
expect_error_exit() {  # expect_error_exit NAME RC
  [ "$2" -ge 2 ] && [ "$2" -lt 128 ] || { cat "$T/$1.err" >&2; fail "$1: exit $2, want an error exit (2..127)"; }
  grep -q "^enclave-train run: error: " "$T/$1.err" || { cat "$T/$1.err" >&2; fail "$1: no error line on stderr"; }
}
json_field() {  # json_field FILE KEY: KEY of the last JSON line of FILE
  python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$1" "$2"
}
no_files() {  # no_files DIR WHAT: DIR holds no file (it may not exist)
  [ -z "$(find "$1" -type f 2>/dev/null)" ] || { find "$1" -type f >&2; fail "$2"; }
}
# Every rank uses the plugin's default interface choice in case 2; the root-namespace cases
# pin loopback (the host's first interface may have a firewall).
unset ENCLAVE_NET_IFNAME

# --- The data, the keystores and the jobs.
pass; expect_rc 0 "keystore init" -- "$DATA" keystore init --keystore "$T/ks" --passphrase-fd 3 \
  --kdf-opslimit 2 --kdf-memlimit-mib 19
exec 3<<<"$PASS2"; expect_rc 0 "second keystore init" -- "$DATA" keystore init --keystore "$T/ks2" \
  --passphrase-fd 3 --kdf-opslimit 2 --kdf-memlimit-mib 19
pass; expect_rc 0 "seal" -- "$DATA" seal --csv "$SAMPLES/breast_cancer_wisconsin.csv" --label diagnosis \
  --positive malignant --suite aes-256-gcm --dataset-id breast-cancer --keystore "$T/ks" --out "$T/bc.sealed" \
  --passphrase-fd 3
pass; expect_rc 0 "export-key create" -- "$DATA" keystore export-key create --keystore "$T/ks" --passphrase-fd 3
pass; expect_rc 0 "export-key show" -- "$DATA" keystore export-key show --keystore "$T/ks" --passphrase-fd 3 \
  --out "$T/tenant-export.pub"

# write_job FILE DATASET EPOCHS [EXTRA]: a small MLP job, output_dir "out" beside FILE.
write_job() {
  local file=$1 data=$2 epochs=$3 extra=${4:-}
  mkdir -p "$(dirname "$file")"
  {
    # Every job names the export key: rank 0 refuses to train without one.
    printf 'name = "distributed-cli"\nseed = 11\ndevice = "cpu"\noutput_dir = "out"\nexport_key = "%s"\n' \
      "$T/tenant-export.pub"
    if [ "$data" = sealed ]; then
      printf '\n[[datasets]]\nid = "breast-cancer"\npath = "%s"\n' "$T/bc.sealed"
    else
      printf '\n[[datasets]]\nid = "breast-cancer"\npath = "%s"\nformat = "csv"\nlabel = "diagnosis"\npositive = "malignant"\n' \
        "$SAMPLES/breast_cancer_wisconsin.csv"
    fi
    printf '\n[model]\nhidden = [16]\nactivation = "relu"\n\n[training]\nepochs = %s\nbatch_size = 32\n' "$epochs"
    printf 'validation_fraction = 0.2\n\n[optimizer]\ntype = "adamw"\nlr = 0.01\nl2 = 0.001\n\n[schedule]\ntype = "cosine"\n'
    printf '%b' "$extra"
  } > "$file"
}
# The same job bytes in one directory per process.
for d in single c1/rank0 c1/rank1 c2/rank0 c2/rank1 c2/rank2 c2/rank3; do write_job "$T/$d/job.toml" sealed 4; done
cmp -s "$T/single/job.toml" "$T/c2/rank3/job.toml" || fail "job copies differ"

# compare REPORT_SINGLE REPORT_RANK0 DONE_LINE_FILES...: rank 0 against the single process
# (every epoch's train_loss within 1e-5 relative, the final validation accuracy equal), and
# every rank's parameters_sha256 and final metrics equal to rank 0's.
compare() {
  python3 - "$@" <<'PY'
import json, sys
single, rank0 = (json.load(open(p)) for p in sys.argv[1:3])
ranks = [json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[3:]]
assert len(single["epochs"]) == len(rank0["epochs"]), (len(single["epochs"]), len(rank0["epochs"]))
for a, b in zip(single["epochs"], rank0["epochs"]):
    rel = abs(a["train_loss"] - b["train_loss"]) / abs(a["train_loss"])
    assert rel <= 1e-5, ("train_loss", a["epoch"], a["train_loss"], b["train_loss"], rel)
assert single["final"]["val_accuracy"] == rank0["final"]["val_accuracy"], (single["final"], rank0["final"])
assert single["distributed"] is None
for d in ranks:
    assert d["event"] == "done" and d["ok"] is True, d
    assert d["parameters_sha256"] == rank0["parameters_sha256"], (d.get("rank"), d["parameters_sha256"], rank0["parameters_sha256"])
    assert d["final"]["train_loss"] == rank0["final"]["train_loss"], d["final"]
    assert d["final"]["val_accuracy"] == rank0["final"]["val_accuracy"], d["final"]
    if "rank" in d:
        assert d["world_size"] == rank0["distributed"]["world_size"] and d["ring_bytes_sent"] > 0, d
PY
}

# The single-process reference.
pass; expect_rc 0 "single process" -- "$TRAIN" run --job "$T/single/job.toml" --keystore "$T/ks" --passphrase-fd 3 --json
[ -f "$T/single/out/model.sealed" ] || fail "single process: no model.sealed"

# --- 1. Two ranks on loopback.
SECONDS=0
mkdir "$T/rv1"
for r in 0 1; do
  launch c1-r$r "$PASS" env ENCLAVE_NET_IFNAME=lo "$TRAIN" run --job "$T/c1/rank$r/job.toml" --keystore "$T/ks" \
    --passphrase-fd 3 --json --world-size 2 --rank $r --rendezvous "$T/rv1" --peer-timeout 30
done
expect_ok c1-r0 c1-r1
grep -q "rank 1 of 2: ring connected" "$T/c1-r1.err" || fail "case 1: rank 1 did not report the ring"
compare "$T/single/out/report.json" "$T/c1/rank0/out/report.json" "$T/c1-r0.out" "$T/c1-r1.out" \
  || fail "case 1: 2 ranks vs single process"
python3 - "$T/c1/rank0/out/report.json" "$T/c1-r0.out" <<'PY' || fail "case 1: rank 0's report"
import json, sys
r = json.load(open(sys.argv[1]))
done = json.loads(open(sys.argv[2]).read().splitlines()[-1])
d = r["distributed"]
assert d["world_size"] == 2 and d["rank"] == 0 and d["ring_bytes_sent"] > 0, d
assert r["model_exported"] is True and done["model"].endswith("model.sealed"), r["model_export"]
assert done["parameters_sha256"] == r["parameters_sha256"] and done["final"] == r["final"]
PY
[ -f "$T/c1/rank0/out/training-curve.svg" ] && [ -f "$T/c1/rank0/out/model.sealed" ] || fail "case 1: rank 0's outputs"
no_files "$T/c1/rank1/out" "case 1: rank 1 wrote outputs"
[ -z "$(ls -A "$T/rv1")" ] || { ls -la "$T/rv1" >&2; fail "case 1: the rendezvous directory is not empty"; }
echo "case 1 (2 ranks on loopback vs single process): ok (${SECONDS}s)"

# --- 2. Four ranks, one network namespace each, joined by a bridge in a fifth.
SECONDS=0
X=$(( ($$ >> 8) % 250 + 1 )) Y=$(( $$ % 256 ))
netns_setup() {
  command -v ip >/dev/null 2>&1 || { echo "no 'ip' command"; return 1; }
  ip netns add "$BRNS" || return 1
  NETNS+=("$BRNS")
  ip -n "$BRNS" link set lo up && ip -n "$BRNS" link add br0 type bridge && ip -n "$BRNS" link set br0 up || return 1
  local r ns
  for r in 0 1 2 3; do
    ns=$ID-r$r
    ip netns add "$ns" || return 1
    NETNS+=("$ns")
    # veth: v$r on the bridge, its peer eth0 the rank's only interface besides lo.
    ip -n "$BRNS" link add "v$r" type veth peer name eth0 netns "$ns" && ip -n "$BRNS" link set "v$r" master br0 up &&
      ip -n "$ns" link set lo up && ip -n "$ns" addr add "10.$X.$Y.$((r + 1))/24" dev eth0 &&
      ip -n "$ns" link set eth0 up || return 1
  done
  # ip netns exec remounts /sys for the namespace: the counters below need it.
  ip netns exec "$ID-r0" cat /sys/class/net/eth0/statistics/tx_bytes >/dev/null
}
counter() {  # counter R IFACE DIRECTION: the byte counter of IFACE in rank R's namespace
  ip netns exec "$ID-r$1" cat "/sys/class/net/$2/statistics/$3_bytes"
}
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: case 2 (4 ranks in network namespaces): not root"
elif ! netns_setup 2>"$T/netns.err"; then
  echo "SKIP: case 2 (4 ranks in network namespaces): cannot make network namespaces: $(head -1 "$T/netns.err")"
else
  for r in 0 1 2 3; do
    # Each namespace: lo and eth0 with its own address, nothing else.
    got=$(ip -n "$ID-r$r" -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | sort | tr '\n' ' ')
    [ "$got" = "eth0 lo " ] || fail "case 2: namespace $ID-r$r has the interfaces: $got"
    got=$(ip -n "$ID-r$r" -o -4 addr show | awk '{print $2, $4}' | sort | tr '\n' ' ')
    [ "$got" = "eth0 10.$X.$Y.$((r + 1))/24 lo 127.0.0.1/8 " ] || fail "case 2: namespace $ID-r$r has: $got"
    for i in eth0 lo; do eval "before_${i}_$r=$(counter $r $i tx)"; done
  done
  mkdir "$T/rv2"
  for r in 0 1 2 3; do
    launch c2-r$r "$PASS" ip netns exec "$ID-r$r" env -u ENCLAVE_NET_IFNAME "$TRAIN" run \
      --job "$T/c2/rank$r/job.toml" --keystore "$T/ks" --passphrase-fd 3 --json --world-size 4 --rank $r \
      --rendezvous "$T/rv2" --peer-timeout 30
  done
  expect_ok c2-r0 c2-r1 c2-r2 c2-r3
  compare "$T/single/out/report.json" "$T/c2/rank0/out/report.json" "$T/c2-r"{0,1,2,3}.out \
    || fail "case 2: 4 ranks in namespaces vs single process"
  [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["distributed"]["world_size"])' \
      "$T/c2/rank0/out/report.json")" = 4 ] || fail "case 2: report's world size"
  for r in 1 2 3; do no_files "$T/c2/rank$r/out" "case 2: rank $r wrote outputs"; done
  [ -z "$(ls -A "$T/rv2")" ] || fail "case 2: the rendezvous directory is not empty"
  # What proves the ranks used their namespace addresses: a namespace's only interfaces
  # are lo and eth0 (checked above) and a rank's ring neighbours are in other namespaces,
  # which its lo cannot reach (a rank that listened on 127.0.0.1 would publish a handle
  # its neighbour cannot connect to: the ring would fail). So the ring could only be built
  # over eth0's 10.X.Y.R+1 and the bridge. The counters confirm it: every rank sent at
  # least its ring_bytes_sent (payload; the wire adds record and TCP/IP overhead) out of
  # its eth0, and (next to) nothing over its lo.
  for r in 0 1 2 3; do
    if [ $r = 0 ]; then
      ring=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["distributed"]["ring_bytes_sent"])' \
        "$T/c2/rank0/out/report.json")
    else
      ring=$(json_field "$T/c2-r$r.out" ring_bytes_sent)
    fi
    eval "eth=\$(( $(counter $r eth0 tx) - before_eth0_$r )) lo=\$(( $(counter $r lo tx) - before_lo_$r ))"
    echo "  rank $r (10.$X.$Y.$((r + 1))): ring_bytes_sent $ring, eth0 tx +$eth bytes, lo tx +$lo bytes"
    [ "$ring" -gt 0 ] && [ "$eth" -ge "$ring" ] || fail "case 2: rank $r sent $eth bytes on eth0, its ring $ring"
    [ "$lo" -lt 4096 ] || fail "case 2: rank $r sent $lo bytes over loopback"
  done
  echo "case 2 (4 ranks, one network namespace each): ok (${SECONDS}s)"
fi

# --- 3. Another keystore on rank 1: another job key. Clear CSV, so that both ranks load the
# data and differ only in the key; both are refused at the handshake. A connection without
# the key does not end a listener's wait (anyone who reads the handle can make one), so each
# rank fails when its --peer-timeout passes, not at once, and not later.
SECONDS=0
for r in 0 1; do write_job "$T/c3/rank$r/job.toml" clear 4; done
mkdir "$T/rv3"
t0=$(now_ms)
launch c3-r0 "$PASS" env ENCLAVE_NET_IFNAME=lo "$TRAIN" run --job "$T/c3/rank0/job.toml" --keystore "$T/ks" \
  --passphrase-fd 3 --json --world-size 2 --rank 0 --rendezvous "$T/rv3" --peer-timeout 10
launch c3-r1 "$PASS2" env ENCLAVE_NET_IFNAME=lo "$TRAIN" run --job "$T/c3/rank1/job.toml" --keystore "$T/ks2" \
  --passphrase-fd 3 --json --world-size 2 --rank 1 --rendezvous "$T/rv3" --peer-timeout 10
for r in 0 1; do
  await c3-r$r 30; expect_error_exit c3-r$r "$RC"
  took=$(( $(now_ms) - t0 ))
  [ "$took" -ge 10000 ] || fail "case 3: rank $r failed after ${took} ms, before its --peer-timeout of 10 s"
  [ "$took" -le 25000 ] || fail "case 3: rank $r took ${took} ms to fail, --peer-timeout is 10 s"
  grep -q '"ok": *false' "$T/c3-r$r.out" || fail "case 3: rank $r: no JSON error"
  grep -q "did not connect\|did not accept" "$T/c3-r$r.err" && fail "case 3: rank $r timed out instead of being refused"
  echo "  rank $r: exit $RC after $took ms: $(tail -1 "$T/c3-r$r.err")"
done
grep -q "did not prove the job key" "$T/c3-r0.err" "$T/c3-r1.err" || fail "case 3: no job key refusal on stderr"
no_files "$T/c3/rank0/out" "case 3: outputs written"
no_files "$T/c3/rank1/out" "case 3: outputs written"
echo "case 3 (a rank with another keystore): ok (${SECONDS}s)"

# --- 4. A rank that dies, and a rank that goes silent, in a long job (3 ranks).
SECONDS=0
for r in 0 1 2; do write_job "$T/c4/rank$r/job.toml" clear 100000; done
wait_epochs() {  # wait_epochs NAME COUNT: NAME has printed COUNT epoch lines (it is in the ring)
  local deadline=$(( $(now_ms) + 60000 ))
  until [ "$(grep -c '"event":"epoch"' "$T/$1.out")" -ge "$2" ]; do
    kill -0 "${PID[$1]}" 2>/dev/null || { cat "$T/$1.err" >&2; fail "$1 exited before training"; }
    [ "$(now_ms)" -le "$deadline" ] || fail "$1: no $2 epochs in 60 s"
    sleep 0.05
  done
}
# run_three CASE SIGNAL PEER_TIMEOUT BOUND: kill rank 1 with SIGNAL after 3 epochs; ranks 0
# and 2 must fail with "unavailable" (10) within BOUND seconds.
run_three() {
  local c=$1 sig=$2 timeout=$3 bound=$4 r t0 took
  mkdir "$T/rv-$c"
  for r in 0 1 2; do
    launch $c-r$r "$PASS" env ENCLAVE_NET_IFNAME=lo "$TRAIN" run --job "$T/c4/rank$r/job.toml" --keystore "$T/ks" \
      --passphrase-fd 3 --json --world-size 3 --rank $r --rendezvous "$T/rv-$c" --peer-timeout "$timeout"
  done
  wait_epochs $c-r1 3
  # The victim's exit status is of no interest: disowned, bash does not announce its death.
  disown "${PID[$c-r1]}"
  kill -"$sig" "${PID[$c-r1]}"; t0=$(now_ms)
  for r in 0 2; do
    await $c-r$r $(( bound + 30 )); took=$(( $(now_ms) - t0 ))
    [ "$RC" = 10 ] || { cat "$T/$c-r$r.err" >&2; fail "$c: rank $r exit $RC, want 10 (unavailable)"; }
    expect_error_exit $c-r$r "$RC"
    [ "$took" -le $(( bound * 1000 )) ] || fail "$c: rank $r took $took ms to fail, want <= $bound s"
    echo "  SIG$sig on rank 1: rank $r exit $RC after $took ms: $(tail -1 "$T/$c-r$r.err")"
  done
  kill -KILL "${PID[$c-r1]}" 2>/dev/null
  for _ in $(seq 100); do kill -0 "${PID[$c-r1]}" 2>/dev/null || break; sleep 0.05; done
  kill -0 "${PID[$c-r1]}" 2>/dev/null || unset "LIVE[${PID[$c-r1]}]"
  for r in 0 1 2; do no_files "$T/c4/rank$r/out" "$c: outputs written by rank $r"; done
}
run_three c4-kill KILL 10 15            # the peers see the connection close at once
grep -q "connection closed by peer\|Connection reset" "$T/c4-kill-r0.err" "$T/c4-kill-r2.err" \
  || fail "case 4: the failed peer is not named"
run_three c4-stop STOP 3 13             # rank 1 holds its sockets open but sends nothing
grep -q "no progress for 3 s" "$T/c4-stop-r0.err" "$T/c4-stop-r2.err" || fail "case 4: no peer timeout message"
echo "case 4 (a rank killed, a rank silent): ok (${SECONDS}s)"

# --- 5. --stop-after-step 23 on rank 1 only stops both ranks; --resume finishes both with
# the parameters of an uninterrupted run (the same job in other directories).
SECONDS=0
CKPT='\n[checkpoint]\nevery_steps = 10\nkeep = 2\n'
for d in c5/rank0 c5/rank1 c5-full/rank0 c5-full/rank1; do write_job "$T/$d/job.toml" sealed 4 "$CKPT"; done
mkdir "$T/rv5" "$T/rv5-full"
for r in 0 1; do
  launch c5-full-r$r "$PASS" env ENCLAVE_NET_IFNAME=lo "$TRAIN" run --job "$T/c5-full/rank$r/job.toml" \
    --keystore "$T/ks" --passphrase-fd 3 --json --world-size 2 --rank $r --rendezvous "$T/rv5-full" --peer-timeout 30
done
expect_ok c5-full-r0 c5-full-r1
launch c5-stop-r0 "$PASS" env ENCLAVE_NET_IFNAME=lo "$TRAIN" run --job "$T/c5/rank0/job.toml" --keystore "$T/ks" \
  --passphrase-fd 3 --json --world-size 2 --rank 0 --rendezvous "$T/rv5" --peer-timeout 30
launch c5-stop-r1 "$PASS" env ENCLAVE_NET_IFNAME=lo "$TRAIN" run --job "$T/c5/rank1/job.toml" --keystore "$T/ks" \
  --passphrase-fd 3 --json --world-size 2 --rank 1 --rendezvous "$T/rv5" --peer-timeout 30 --stop-after-step 23
expect_ok c5-stop-r0 c5-stop-r1
for r in 0 1; do
  [ "$(json_field "$T/c5-stop-r$r.out" event)" = stopped ] && [ "$(json_field "$T/c5-stop-r$r.out" step)" = 23 ] \
    || { tail -1 "$T/c5-stop-r$r.out" >&2; fail "case 5: rank $r did not stop at step 23"; }
done
[ -f "$T/c5/rank0/out/checkpoints/step-000000000023.ckpt" ] || fail "case 5: rank 0: no checkpoint at step 23"
[ -f "$T/c5/rank1/out/checkpoints-rank-1/step-000000000023.ckpt" ] || fail "case 5: rank 1: no checkpoint at step 23"
for r in 0 1; do
  extra=$(find "$T/c5/rank$r/out" -type f ! -name '*.ckpt')
  [ -z "$extra" ] || fail "case 5: a stopped rank $r wrote $extra"
done
for r in 0 1; do
  launch c5-resume-r$r "$PASS" env ENCLAVE_NET_IFNAME=lo "$TRAIN" run --job "$T/c5/rank$r/job.toml" \
    --keystore "$T/ks" --passphrase-fd 3 --json --world-size 2 --rank $r --rendezvous "$T/rv5" --peer-timeout 30 --resume
done
expect_ok c5-resume-r0 c5-resume-r1
for r in 0 1; do grep -q "resuming from .*step-000000000023.ckpt" "$T/c5-resume-r$r.err" || fail "case 5: rank $r resume"; done
python3 - "$T/c5-full/rank0/out/report.json" "$T/c5/rank0/out/report.json" "$T/c5-full-r1.out" "$T/c5-resume-r1.out" \
  <<'PY' || fail "case 5: the resumed ranks differ from the uninterrupted run"
import json, sys
full, resumed = (json.load(open(p)) for p in sys.argv[1:3])
r1_full, r1_resumed = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[3:5])
want = full["parameters_sha256"]
assert resumed["parameters_sha256"] == want and r1_full["parameters_sha256"] == want, (want, resumed["parameters_sha256"])
assert r1_resumed["parameters_sha256"] == want, (want, r1_resumed["parameters_sha256"])
assert resumed["resumed_from"]["step"] == 23 and full["resumed_from"] is None, resumed["resumed_from"]
assert [e["train_loss"] for e in full["epochs"]] == [e["train_loss"] for e in resumed["epochs"]]
assert resumed["distributed"]["world_size"] == 2
PY
extra=$(find "$T/c5/rank1/out" -type f ! -path '*/checkpoints-rank-1/*')
[ -z "$extra" ] || fail "case 5: rank 1 wrote $extra"
echo "case 5 (--stop-after-step on rank 1, --resume): ok (${SECONDS}s)"

# --- 6. Bad rank flags. The binary answers them as bad option values, "invalid input" (3),
# like --stop-after-step 0 (usage, 2, is the parser's: unknown flag, missing value); a
# distributed run without a key source is a failed precondition (8), like checkpoints
# without --keystore. docs/exit-codes.md does not list the rank flags yet.
write_job "$T/c6/job.toml" clear 1
expect_rc 3 "--world-size without --rendezvous" -- "$TRAIN" run --job "$T/c6/job.toml" --world-size 2
grep -q -- "--rendezvous" "$T/err" || fail "message names --rendezvous"
expect_rc 3 "--rank 2 of 2" -- "$TRAIN" run --job "$T/c6/job.toml" --world-size 2 --rank 2 --rendezvous "$T"
grep -q -- "--rank must be below --world-size" "$T/err" || fail "rank range message"
expect_rc 3 "--rank without --world-size" -- "$TRAIN" run --job "$T/c6/job.toml" --rank 1
grep -q -- "--world-size" "$T/err" || fail "message names --world-size"
expect_rc 3 "--rendezvous without --world-size" -- "$TRAIN" run --job "$T/c6/job.toml" --rendezvous "$T"
expect_rc 3 "--world-size 0" -- "$TRAIN" run --job "$T/c6/job.toml" --world-size 0 --rendezvous "$T"
expect_rc 3 "--peer-timeout 0" -- "$TRAIN" run --job "$T/c6/job.toml" --world-size 2 --rendezvous "$T" --peer-timeout 0
expect_rc 8 "distributed without --keystore" -- "$TRAIN" run --job "$T/c6/job.toml" --world-size 2 --rank 0 \
  --rendezvous "$T"
grep -q "needs a job communication key" "$T/err" || fail "no-key message"
pass; expect_rc 6 "rendezvous directory missing" -- "$TRAIN" run --job "$T/c6/job.toml" --keystore "$T/ks" \
  --passphrase-fd 3 --world-size 2 --rank 0 --rendezvous "$T/none"
expect_rc 2 "--world-size without a value" -- "$TRAIN" run --job "$T/c6/job.toml" --world-size
no_files "$T/c6/out" "case 6: outputs written"
echo "case 6 (bad rank flags): ok"
echo "enclave_train_distributed_cli: all checks passed"
