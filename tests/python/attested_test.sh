#!/usr/bin/env bash
# Issue 19 section 3: the `enclave` package in attested mode, on real parts: a swtpm as the
# host's TPM, a running enclave-broker over TLS 1.3 with a signed data-use policy, the keys
# released to this Python interpreter and the approved script only.
#   1. a torch MLP trains on the sealed breast-cancer sample; its model leaves sealed to the
#      tenant's export key (enclave-data open-model opens it); the audit log holds the release
#      with the approved workload digest;
#   2. a changed script (another workload digest) gets no key: refused, logged;
#   3. the job revoked mid-training: the next renewal is refused, the next batch raises
#      SessionEnded and the tensors handed out before are wiped.
#   attested_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
bin=$build/tools
py=/usr/bin/python3  # the system python, whose torch is Debian's (a pyenv shim may come first in PATH)
$py -c 'import torch' 2>/dev/null || { echo "SKIP: python3-torch not installed"; exit 77; }
for t in swtpm swtpm_setup openssl; do command -v "$t" >/dev/null || { echo "SKIP: $t not installed"; exit 77; }; done
work=$(mktemp -d)
broker_pid=
cleanup() {
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null || true
  "$src/scripts/swtpm-stop" "$work/swtpm" >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
export PYTHONPATH=$build/python PYTHONDONTWRITEBYTECODE=1
fail() { echo "FAIL: $*"; exit 1; }

head -c 24 /dev/urandom | base64 >pass
ks=(--keystore "$work/ks.json" --passphrase-fd 3)
mkdir job policies
"$bin/enclave-data" keystore init "${ks[@]}" --kdf-opslimit 2 --kdf-memlimit-mib 19 3<pass >/dev/null
"$bin/enclave-data" seal --csv "$src/data/samples/breast_cancer_wisconsin.csv" --label diagnosis --positive malignant \
  --suite aes-256-gcm --dataset-id wdbc-2026 "${ks[@]}" --out job/wdbc.sealed 3<pass >/dev/null
"$bin/enclave-data" keystore export-key create "${ks[@]}" 3<pass >/dev/null

# The host's TPM, and an attestation policy for it (EK roots named from the policy's folder).
"$src/scripts/swtpm-start" "$work/swtpm" >/dev/null
tcti=$(cat swtpm/tcti)
sed 's#\.\./out/swtpm/#../swtpm/#g' "$src/policies/swtpm.json" >policies/swtpm.json
att_sha=$(sha256sum policies/swtpm.json | cut -d' ' -f1)

# The broker (as scripts/demo starts it).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=enclave-broker-test \
  -addext subjectAltName=IP:127.0.0.1 -keyout tls.key -out tls.crt >/dev/null 2>&1
mkdir state
"$bin/enclave-audit" init --log audit --signing-key audit.key --public-key audit.pub >/dev/null
"$bin/enclave-broker" admin-token --out admin.token >/dev/null
"$bin/enclave-broker" policy keygen --out officer >/dev/null
cat >broker.toml <<TOML
[server]
listen = "127.0.0.1"
port = 0
certificate = "tls.crt"
private_key = "tls.key"
[store]
path = "state/broker.db"
[keystore]
path = "ks.json"
[audit]
dir = "audit"
signing_key = "audit.key"
actor = "broker@test"
[attestation]
policy = "policies/swtpm.json"
[release]
policy_signers = ["officer.pub"]
[admin]
token_file = "admin.token"
TOML
"$bin/enclave-broker" serve --config broker.toml --passphrase-fd 3 3<pass >serve.out 2>serve.log &
broker_pid=$!
for _ in $(seq 600); do grep -q port serve.out 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' serve.out)
[ -n "$port" ] || { cat serve.log; fail "the broker did not start"; }
url=https://127.0.0.1:$port

# The approved code: this interpreter and the two scripts, each its own workload. The
# revocation needs renewals soon: the shortest lease the policy format allows.
python=$(readlink -f "$py")
# The revocation runs as a job of its own (a job key is bound to one workload), in job2/.
mkdir job2
cp "$src/tests/python/attested_train.py" job/
cp "$src/tests/python/attested_revoked.py" job/wdbc.sealed job2/
w_train=$("$bin/enclave-broker" policy workload "$python" --code-dir job --code attested_train.py)
w_revoked=$("$bin/enclave-broker" policy workload "$python" --code-dir job2 --code attested_revoked.py)
"$py" - "$src/policies/data-use/dev-swtpm.json" "$att_sha" "$w_train" "$w_revoked" >policy.json <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["attestation_policy_sha256"] = sys.argv[2]
for d in p["datasets"]:
    d["workloads"] = [sys.argv[3], sys.argv[4]]
p["lease"] = {"duration_s": 60, "reattest_interval_s": 30}
json.dump(p, sys.stdout, indent=1)
PY
"$bin/enclave-broker" policy sign --policy policy.json --key officer.key >/dev/null
"$bin/enclave-broker" policy activate --config broker.toml --url "$url" --policy policy.json >/dev/null
"$bin/enclave-attest" register --state host --tcti "$tcti" --broker "$url" --ca tls.crt >/dev/null
# swtpm has no kernel: the measurement IMA makes of the interpreter is simulated into PCR 10.
"$bin/enclave-attest" ima-simulate "$python" --log ima.log --tcti "$tcti" >/dev/null
cat >job/job.toml <<JOB
name = "torch-attested"
seed = 7
device = "cpu"
output_dir = "out"

[broker]
url = "$url"
ca = "../tls.crt"
policy = "dev-swtpm"
requester = "data-scientist@test"

[[datasets]]
id = "wdbc-2026"
path = "wdbc.sealed"

[model]
hidden = [64]

[training]
epochs = 30
batch_size = 32
JOB
sed 's/^name = .*/name = "torch-attested-revoked"/' job/job.toml >job2/job.toml

# 1. Train in attested mode; the model opens with the tenant's keystore only.
(cd job && "$py" attested_train.py "$tcti" "$work/host" "$work/ima.log") >train.json 2>train.err ||
  { cat train.err serve.log; fail "attested training failed"; }
"$py" - <<'PY' || fail "attested training: $(cat train.json)"
import json
r = json.loads(open("train.json").read().splitlines()[-1])
print(f"attested torch MLP: validation accuracy {r['accuracy']:.4f}, job {r['job_id']}")
assert r["accuracy"] >= 0.93, r
assert r["streamed_rows"] == 569, r  # one streamed epoch: every record once
assert r["ring_sum"] == [1.0, 1.0, 1.0], r
assert r["nccl_plugin"].endswith("libnccl-net-enclave.so") and r["plugin_init"] == 0, r  # the broker's key installed
PY
"$bin/enclave-data" open-model "${ks[@]}" --in job/model.sealed --out model.bin 3<pass >/dev/null
[ "$(stat -c %s model.bin)" -gt 1000 ] || fail "the opened model is too small"
"$bin/enclave-audit" show --log audit --key audit.pub --type key.released --json >released.json
grep -q "\"workload\":\"$w_train\"" released.json || grep -q "\"workload\": *\"$w_train\"" released.json ||
  fail "no key.released entry names the approved workload $w_train"
# Nothing decrypted reached a file: no record of the clear CSV's first data row anywhere.
row=$(sed -n 2p "$src/data/samples/breast_cancer_wisconsin.csv" | cut -d, -f2-4)
if grep -rqF "$row" job job2 state audit 2>/dev/null; then fail "a clear record reached a file"; fi

# 2. A changed script is another workload: no key, the refusal is logged.
echo "# changed after the officer approved it" >>job/attested_train.py
if (cd job && "$py" attested_train.py "$tcti" "$work/host" "$work/ima.log") >changed.out 2>changed.err; then
  fail "a changed script received the keys"
fi
# The client learns only that it was refused and where it is logged; the log says why.
grep -q "release refused (audit entry" changed.err || { cat changed.err; fail "the refusal does not name its audit entry"; }
w_changed=$("$bin/enclave-broker" policy workload "$python" --code-dir job --code attested_train.py)
"$bin/enclave-audit" show --log audit --key audit.pub --type release.refused --json |
  grep -q "\"reason\": \"workload $w_changed is not approved" ||
  fail "the refused release is not in the audit log with the changed script's workload"
echo "changed script: refused, logged as workload $w_changed not approved"

# 3. Revoked mid-training: the renewal is refused, the next batch raises, tensors are wiped.
(cd job2 && timeout 150 "$py" attested_revoked.py "$tcti" "$work/host" "$work/ima.log") >revoked.json 2>revoked.err &
pid=$!
for _ in $(seq 600); do grep -q job_id revoked.json 2>/dev/null && break; sleep 0.1; done
job_id=$("$py" -c 'import json; print(json.loads(open("revoked.json").readline())["job_id"])') ||
  { cat revoked.err; fail "the revocation script did not start"; }
"$bin/enclave-broker" revoke --config broker.toml --url "$url" --job "$job_id" --reason "test: revoked mid-training" \
  >/dev/null
wait "$pid" || { cat revoked.err; fail "the revocation script failed"; }
"$py" - <<'PY' || fail "revocation: $(cat revoked.json) $(cat revoked.err)"
import json
r = json.loads(open("revoked.json").read().splitlines()[-1])
print(f"revoked mid-training: {r['batches']} batches, then: {r['ended']}")
assert r["ended"] and "lease" in r["ended"], r
assert r["held_sum_after"] == 0.0, r
PY
echo "OK: attested mode: trained, exported, a changed script refused, a revocation ended the session and wiped"
