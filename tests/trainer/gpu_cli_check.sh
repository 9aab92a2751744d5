#!/usr/bin/env bash
# enclave-train on a GPU as a user runs it (scripts/gpu-check runs this; CI has no GPU):
# a dataset sealed with enclave-data, `run --device gpu` (report, the model sealed on the
# device, open-model, predict), the same job on the CPU beside it, an interruption and
# --resume (the same model bit for bit), [streaming] (and its resume), cv, and two
# distributed GPU ranks through NCCL and the encrypted plugin (two NCCL "hosts" on the one
# GPU). Prints one "ok:" line per check and the figures it compared.
#   gpu_cli_check.sh ENCLAVE_TRAIN ENCLAVE_DATA SAMPLES_DIR EXAMPLES_DIR
# Exit status: 0 every check passed, 1 a check failed, 2 no GPU visible (nothing checked).
set -u
TRAIN=$1 DATA=$2 SAMPLES=$3 EXAMPLES=$4
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_cli_check: no GPU visible (nvidia-smi -L failed): nothing checked"
  exit 2
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
expect_rc() {  # expect_rc CODE DESCRIPTION -- command...
  local want=$1 what=$2; shift 3
  "$@" >"$T/out" 2>"$T/err"; local rc=$?
  [ "$rc" = "$want" ] || { tail -20 "$T/err" >&2; fail "$what: exit $rc, want $want"; }
}
PASS="correct horse battery staple"
pass() { exec 3<<<"$PASS"; }
CSV="$SAMPLES/breast_cancer_wisconsin.csv"

pass; expect_rc 0 "keystore init" -- "$DATA" keystore init --keystore "$T/ks" --passphrase-fd 3 \
  --kdf-opslimit 2 --kdf-memlimit-mib 19
pass; expect_rc 0 "seal" -- "$DATA" seal --csv "$CSV" --label diagnosis --positive malignant --suite aes-256-gcm \
  --dataset-id breast-cancer --keystore "$T/ks" --out "$T/bc.sealed" --passphrase-fd 3
pass; expect_rc 0 "export-key create" -- "$DATA" keystore export-key create --keystore "$T/ks" --passphrase-fd 3
pass; expect_rc 0 "export-key show" -- "$DATA" keystore export-key show --keystore "$T/ks" --passphrase-fd 3 \
  --out "$T/tenant-export.pub"
