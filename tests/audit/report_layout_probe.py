#!/usr/bin/env python3
# Measures whether the HTML compliance report fits: loads it in headless Chromium, driven
# over --remote-debugging-pipe (Chrome DevTools Protocol, standard library only), runs a
# layout probe at a 1280 px window and again under print emulation at the printable width
# of an A4 page, and prints the page to PDF. The page itself is not changed: its CSP forbids
# scripts, and the probe runs through Runtime.evaluate, which a page's CSP does not govern.
#
# The PDF is then read back with poppler's pdftotext: every column header shown in print,
# and every id of the JSON report (lease ids, hosts, datasets, requesters, actors), must be
# in the PDF's text as often as on the page, whole (a cut column loses them).
#
#   usage: report_layout_probe.py CHROMIUM REPORT.html REPORT.json OUT.pdf
# Prints one JSON verdict per check ({"mode", "ok", "problems", ...}) and exits 1 when a
# check has problems, 2 when Chromium or pdftotext could not be run.
import base64
import json
import os
import subprocess
import sys
import tempfile

SCREEN_WIDTH = 1280
# A4 is 210 mm wide; the report's @page has 12 mm side margins: 186 mm at 96 px per inch.
PRINT_WIDTH = round(186 / 25.4 * 96)

# The probe: every container no wider inside than out, every table cell within its card
# (the page's section) and the viewport, every cell's content within the cell, every
# header cell shown. Returns at most 40 problems, each naming the table and the cell.
PROBE = r"""
(() => {
  const problems = [];
  const slack = 0.5;
  const vw = document.documentElement.clientWidth;
  const label = (el) => {
    const sec = el.closest('section');
    const h = sec && sec.querySelector('h2');
    const where = h ? h.firstChild.textContent.trim() : (el.className || el.tagName.toLowerCase());
    return where;
  };
  const text = (el) => el.textContent.trim().replace(/\s+/g, ' ').slice(0, 40);
  const add = (msg) => { if (problems.length < 40) problems.push(msg); };
  const containers = [document.documentElement, document.body,
                      ...document.querySelectorAll('main, section, .card, .status, table, dl')];
  for (const c of containers) {
    if (c.scrollWidth > c.clientWidth + slack && getComputedStyle(c).display !== 'inline') {
      add(`${label(c)}: ${c.tagName.toLowerCase()}${c.className ? '.' + c.className : ''} content is ` +
          `${c.scrollWidth} px wide in ${c.clientWidth} px`);
    }
  }
  let cells = 0;
  const tables = document.querySelectorAll('table');
  for (const t of tables) {
    const card = t.closest('section') || t.closest('main');
    const box = card.getBoundingClientRect();
    const heads = [...t.querySelectorAll('thead th')].map((th) => text(th));
    for (const cell of t.querySelectorAll('th, td')) {
      ++cells;
      const r = cell.getBoundingClientRect();
      const col = cell.tagName === 'TD' && heads[cell.cellIndex] ? heads[cell.cellIndex] : text(cell);
      const name = `${label(t)}: ${cell.tagName.toLowerCase()} "${col}"`;
      const style = getComputedStyle(cell);
      if (cell.tagName === 'TH' && (r.width < 1 || r.height < 1 || style.visibility !== 'visible' ||
                                    style.display === 'none')) {
        add(`${name} is not shown (${r.width.toFixed(0)}x${r.height.toFixed(0)} px)`);
      }
      if (r.left < box.left - slack || r.right > box.right + slack) {
        add(`${name} spans x ${r.left.toFixed(0)}..${r.right.toFixed(0)}, outside its card ` +
            `${box.left.toFixed(0)}..${box.right.toFixed(0)}`);
      }
      if (r.right > vw + slack) add(`${name} ends at x ${r.right.toFixed(0)}, past the ${vw} px viewport`);
      if (cell.scrollWidth > cell.clientWidth + slack) {
        add(`${name} content is ${cell.scrollWidth} px wide in a ${cell.clientWidth} px cell`);
      }
    }
  }
  // What the document holds, shown or not: the PDF must show all of it.
  const headers = [...new Set([...document.querySelectorAll('thead th')].map((th) => th.textContent.trim()))];
  return {viewport: vw, tables: tables.length, cells, problems, headers, text: document.body.textContent};
})()
"""


