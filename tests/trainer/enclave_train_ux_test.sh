#!/usr/bin/env bash
# What the user of enclave-train sees (issue 18 §7), on the real binary: the plot says what
# was trained on and how it ended and that it ran in development mode (1); a job without a
# validation split says so everywhere instead of printing NaN (2); run refuses a job without
# an export key before training (3); predict --json without --out prints the predictions
# (4); path errors name the job key and its line, "exists" errors name --force (5); every
# verb's help is its own (6); metrics for people have 4 significant digits (7).
# Each item is checked on its own (a subshell) and every failing item is listed, so that
# the script run on an older binary shows which items it lacks.
set -u
TRAIN=$1 DATA=$2 SAMPLES=$3 EXAMPLES=$4
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/cli_helpers.sh"
CSV="$SAMPLES/breast_cancer_wisconsin.csv"

# Setup: the tenant's keystore and export key; a 5-epoch job on the clear CSV, sealed to it;
# the opened model and its predictions as CSV.
pass; expect_rc 0 "keystore init" -- "$DATA" keystore init --keystore "$T/ks" --passphrase-fd 3 \
  --kdf-opslimit 2 --kdf-memlimit-mib 19
pass; expect_rc 0 "export-key create" -- "$DATA" keystore export-key create --keystore "$T/ks" --passphrase-fd 3
pass; expect_rc 0 "export-key show" -- "$DATA" keystore export-key show --keystore "$T/ks" --passphrase-fd 3 \
  --out "$T/tenant-export.pub"
sed -e "s#\.\./data/samples#$SAMPLES#; s#\.\./out/[a-z0-9-]*#$T/out-clear#; s/epochs = 60/epochs = 5/" \
    -e "/^output_dir = /a export_key = \"$T/tenant-export.pub\"" "$EXAMPLES/breast_cancer_mlp.toml" > "$T/clear.toml"
grep -q "^export_key = " "$T/clear.toml" || fail "clear job has no export_key"
expect_rc 0 "run" -- "$TRAIN" run --job "$T/clear.toml" --device cpu
pass; expect_rc 0 "open-model" -- "$DATA" open-model --keystore "$T/ks" --passphrase-fd 3 \
  --in "$T/out-clear/model.sealed" --out "$T/model.bin"
expect_rc 0 "predict --out" -- "$TRAIN" predict --model "$T/model.bin" --csv "$CSV" --out "$T/pred1.csv"

sig4() {  # sig4 WHAT FILE: every metric after accuracy/AUC/loss/std/val_acc/val_auc in FILE has 4 significant digits
  python3 - "$1" "$2" <<'PY' || fail "$1: metrics not printed to 4 significant digits"
import re, sys
what, text = sys.argv[1], open(sys.argv[2]).read()
nums = re.findall(r"(?:accuracy|AUC|loss|std|val_acc|val_auc) ([-+0-9.e]+)", text)
assert nums, (what, text)
for n in nums:
    mant = n.split("e")[0].lstrip("-+").replace(".", "").lstrip("0")
    assert len(mant) == 4 or re.fullmatch(r"0\.000", n), (what, n, text)
PY
}
# on_tty FILE -- command...: runs the command with stderr on a terminal (the per-epoch
# progress lines), its output in FILE, one line per carriage return; 1 without script(1).
on_tty() {
  local file=$1; shift 2
  command -v script >/dev/null 2>&1 || return 1
  script -qec "$(printf '%q ' "$@")" /dev/null 2>&1 | tr '\r' '\n' | grep -a . > "$file"
}

item_plot_header() {
# §7.1: the plot names the dataset, the row counts, the final metrics (4 significant
# digits) and the development mode.
python3 - "$T/out-clear/training-curve.svg" "$T/out-clear/report.json" <<'PY' || fail "plot header"
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
r = json.load(open(sys.argv[2]))
text = {e.get("id"): (e.text or "") for e in root.iter("{http://www.w3.org/2000/svg}text") if e.get("id")}
assert "breast-cancer (breast_cancer_wisconsin.csv, 569 rows)" in text["info-datasets"], text
assert f"{r['train_rows']} training rows, {r['val_rows']} validation rows" in text["info-rows"], text
f = r["final"]
for label, v in (("training loss", f["train_loss"]), ("validation loss", f["val_loss"]),
                 ("validation accuracy", f["val_accuracy"]), ("ROC AUC", f["val_roc_auc"])):
    assert f"{label} {v:#.4g}" in text["info-final"], (label, v, text["info-final"])
assert "development mode" in text["info-mode"].lower(), text
PY
}