job() {  # job NAME [EXTRA_TOML]: the example sealed job, 5 epochs, output in $T/out-NAME
  sed -e "s#\.\./out/breast_cancer.sealed#$T/bc.sealed#; s#\.\./out/tenant-export.pub#$T/tenant-export.pub#" \
    -e "s#\.\./out/[a-z0-9-]*\"#$T/out-$1\"#; s/epochs = 60/epochs = 5/; s/every_steps = 200/every_steps = 20/" \
    "$EXAMPLES/breast_cancer_sealed.toml" > "$T/$1.toml"
  [ $# -lt 2 ] || printf '%b' "$2" >> "$T/$1.toml"
}
train() {  # train NAME DEVICE [ARGS...]
  local name=$1 device=$2; shift 2
  pass; expect_rc 0 "run $name on $device" -- "$TRAIN" run --job "$T/$name.toml" --keystore "$T/ks" \
    --passphrase-fd 3 --device "$device" "$@"
}
open_model() {  # open_model NAME -> $T/NAME.bin
  pass; expect_rc 0 "open-model $1" -- "$DATA" open-model --keystore "$T/ks" --passphrase-fd 3 \
    --in "$T/out-$1/model.sealed" --out "$T/$1.bin"
}

# 1. Loaded: the GPU run and the CPU run of the same job.
job gpu; job cpu
train gpu gpu --json
train cpu cpu
open_model gpu
python3 - "$T/out-gpu/report.json" "$T/out-cpu/report.json" "$T/gpu.bin" <<'PY' || fail "GPU report"
import hashlib, json, sys
g, c = (json.load(open(p)) for p in sys.argv[1:3])
m = open(sys.argv[3], "rb").read()
assert g["device"] == "gpu" and c["device"] == "cpu", (g["device"], c["device"])
e = g["model_export"]
assert g["model_exported"] is True and e["sealed_on"] == "gpu", e
assert e["plaintext_sha256"] == hashlib.sha256(m).hexdigest() and e["plaintext_bytes"] == len(m)
assert m[:8] == b"ENCLMODL" and hashlib.sha256(m[:-32]).digest() == m[-32:]
assert g["checkpoints"]["written"] > 0, g["checkpoints"]
gv, cv = g["final"]["val_accuracy"], c["final"]["val_accuracy"]
assert gv > 0.9 and abs(gv - cv) <= 0.02, (gv, cv)
assert 0.9 < g["all_rows"]["accuracy"] <= 1, g["all_rows"]
print(f"  GPU val accuracy {gv:.4f} (CPU {cv:.4f}), all rows {g['all_rows']['accuracy']:.4f}")
PY
ok "run --device gpu: report, model sealed on the GPU, opened by the tenant, accuracy beside the CPU run"

expect_rc 0 "predict" -- "$TRAIN" predict --model "$T/gpu.bin" --csv "$CSV" --out "$T/pred.csv" --json
python3 - "$T/out" "$T/out-gpu/report.json" <<'PY' || fail "predict on the GPU-trained model"
import json, sys
out, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
# predict runs on the CPU: at most one row near p = 0.5 may fall the other way.
assert out["rows"] == r["rows"] == 569 and abs(out["accuracy"] - r["all_rows"]["accuracy"]) <= 1 / 569 + 1e-12, (out, r["all_rows"])
PY
ok "predict on the GPU-trained model: the report's all-rows accuracy"

# 2. Stopped after step 23 and resumed on the GPU: the same model file bit for bit.
job resume
train resume gpu --stop-after-step 23
[ -f "$T/out-resume/checkpoints/step-000000000023.ckpt" ] || fail "no checkpoint at step 23"
[ ! -e "$T/out-resume/model.sealed" ] || fail "a model after a stop"
train resume gpu --resume
grep -q "resuming from .*step-000000000023.ckpt" "$T/err" || fail "resume message"
open_model resume
cmp -s "$T/gpu.bin" "$T/resume.bin" || fail "the resumed GPU run's model differs from the uninterrupted one's"
ok "stop after step 23 and --resume on the GPU: the same model file"

# 3. [streaming] on the GPU, and its stop and resume.
job stream '[streaming]\nblock_rows = 32\nwindow_blocks = 3\n'
job stream-resume '[streaming]\nblock_rows = 32\nwindow_blocks = 3\n'
train stream gpu
train stream-resume gpu --stop-after-step 23
train stream-resume gpu --resume
open_model stream; open_model stream-resume
cmp -s "$T/stream.bin" "$T/stream-resume.bin" || fail "the resumed streamed GPU run's model differs"
python3 - "$T/out-stream/report.json" "$T/out-gpu/report.json" <<'PY' || fail "streamed GPU report"
import json, sys
s, g = (json.load(open(p)) for p in sys.argv[1:])
assert s["device"] == "gpu" and s["streaming"] == {"block_rows": 32, "window_blocks": 3}, (s["device"], s["streaming"])
assert s["model_export"]["sealed_on"] == "gpu"
assert s["final"]["val_accuracy"] > 0.9 and s["rows"] == g["rows"], s["final"]
print(f"  streamed GPU val accuracy {s['final']['val_accuracy']:.4f}, all rows {s['all_rows']['accuracy']:.4f}")
PY
ok "[streaming] on the GPU: report, model, stop and --resume bit-identical"

# 4. Cross-validation on the GPU.
pass; expect_rc 0 "cv" -- "$TRAIN" cv --job "$T/gpu.toml" --keystore "$T/ks" --passphrase-fd 3 --device gpu --folds 3
python3 - "$T/out-gpu/cv_metrics.json" <<'PY' || fail "cv on the GPU"
import json, sys
m = json.load(open(sys.argv[1]))
acc = m["mean_accuracy"]
assert acc > 0.9, m
print(f"  3-fold mean accuracy {acc:.4f}")
PY
ok "cv --device gpu --folds 3"

# 5. Two distributed GPU ranks on this one GPU: distinct NCCL host ids make NCCL connect
# them through the network plugin (as two hosts would be).
# Every rank's job file is the same bytes (the job id is its digest): output_dir "out",
# relative to each rank's own folder.
mkdir -p "$T/rv"
for r in 0 1; do
  mkdir -p "$T/dist$r"
  sed -e "s#^output_dir = .*#output_dir = \"out\"#" "$T/gpu.toml" > "$T/dist$r/job.toml"
  ( exec 3<<<"$PASS"; exec env NCCL_HOSTID="gpu-cli-host-$r" ENCLAVE_NET_IFNAME=lo "$TRAIN" run --job "$T/dist$r/job.toml" \
      --keystore "$T/ks" --passphrase-fd 3 --device gpu --json --world-size 2 --rank $r --rendezvous "$T/rv" \
      --peer-timeout 60 >"$T/dist$r.out" 2>"$T/dist$r.err" ) &
  eval "pid$r=\$!"
done
rc0=0 rc1=0
wait "$pid0" || rc0=$?
wait "$pid1" || rc1=$?
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || { for f in "$T/dist0.err" "$T/dist1.err"; do tail -n 5 "$f" >&2; done; fail "distributed GPU ranks: exit $rc0 / $rc1"; }
python3 - "$T/out-gpu/report.json" "$T/dist0/out/report.json" "$T/dist1.out" <<'PY' || fail "distributed GPU report"
import json, sys
single, rank0 = (json.load(open(p)) for p in sys.argv[1:3])
done1 = json.loads(open(sys.argv[3]).read().splitlines()[-1])
assert rank0["device"] == "gpu" and rank0["distributed"]["world_size"] == 2, rank0["distributed"]
assert done1["event"] == "done" and done1["ok"] is True and done1["parameters_sha256"] == rank0["parameters_sha256"], done1
worst = 0.0
for a, b in zip(single["epochs"], rank0["epochs"]):
    worst = max(worst, abs(a["train_loss"] - b["train_loss"]) / abs(a["train_loss"]))
assert len(single["epochs"]) == len(rank0["epochs"]) and worst <= 1e-4, worst
assert abs(single["final"]["val_accuracy"] - rank0["final"]["val_accuracy"]) <= 0.01, (single["final"], rank0["final"])
print(f"  2 GPU ranks vs 1: train loss within {worst:.2g} relative, val accuracy {rank0['final']['val_accuracy']:.4f}")
PY
[ -z "$(ls -A "$T/rv")" ] || fail "the rendezvous directory is not empty"
ok "2 distributed GPU ranks (NCCL through the enclave plugin): the same parameters on both, equal to one GPU process"
echo "gpu_cli_check: all checks passed"
