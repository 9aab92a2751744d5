#!/usr/bin/env bash
# The HTML compliance report fits (issue 17 section 5): its tables stay inside their card in
# a 1280 px window and on an A4 page, and printing to PDF cuts no column. Renders the report
# of EVENTS (ids as wide as production makes them) in headless Chromium and lets
# report_layout_probe.py measure it; the PDF and the probe's verdicts stay in ARTIFACT_DIR.
#   usage: report_fit_test.sh ENCLAVE_AUDIT EVENTS.jsonl PROBE.py ARTIFACT_DIR
# Exit 77 (ctest: skipped) when Chromium, python3 or poppler-utils is not installed.
set -euo pipefail
audit="$1"; events="$2"; probe="$3"; artifacts="$4"

chrome=""
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null 2>&1; then chrome="$(command -v "$c")"; break; fi
done
for tool in python3 pdftotext pdfinfo; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool not installed"; exit 77; }
done
[ -n "$chrome" ] || { echo "SKIP: chromium not installed (apt-get install chromium)"; exit 77; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
rm -f "$artifacts"/fit.html "$artifacts"/fit.json "$artifacts"/fit.pdf "$artifacts"/fit-verdicts.txt

"$audit" init --log "$work/log" --signing-key "$work/log.key" --public-key "$work/log.pub" >/dev/null
"$audit" append --log "$work/log" --signing-key "$work/log.key" --events-file "$events" >/dev/null
"$audit" report --log "$work/log" --key "$work/log.pub" --out "$artifacts/fit.html" >/dev/null
"$audit" report --log "$work/log" --key "$work/log.pub" --out "$artifacts/fit.json" --format json >/dev/null

set +e
timeout 120 python3 "$probe" "$chrome" "$artifacts/fit.html" "$artifacts/fit.json" "$artifacts/fit.pdf" \
  >"$artifacts/fit-verdicts.txt"
rc=$?
set -e
cat "$artifacts/fit-verdicts.txt"
case $rc in
  0) echo "OK: the report fits 1280 px and A4 (PDF $artifacts/fit.pdf)" ;;
  1) echo "FAIL: the report does not fit (problems above; PDF $artifacts/fit.pdf)"; exit 1 ;;
  *) echo "FAIL: the probe could not run (exit $rc)"; exit 1 ;;
esac