item_no_validation_split() {
# §7.2: validation_fraction = 0: "no validation split" on the console, null validation
# fields in the JSON lines and the report, no empty panel in the plot, no NaN anywhere.
sed -e "s#$T/out-clear\"#$T/out-noval\"#; s/^validation_fraction = .*/validation_fraction = 0/" "$T/clear.toml" \
  > "$T/noval.toml"
grep -q "^validation_fraction = 0$" "$T/noval.toml" || fail "noval job"
expect_rc 0 "run, validation_fraction = 0" -- "$TRAIN" run --job "$T/noval.toml" --device cpu
grep -q "no validation split (validation_fraction = 0)" "$T/out" || { cat "$T/out" >&2; fail "console: no 'no validation split'"; }
! grep -qiw "nan" "$T/out" "$T/err" || { cat "$T/out" "$T/err" >&2; fail "console prints nan"; }
sig4 "run summary without validation" "$T/out"
if on_tty "$T/tty" -- "$TRAIN" run --job "$T/noval.toml" --device cpu --force; then
  grep -q "^epoch 5/5 loss [0-9.]* (no validation split) lr " "$T/tty" || { cat "$T/tty" >&2; fail "progress line: no 'no validation split'"; }
  ! grep -qiw "nan" "$T/tty" || { cat "$T/tty" >&2; fail "progress lines print nan"; }
fi
expect_rc 0 "run --json, validation_fraction = 0" -- "$TRAIN" run --job "$T/noval.toml" --device cpu --json --force
python3 - "$T/out" "$T/out-noval/report.json" "$T/out-noval/training-curve.svg" <<'PY' || fail "validation_fraction = 0"
import json, sys, xml.etree.ElementTree as ET
val = ("val_loss", "val_accuracy", "val_roc_auc")
lines = [json.loads(l) for l in open(sys.argv[1])]
epochs = [l for l in lines if l.get("event") == "epoch"]
assert len(epochs) == 5 and all(l[k] is None for l in epochs for k in val), epochs
assert all(isinstance(l["train_loss"], float) for l in epochs), epochs
done = lines[-1]
assert done["event"] == "done" and done["validation_split"] is False, done
assert all(done["final"][k] is None for k in val), done
r = json.load(open(sys.argv[2]))
assert r["validation_split"] is False and r["val_rows"] == 0 and r["train_rows"] == 569, r
assert all(e[k] is None for e in r["epochs"] + [r["final"]] for k in val), r["final"]
svg = open(sys.argv[3]).read()
assert "nan" not in svg.lower(), "nan in the plot"
root = ET.fromstring(svg)
ns = "{http://www.w3.org/2000/svg}"
series = {g.get("data-series") for g in root.iter(ns + "g") if g.get("class") == "series"}
assert series == {"train_loss"}, series
text = {e.get("id"): (e.text or "") for e in root.iter(ns + "text") if e.get("id")}
assert "no validation split" in text["panel-note"], text
assert "569 training rows, no validation split (validation_fraction = 0)" in text["info-rows"], text
assert "no validation split" in text["info-final"], text
PY
}

item_no_export_key() {
# §7.3: run without an export key (none in the job, no --export-key) is refused before
# training: exit 8 (failed precondition), one line naming --export-key, nothing written.
grep -v "^export_key = " "$T/clear.toml" | sed -e "s#$T/out-clear\"#$T/out-nokey\"#" > "$T/nokey.toml"
expect_rc 8 "run without an export key" -- "$TRAIN" run --job "$T/nokey.toml" --device cpu
grep -q "^enclave-train run: error: failed precondition: $T/nokey.toml: no export key: .*--export-key" "$T/err" ||
  { cat "$T/err" >&2; fail "no-export-key message"; }
[ "$(grep -vc WARNING "$T/err")" = 1 ] || { cat "$T/err" >&2; fail "no-export-key error is not one line"; }
[ ! -e "$T/out-nokey" ] || fail "run without an export key wrote $(find "$T/out-nokey")"
expect_rc 8 "run --json without an export key" -- "$TRAIN" run --job "$T/nokey.toml" --device cpu --json
python3 -c 'import json,sys; l=open(sys.argv[1]).read().splitlines(); assert len(l)==1 and json.loads(l[0])["error"]["code"]=="failed precondition", l' \
  "$T/out" || fail "run --json without an export key: not one JSON error line"
expect_rc 0 "run with --export-key" -- "$TRAIN" run --job "$T/nokey.toml" --device cpu --export-key "$T/tenant-export.pub"
[ -f "$T/out-nokey/model.sealed" ] || fail "--export-key: no model"
}

