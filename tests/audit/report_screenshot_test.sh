#!/usr/bin/env bash
# Renders the HTML compliance report in headless Chromium and keeps a PNG screenshot (and a
# PDF print with its first page as PNG, when poppler-utils is there) as test artifacts, so
# the layout can be checked by looking at them.
#   usage: report_screenshot_test.sh ENCLAVE_AUDIT EVENTS.jsonl ARTIFACT_DIR
# Exit 77 (ctest: skipped) when Chromium is not installed (Debian package 'chromium').
set -euo pipefail
audit="$1"; events="$2"; artifacts="$3"

chrome=""
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null 2>&1; then chrome="$(command -v "$c")"; break; fi
done
if [ -z "$chrome" ]; then
  echo "SKIP: chromium not installed (apt-get install chromium)"
  exit 77
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
rm -f "$artifacts"/report.html "$artifacts"/report.png "$artifacts"/report.pdf "$artifacts"/report-page1.png

"$audit" init --log "$work/log" --signing-key "$work/log.key" --public-key "$work/log.pub" >/dev/null
"$audit" append --log "$work/log" --signing-key "$work/log.key" --events-file "$events" >/dev/null
"$audit" report --log "$work/log" --key "$work/log.pub" --out "$artifacts/report.html"

# Chromium runs as root in CI containers: --no-sandbox. Nothing may reach the network.
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --disable-dev-shm-usage --hide-scrollbars)
run_chrome() {
  local profile
  profile="$(mktemp -d "$work/profile.XXXXXX")"
  timeout 120 "$chrome" "${flags[@]}" --user-data-dir="$profile" "$@" "file://$artifacts/report.html" \
    >"$work/chrome.log" 2>&1 || { cat "$work/chrome.log"; return 1; }
}

run_chrome --screenshot="$artifacts/report.png" --window-size=1200,1600
test -s "$artifacts/report.png" || { echo "FAIL: no screenshot"; cat "$work/chrome.log"; exit 1; }
# A PNG, and not a blank page: a rendered report compresses far worse than an empty one.
head -c 8 "$artifacts/report.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" || { echo "FAIL: not a PNG"; exit 1; }
size=$(stat -c %s "$artifacts/report.png")
[ "$size" -gt 50000 ] || { echo "FAIL: screenshot is only $size bytes (blank page?)"; exit 1; }

run_chrome --print-to-pdf="$artifacts/report.pdf" --no-pdf-header-footer
test -s "$artifacts/report.pdf" || { echo "FAIL: no PDF"; exit 1; }
head -c 5 "$artifacts/report.pdf" | grep -q "%PDF-" || { echo "FAIL: not a PDF"; exit 1; }
if command -v pdftoppm >/dev/null 2>&1; then
  pdftoppm -png -r 80 -f 1 -l 1 -singlefile "$artifacts/report.pdf" "$artifacts/report-page1"
  pages=$(pdfinfo "$artifacts/report.pdf" 2>/dev/null | awk '/^Pages:/ {print $2}')
  echo "PDF: ${pages:-?} page(s), first page at $artifacts/report-page1.png"
fi
echo "OK: screenshot $artifacts/report.png ($size bytes), PDF $artifacts/report.pdf"