class Chromium:
    """One headless Chromium, spoken to over its debugging pipe (fd 3 in, fd 4 out)."""

    def __init__(self, binary, profile):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium reads commands on fd 3 and writes answers on fd 4. Copied above both
        # first, so that placing one cannot overwrite the other.
        def child_fds():
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe",
                 "--user-data-dir=" + profile, "about:blank"]
        self._log = open(os.path.join(profile, "chrome.log"), "wb")
        self._proc = subprocess.Popen([binary] + flags, preexec_fn=child_fds, close_fds=False,
                                      stdout=self._log, stderr=self._log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._buffer = b""
        self._events = []
        self.session = None

    def close(self):
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()

    def _read_message(self):
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its debugging pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, session=True, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            m = self._read_message()
            if m.get("id") == self._next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self._events.append(m)

    def wait_event(self, method):
        while True:
            for i, m in enumerate(self._events):
                if m.get("method") == method:
                    del self._events[i]
                    return m
            self._events.append(self._read_message())

    def open_page(self):
        target = self.call("Target.createTarget", session=False, url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", session=False, targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError("probe failed: " + json.dumps(r["exceptionDetails"]))
        return r["result"]["value"]


def probe(chrome, mode, width, media):
    chrome.call("Emulation.setEmulatedMedia", media=media)
    chrome.call("Emulation.setDeviceMetricsOverride", width=width, height=1000, deviceScaleFactor=1, mobile=False)
    verdict = chrome.evaluate(PROBE)
    verdict["mode"] = mode
    verdict["ok"] = not verdict["problems"] and verdict["viewport"] == width and verdict["tables"] > 0
    return verdict


def squeeze(text):
    return "".join(text.split())


def ids_of(report):
    """The long, unbreakable strings of the report: what a cut column would lose."""
    ids = set()
    for k in report["key_releases"]:
        ids.update([k["lease_id"], k["host"], k["dataset_id"], k["actor"]] + ([k["requester"]] if k["requester"] else []))
    for l in report["leases"]:
        ids.add(l["lease_id"])
    for f in report["refused_releases"]:
        ids.update(f["datasets"] + ([f["requester"]] if f["requester"] else []))
    for v in report["revocations"]:
        ids.update([v["subject_id"], v["actor"]])
    return sorted(ids)


def check_pdf(pdf, page, ids):
    """Headers and ids as often in the PDF's text as in the document (whitespace aside: a
    wrapped id is one id)."""
    info = subprocess.run(["pdfinfo", pdf], capture_output=True, text=True, check=True).stdout
    text = subprocess.run(["pdftotext", "-raw", pdf, "-"], capture_output=True, text=True, check=True).stdout
    problems = []
    size = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("Page size:")), "")
    if "(A4)" not in size:
        problems.append(f"page size is {size}, not A4")
    pdf_text, page_text = squeeze(text), squeeze(page["text"])
    for header in page["headers"]:
        # Headers are upper-cased by CSS, and may break between their words.
        if not all(w.lower() in text.lower() for w in header.split()):
            problems.append(f"column header {header!r} is not in the PDF")
    for s in ids:
        want, got = page_text.count(squeeze(s)), pdf_text.count(squeeze(s))
        if got < want:
            problems.append(f"{s!r} is {want} times in the page, {got} times whole in the PDF")
    pages = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("Pages:")), "?")
    return {"mode": f"PDF ({pages} pages)", "ok": not problems, "headers": len(page["headers"]), "ids": len(ids),
            "problems": problems}


def main():
    binary, html, report_json, pdf = sys.argv[1:5]
    with open(report_json) as f:
        ids = ids_of(json.load(f))
    with tempfile.TemporaryDirectory() as profile:
        chrome = Chromium(binary, profile)
        try:
            chrome.open_page()
            chrome.call("Page.navigate", url="file://" + os.path.abspath(html))
            chrome.wait_event("Page.loadEventFired")
            verdicts = [probe(chrome, f"screen {SCREEN_WIDTH} px", SCREEN_WIDTH, "screen"),
                        probe(chrome, f"print {PRINT_WIDTH} px (A4 less margins)", PRINT_WIDTH, "print")]
            chrome.call("Emulation.clearDeviceMetricsOverride")
            chrome.call("Emulation.setEmulatedMedia", media="")
            # The report's own @page (A4, 14 mm x 12 mm margins) decides the paper.
            out = chrome.call("Page.printToPDF", preferCSSPageSize=True, printBackground=True,
                              displayHeaderFooter=False)
        except Exception as e:  # a Chromium that cannot be driven is not a layout verdict
            print(f"ERROR: {e}", file=sys.stderr)
            with open(os.path.join(profile, "chrome.log"), "rb") as f:
                sys.stderr.write(f.read().decode(errors="replace")[-4000:])
            return 2
        finally:
            chrome.close()
    with open(pdf, "wb") as f:
        f.write(base64.b64decode(out["data"]))
    try:
        verdicts.append(check_pdf(pdf, verdicts[1], ids))
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"ERROR: pdftotext/pdfinfo: {e}", file=sys.stderr)
        return 2
    for v in verdicts:
        v.pop("text", None)
        v["headers"] = len(v["headers"]) if isinstance(v["headers"], list) else v["headers"]
        print(json.dumps(v))
    return 0 if all(v["ok"] for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