item_predict_json() {
# §7.4: predict --json without --out puts the predictions in the JSON (the CSV's numbers);
# with --out it does not.
expect_rc 0 "predict --json without --out" -- "$TRAIN" predict --model "$T/model.bin" --csv "$CSV" --json
python3 - "$T/out" "$T/pred1.csv" <<'PY' || fail "predict --json without --out: predictions"
import csv, json, sys
out = json.load(open(sys.argv[1]))
rows = list(csv.DictReader(open(sys.argv[2])))
p = out["predictions"]
assert out["out"] is None and out["rows"] == len(p) == len(rows) == 569, (out["out"], len(p))
for j, c in zip(p, rows):
    assert j["row"] == int(c["row"]) and j["predicted"] == c["predicted"], (j, c)
    assert j["probabilities"] == [float(c["p_" + k]) for k in out["classes"]], (j, c)
PY
expect_rc 0 "predict --json --out" -- "$TRAIN" predict --model "$T/model.bin" --csv "$CSV" --json --out "$T/pred3.csv"
python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert "predictions" not in o and o["out"], o' "$T/out" ||
  fail "predict --json --out: predictions in the JSON"
cmp -s "$T/pred1.csv" "$T/pred3.csv" || fail "predict --json --out: another CSV"
}

item_path_errors() {
# §7.5: "exists" errors name --force (run's outputs, predict's --out).
expect_rc 7 "run: report.json exists" -- "$TRAIN" run --job "$T/clear.toml" --device cpu
grep -q "^enclave-train run: error: already exists: $T/out-clear/report.json exists (use --force to overwrite)$" "$T/err" ||
  { cat "$T/err" >&2; fail "run: the 'exists' error does not name --force"; }
: > "$T/exists.csv"
expect_rc 7 "predict: --out exists" -- "$TRAIN" predict --model "$T/model.bin" --csv "$CSV" --out "$T/exists.csv"
grep -q "^enclave-train predict: error: already exists: $T/exists.csv exists (use --force to overwrite)$" "$T/err" ||
  { cat "$T/err" >&2; fail "predict: the 'exists' error does not name --force"; }

# §7.5: path errors name the job key and its line.
sed -e "s#$T/out-clear\"#$T/out-badpath\"#; s#^path = .*#path = \"$T/none/x.sealed\"#" "$T/clear.toml" > "$T/badpath.toml"
line=$(grep -n "^path = " "$T/badpath.toml" | cut -d: -f1)
for verb in run cv; do
  expect_rc 6 "$verb: dataset path missing" -- "$TRAIN" $verb --job "$T/badpath.toml" --device cpu
  grep -q "^enclave-train $verb: error: not found: $T/badpath.toml:$line: datasets\[0\]\.path: $T/none/x.sealed: no such file$" \
    "$T/err" || { cat "$T/err" >&2; fail "$verb: dataset path error does not name key and line"; }
done
[ ! -e "$T/out-badpath" ] || fail "a missing dataset path wrote outputs"
sed -e "s#$T/out-clear\"#$T/out-badpath\"#; s#^export_key = .*#export_key = \"$T/none.pub\"#" "$T/clear.toml" > "$T/badkey.toml"
line=$(grep -n "^export_key = " "$T/badkey.toml" | cut -d: -f1)
expect_rc 6 "export_key file missing" -- "$TRAIN" run --job "$T/badkey.toml" --device cpu
grep -q "^enclave-train run: error: not found: $T/badkey.toml:$line: export_key: $T/none.pub: no such file$" "$T/err" ||
  { cat "$T/err" >&2; fail "export_key path error does not name key and line"; }
expect_rc 6 "--export-key file missing" -- "$TRAIN" run --job "$T/badkey.toml" --device cpu --export-key "$T/none2.pub"
grep -q "^enclave-train run: error: not found: --export-key: $T/none2.pub: no such file$" "$T/err" ||
  { cat "$T/err" >&2; fail "--export-key path error does not name the flag"; }
[ ! -e "$T/out-badpath" ] || fail "a missing export key wrote outputs"
}

item_verb_help() {
# §7.6: every verb's help is its own: exactly its options, no other verb's words.
for verb in run cv predict; do
  expect_rc 0 "$verb --help" -- "$TRAIN" $verb --help
  cp "$T/out" "$T/help-$verb"
done
python3 - "$T" <<'PY' || fail "verb help texts"
import re, sys
T = sys.argv[1]
helps = {v: open(f"{T}/help-{v}").read() for v in ("run", "cv", "predict")}
options = {v: set(re.findall(r"^  --([a-z-]+)", h, re.M)) for v, h in helps.items()}
want = {
    "run": {"job", "keystore", "passphrase-fd", "export-key", "device", "resume", "stop-after-step", "force", "tcti",
            "state", "event-log", "ima-log", "world-size", "rank", "rendezvous", "peer-timeout", "json", "help"},
    "cv": {"job", "folds", "keystore", "passphrase-fd", "device", "force", "tcti", "state", "event-log", "ima-log",
           "json", "help"},
    "predict": {"model", "keystore", "passphrase-fd", "csv", "out", "force", "device", "json", "help"},
}
for v in want:
    assert options[v] == want[v], (v, options[v] ^ want[v])
# Words that belong to another verb's options.
foreign = {
    "run": ["fold", "predictions", "cv_metrics"],
    "cv": ["plot", "model.sealed", "model)", "export", "resume", "checkpoint", "predictions"],
    "predict": ["epoch", "job", "report", "plot", "fold", "checkpoint", "export key", "cv_metrics"],
}
for v, words in foreign.items():
    opts = "\n".join(l for l in helps[v].splitlines() if l.startswith("  --"))
    for w in words:
        assert w not in opts.lower(), (v, w, [l for l in opts.splitlines() if w in l.lower()])
jsons = {v: next(l for l in helps[v].splitlines() if l.startswith("  --json")) for v in helps}
assert len(set(jsons.values())) == 3, jsons
PY
}

item_four_digits() {
# §7.7: metrics for people have 4 significant digits (console, predict, the plot); JSON
# keeps full precision.
expect_rc 0 "predict (accuracy on stderr)" -- "$TRAIN" predict --model "$T/model.bin" --csv "$CSV" --out "$T/pred4.csv"
grep -Eq "^accuracy (0\.[0-9]{4}|1\.000) \(569 rows with labels\)$" "$T/err" || { cat "$T/err" >&2; fail "predict accuracy: 4 digits"; }
sed -e "s#$T/out-clear\"#$T/out-ux\"#" "$T/clear.toml" > "$T/ux.toml"
expect_rc 0 "run (console summary)" -- "$TRAIN" run --job "$T/ux.toml" --device cpu
grep -q "validation accuracy" "$T/out" || fail "run summary: no validation accuracy"
sig4 "run summary" "$T/out"
if on_tty "$T/tty" -- "$TRAIN" run --job "$T/ux.toml" --device cpu --force; then
  grep "^epoch [0-9]/5 loss " "$T/tty" > "$T/epochs" || { cat "$T/tty" >&2; fail "no progress lines on a terminal"; }
  [ "$(wc -l < "$T/epochs")" = 5 ] || { cat "$T/tty" >&2; fail "want 5 progress lines"; }
  sig4 "progress lines" "$T/epochs"
fi
expect_rc 0 "cv (console summary)" -- "$TRAIN" cv --job "$T/ux.toml" --folds 3 --device cpu
sig4 "cv summary" "$T/out"
}

failed=()
for item in plot_header no_validation_split no_export_key predict_json path_errors verb_help four_digits; do
  if ( item_$item ); then echo "ok: $item"; else failed+=("$item"); fi
done
[ ${#failed[@]} = 0 ] || fail "items failed: ${failed[*]}"
echo "enclave_train_ux: all checks passed"
