// The HTML form of the compliance report. Everything shown comes from the JSON document
// of BuildReport; every string goes through HtmlEscape (entries are attacker-influenced:
// host names, reasons, actors). The page has no script and no external resource, and its
// Content-Security-Policy forbids both, as a second line behind the escaping.
#include <cstdio>
#include <string>

#include "enclave/audit/report.h"

namespace enclave::audit {
namespace {

using nlohmann::json;

// Tables longer than this show their first rows and say how many the JSON report holds.
constexpr size_t kMaxHtmlRows = 2000;

constexpr char kCss[] = R"CSS(
:root { --ink:#1d2733; --muted:#5b6775; --line:#d5dbe3; --soft:#f3f5f8; --accent:#1f4e79; --ok:#1e7a46;
        --okbg:#e8f5ee; --bad:#a4262c; --badbg:#fbeaea; --warn:#8a5a00; --warnbg:#fff6e0; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; background: #e9edf2; color: var(--ink);
       font: 14px/1.45 -apple-system, "Segoe UI", "Helvetica Neue", Arial, "Liberation Sans", sans-serif; }
.page { max-width: 1120px; margin: 24px auto; background: #fff; padding: 36px 44px 28px;
        border: 1px solid var(--line); border-radius: 4px; }
header.doc { border-bottom: 3px solid var(--accent); padding-bottom: 14px; margin-bottom: 18px; }
.kicker { text-transform: uppercase; letter-spacing: .08em; font-size: 11px; color: var(--muted); font-weight: 600; }
h1 { font-size: 26px; margin: 4px 0 12px; color: var(--accent); font-weight: 650; }
h2 { font-size: 17px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line);
     color: var(--accent); break-after: avoid; page-break-after: avoid; }
h2 .count { color: var(--muted); font-weight: 400; font-size: 13px; margin-left: 6px; }
.meta { display: grid; grid-template-columns: max-content minmax(0, 1fr) max-content minmax(0, 1fr); gap: 3px 14px;
        margin: 0; font-size: 13px; }
.meta dt { color: var(--muted); }
.meta dd { margin: 0; overflow-wrap: anywhere; }
.status { display: flex; gap: 16px; align-items: flex-start; border: 1px solid var(--ok); background: var(--okbg);
          border-radius: 4px; padding: 12px 16px; margin: 16px 0 8px; }
.status .badge { flex: none; font-weight: 700; letter-spacing: .06em; color: #fff; background: var(--ok);
                 border-radius: 3px; padding: 4px 10px; font-size: 13px; }
.status > div:last-child { min-width: 0; }
.status p { margin: 0 0 4px; }
.cards { display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 10px; margin: 14px 0 6px; }
.card { border: 1px solid var(--line); border-radius: 4px; padding: 8px 12px; background: var(--soft); }
.card .n { font-size: 22px; font-weight: 650; line-height: 1.2; }
.card .l { font-size: 12px; color: var(--muted); }
.card.alert { border-color: var(--bad); background: var(--badbg); }
.card.alert .n { color: var(--bad); }
/* Ids (32- and 64-hex lease ids, host names, actors) have no break opportunity: cells may
   break them anywhere, so a column is never wider than its share of the card. Headers are
   words and break only between them. */
table { width: 100%; border-collapse: collapse; font-size: 12.5px; margin: 6px 0 4px; }
th, td { text-align: left; vertical-align: top; padding: 5px 7px; border-bottom: 1px solid var(--line); }
td { overflow-wrap: anywhere; }
/* Shortened digests (16 hex digits and an ellipsis) and pills stay on one line. */
td code[title], .pill, .num { white-space: nowrap; overflow-wrap: normal; }
/* Times break at the space between date and time only. */
td .mono { overflow-wrap: normal; }
th { background: var(--soft); font-weight: 600; font-size: 11.5px; text-transform: uppercase; letter-spacing: .03em;
     color: var(--muted); border-bottom: 2px solid var(--line); }
tbody tr:nth-child(even) td { background: #fafbfc; }
tr { break-inside: avoid; page-break-inside: avoid; }
thead { display: table-header-group; }
table.kv th { width: 210px; text-transform: none; letter-spacing: 0; font-size: 12.5px; background: none;
              border-bottom: 1px solid var(--line); }
code, .mono { font-family: "SFMono-Regular", Consolas, "Liberation Mono", "DejaVu Sans Mono", monospace; font-size: 11.5px; }
.wrap { word-break: break-all; }
.muted { color: var(--muted); }
.none { color: var(--muted); font-style: italic; margin: 4px 0 8px; }
.note { color: var(--muted); font-size: 12px; margin: 4px 0; }
.pill { display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 11.5px; font-weight: 600;
        border: 1px solid currentColor; }
.pill.ok { color: var(--ok); } .pill.bad { color: var(--bad); } .pill.info { color: var(--accent); }
.pill.warn { color: var(--warn); }
ul.checks { margin: 4px 0 0; padding-left: 18px; }
.status .headline { margin-bottom: 6px; }
ul.facts { list-style: none; margin: 0; padding: 0; }
ul.facts li { margin: 2px 0; }
ul.plain { margin: 0; padding-left: 16px; }
ul.plain li { margin: 0; }
section.alert h2 { color: var(--bad); }
footer { margin-top: 28px; padding-top: 10px; border-top: 1px solid var(--line); font-size: 11.5px; color: var(--muted); }
@page { size: A4; margin: 14mm 12mm; }
@media print {
  body { background: #fff; font-size: 10pt; }
  table { font-size: 8pt; }
  th { font-size: 7pt; letter-spacing: 0; }
  th, td { padding: 3px 4px; }
  code, .mono { font-size: 7.5pt; }
  table.kv th { width: 130px; font-size: 8pt; }
  .page { margin: 0; padding: 0; border: 0; max-width: none; }
  .cards { grid-template-columns: repeat(4, 1fr); }
  .status, .card, th, .pill, .badge, tbody tr td { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  h2 { margin-top: 18px; }
  a { color: inherit; text-decoration: none; }
}
)CSS";

std::string S(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string E(const json& v) { return HtmlEscape(S(v)); }

// A digest shortened for the table, the whole value in its title.
std::string Digest(const json& v) {
  std::string d = S(v);
  if (d.empty()) return "<span class=\"muted\">&mdash;</span>";
  if (d.rfind("sha256:", 0) == 0) d.erase(0, 7);
  const std::string shown = d.size() > 16 ? d.substr(0, 16) + "\xE2\x80\xA6" : d;
  return "<code title=\"" + HtmlEscape(d) + "\">" + HtmlEscape(shown) + "</code>";
}

std::string Time(const json& ref) {
  if (ref.is_null()) return "<span class=\"muted\">&mdash;</span>";
  std::string t = S(ref["time"]);
  if (t.size() > 10 && t[10] == 'T') t[10] = ' ';
  return "<span class=\"mono\">" + HtmlEscape(t) + "</span><br><span class=\"muted\">#" + E(ref["index"]) + " &middot; " +
         E(ref["actor"]) + "</span>";
}

// An entry index: a number, never broken.
std::string Index(const json& n) { return "<span class=\"num\">" + E(n) + "</span>"; }

std::string OrDash(const std::string& html) { return html.empty() ? "<span class=\"muted\">&mdash;</span>" : html; }

std::string List(const json& arr, bool digests = false) {
  if (!arr.is_array() || arr.empty()) return OrDash("");
  std::string out;
  for (const json& x : arr) out += (out.empty() ? "" : ", ") + (digests ? Digest(x) : E(x));
  return out;
}

std::string Pill(const std::string& cls, const std::string& text) {
  return "<span class=\"pill " + cls + "\">" + HtmlEscape(text) + "</span>";
}

struct Table {
  std::string html;
  size_t rows = 0, total = 0;
  explicit Table(std::initializer_list<const char*> heads) {
    html = "<table><thead><tr>";
    for (const char* h : heads) html += std::string("<th>") + h + "</th>";
    html += "</tr></thead><tbody>";
  }
  // False once the table is full (the row is counted, not shown).
  bool Row() {
    ++total;
    return rows < kMaxHtmlRows;
  }
  void Cells(std::initializer_list<std::string> cells) {
    ++rows;
    html += "<tr>";
    for (const std::string& c : cells) html += "<td>" + c + "</td>";
    html += "</tr>";
  }
  std::string Done(const char* what) const {
    std::string out = html + "</tbody></table>";
    if (total > rows) {
      out += "<p class=\"note\">The first " + std::to_string(rows) + " of " + std::to_string(total) + " " + what +
             " are shown; the JSON report (--format json) lists all of them.</p>";
    }
    return out;
  }
};

std::string Section(const std::string& title, size_t count, const std::string& body, bool alert = false) {
  return std::string("<section") + (alert && count > 0 ? " class=\"alert\"" : "") + "><h2>" + title +
         "<span class=\"count\">(" + std::to_string(count) + ")</span></h2>" + body + "</section>\n";
}

std::string Metrics(const json& m) {
  if (!m.is_object() || m.empty()) return OrDash("");
  std::string out;
  for (auto it = m.begin(); it != m.end(); ++it) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4g", it.value().get<double>());
    out += (out.empty() ? "" : "<br>") + HtmlEscape(it.key()) + " = " + HtmlEscape(buf);
  }
  return out;
}

std::string Revoked(const json& r) {
  if (r.is_null()) return OrDash("");
  return Pill("bad", "revoked") + "<br>" + Time(r) + "<br>" + E(r["reason"]);
}

}  // namespace

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string RenderReportHtml(const json& r) {
  const json& log = r["log"];
  const json& sum = r["summary"];
  const json& head = log["latest_tree_head"];
  const std::string from = r["period"]["from"].is_null() ? "the first entry" : S(r["period"]["from"]);
  const std::string to = r["period"]["to"].is_null() ? "the last entry" : S(r["period"]["to"]);

  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
       "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
       "img-src data:\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
       "<title>Audit log compliance report &middot; " +
       HtmlEscape(from) + " to " + HtmlEscape(to) + "</title>\n<style>" + kCss + "</style></head>\n<body><main class=\"page\">\n";

  // Header.
  h += "<header class=\"doc\"><div class=\"kicker\">Confidential training enclave &middot; audit log</div>"
       "<h1>Compliance report</h1><dl class=\"meta\">"
       "<dt>Period</dt><dd>" + HtmlEscape(from) + " &ndash; " + HtmlEscape(to) +
       " <span class=\"muted\">(from inclusive, to exclusive)</span></dd>"
       "<dt>Generated</dt><dd>" + E(r["generated_at"]) + "</dd>"
       "<dt>Log id</dt><dd>" + Digest(log["log_id"]) + "</dd>"
       "<dt>Entries in period</dt><dd>" + E(sum["entries_in_period"]) + " of " + E(log["entries"]) +
       (sum["first_index"].is_null() ? std::string()
                                     : " <span class=\"muted\">(indexes " + E(sum["first_index"]) + "&ndash;" +
                                           E(sum["last_index"]) + ")</span>") +
       "</dd></dl></header>\n";

  // The one verdict: what was verified, and whether consistency and a witness quorum were
  // checked. Every fact is stated once, in the same box, in the same (verified) colour.
  const json& verdict = r["verdict"];
  const json& cons = log["consistency"];
  // A pill to scan for, then the sentence (which names what it is about).
  auto fact = [](bool checked, const char* yes, const char* no, const json& summary) {
    return "<li>" + Pill(checked ? "ok" : "info", checked ? yes : no) + " " + E(summary) + "</li>";
  };
  const json& wit = verdict["witnesses"];
  h += "<div class=\"status\" id=\"verdict\"><div class=\"badge\">VERIFIED</div><div>"
       "<p class=\"headline\"><strong>" + E(verdict["headline"]) + "</strong>, signed " + E(head["time"]) +
       "; root <code class=\"wrap\">" + E(head["root"]) + "</code></p><ul class=\"facts\">" +
       fact(verdict["consistency"]["checked"].get<bool>(), "checked", "not checked", verdict["consistency"]["summary"]) +
       fact(wit["met"].is_boolean() && wit["required"].get<bool>(), "quorum met", "not required", wit["summary"]) +
       "</ul></div></div>\n";

  // Summary cards.
  auto card = [&](const std::string& label, const json& n, bool alert_if_nonzero = false) {
    const bool alert = alert_if_nonzero && n.get<uint64_t>() > 0;
    return std::string("<div class=\"card") + (alert ? " alert" : "") + "\"><div class=\"n\">" + E(n) +
           "</div><div class=\"l\">" + label + "</div></div>";
  };
  h += "<div class=\"cards\">" + card("jobs", sum["jobs"]) + card("datasets used", sum["datasets"]) +
       card("hosts", sum["hosts"]) + card("policies in force", sum["policies_in_force"]) +
       card("key releases", sum["key_releases"]) + card("leases (renewals: " + S(sum["lease_renewals"]) + ")",
                                                         sum["leases"]) +
       card("failed attestations", sum["failed_attestations"], true) + card("revocations", sum["revocations"], true) +
       "</div>\n";

  // 1. Verification detail.
  {
    std::string b = "<table class=\"kv\"><tbody>";
    auto kv = [&](const char* k, const std::string& v) { b += std::string("<tr><th>") + k + "</th><td>" + v + "</td></tr>"; };
    kv("Log file", "<code class=\"wrap\">" + E(log["log_path"]) + "</code> (" + E(log["file_bytes"]) + " bytes)");
    kv("Log id", "<code class=\"wrap\">" + E(log["log_id"]) + "</code>");
    kv("Public key (Ed25519)", "<code class=\"wrap\">" + E(log["public_key"]) + "</code>");
    kv("Latest signed tree head", "size " + E(head["tree_size"]) + ", signed " + E(head["time"]) +
                                      "<br>root <code class=\"wrap\">" + E(head["root"]) +
                                      "</code><br>signature <code class=\"wrap\">" + E(head["signature"]) + "</code>");
    if (cons["checked"].get<bool>()) {
      const json& prev = cons["previously_accepted"];
      kv("Previously accepted head", "size " + E(prev["tree_size"]) + ", signed " + E(prev["time"]) + ", root " +
                                         Digest(prev["root"]) + " (state file <code>" + E(cons["state_file"]) +
                                         "</code>)");
    }
    kv("Consistency", E(cons["result"]));
    const json& w = log["witnessed"];
    if (w.is_null()) {
      kv("Witnesses", E(wit["summary"]));
    } else {
      std::string by;
      for (const json& c : w["cosigned_by"]) by += (by.empty() ? "" : "<br>") + E(c["name"]) + " <span class=\"muted\">(" +
                                               E(c["cosigner"]) + ", " + E(c["time"]) + ")</span>";
      kv("Witnesses", E(wit["summary"]) + "<br>policy <code class=\"wrap\">" + E(wit["policy_file"]) +
                          "</code>, quorum " + E(w["quorum"]) + "; cosigned checkpoint <code class=\"wrap\">" +
                          E(w["cosigned_checkpoint"]) + "</code> (size " + E(w["tree_size"]) + ", root " +
                          Digest(w["root"]) + ")" + (by.empty() ? std::string() : "<br>" + by) +
                          (w["not_cosigned_by"].empty() ? std::string() : "<br>not cosigned by " + List(w["not_cosigned_by"])));
    }
    std::string checks = "<ul class=\"checks\">";
    for (const json& c : log["checks"]) checks += "<li>" + E(c) + "</li>";
    kv("Checks performed", checks + "</ul>");
    kv("Verification time", E(log["seconds"]).substr(0, 6) + " s");
    b += "</tbody></table>";
    h += "<section><h2>1. Verification of the log</h2>" + b + "</section>\n";
  }

  // 2. Jobs.
  {
    Table t({"Job", "Status", "Hosts", "Datasets", "Started", "Finished", "Model / metrics", "Keys"});
    for (const json& j : r["jobs"]) {
      if (!t.Row()) continue;
      const std::string st = S(j["status"]);
      std::string status = Pill(st == "finished" ? "ok" : "info", st);
      if (!j["outcome"].is_null()) status += "<br>" + E(j["outcome"]);
      if (j.contains("revoked")) status += "<br>" + Revoked(j["revoked"]);
      if (j["failed_attestations"].get<uint64_t>() > 0) {
        status += "<br>" + Pill("bad", S(j["failed_attestations"]) + " failed attestation(s)");
      }
      std::string model = j["model_digest"].is_null() ? OrDash("") : "model " + Digest(j["model_digest"]);
      if (!j["metrics"].is_null()) model += "<br>" + Metrics(j["metrics"]);
      if (!j["report_digest"].is_null()) model += "<br><span class=\"muted\">report</span> " + Digest(j["report_digest"]);
      std::string datasets = List(j["datasets"]);
      if (!j["dataset_digests"].empty()) datasets += "<br><span class=\"muted\">digests</span> " + List(j["dataset_digests"], true);
      t.Cells({Digest(j["job_digest"]), status, List(j["hosts"]), datasets, Time(j["started"]), Time(j["finished"]),
               model, E(j["key_releases"])});
    }
    h += Section("2. Jobs", r["jobs"].size(),
                 r["jobs"].empty() ? "<p class=\"none\">No job in this period.</p>" : t.Done("jobs"));
  }

  // 3. Datasets.
  {
    Table t({"Dataset", "Key releases", "Jobs", "Used by (host &middot; job &middot; lease)", "Revoked"});
    for (const json& d : r["datasets"]) {
      if (!t.Row()) continue;
      std::string uses = "<ul class=\"plain\">";
      size_t shown = 0;
      for (const json& u : d["uses"]) {
        if (++shown > 8) break;
        std::string t2 = S(u["time"]);
        if (t2.size() > 10 && t2[10] == 'T') t2[10] = ' ';
        uses += "<li><strong>" + E(u["host"]) + "</strong> &middot; " + Digest(u["job_digest"]) +
                (u["lease_id"].is_null() ? std::string() : " &middot; " + E(u["lease_id"])) + " <span class=\"muted\">(" +
                E(u["event"]) + ", " + HtmlEscape(t2) + ", " + E(u["actor"]) + ")</span></li>";
      }
      uses += "</ul>";
      if (d["uses"].size() > 8) uses += "<span class=\"muted\">and " + std::to_string(d["uses"].size() - 8) + " more</span>";
      t.Cells({"<strong>" + E(d["dataset_id"]) + "</strong>", E(d["key_releases"]), List(d["jobs"], true), uses,
               Revoked(d["revoked"])});
    }
    h += Section("3. Datasets and who used them", r["datasets"].size(),
                 r["datasets"].empty() ? "<p class=\"none\">No dataset was used in this period.</p>"
                                       : t.Done("datasets"));
  }

  // 4. Hosts.
  {
    Table t({"Host", "Enrolment", "Attestations", "Last verdict", "Measurements (checks of the last verdict)", "Revoked"});
    for (const json& x : r["hosts"]) {
      if (!t.Row()) continue;
      std::string enrol = OrDash("");
      if (!x["enrolled"].is_null()) {
        enrol = Time(x["enrolled"]);
        if (!x["enrolled"]["ek_cert_sha256"].is_null()) enrol += "<br>EK cert " + Digest(x["enrolled"]["ek_cert_sha256"]);
        if (!x["enrolled"]["ak_public_sha256"].is_null()) enrol += "<br>AK " + Digest(x["enrolled"]["ak_public_sha256"]);
      }
      std::string att = Pill("ok", S(x["attestations_accepted"]) + " accepted");
      if (x["attestations_rejected"].get<uint64_t>() > 0) att += "<br>" + Pill("bad", S(x["attestations_rejected"]) + " rejected");
      std::string last = OrDash("");
      if (!x["last_verdict"].is_null()) {
        const json& v = x["last_verdict"];
        last = Pill(S(v["verdict"]) == "accepted" ? "ok" : "bad", S(v["verdict"])) + "<br>" + Time(v);
        if (!v["policy_digest"].is_null()) last += "<br>policy " + Digest(v["policy_digest"]);
      }
      std::string meas = x["measurements"].empty() ? OrDash("") : "<ul class=\"plain\">";
      for (const json& c : x["measurements"]) {
        meas += "<li>" + Pill(c["ok"].get<bool>() ? "ok" : "bad", c["ok"].get<bool>() ? "ok" : "failed") + " <code>" +
                E(c["check"]) + "</code> " + E(c["reason"]) + "</li>";
      }
      if (!x["measurements"].empty()) meas += "</ul>";
      t.Cells({"<strong>" + E(x["host"]) + "</strong>", enrol, att, last, meas, Revoked(x["revoked"])});
    }
    h += Section("4. Attested hosts and their measurements", r["hosts"].size(),
                 r["hosts"].empty() ? "<p class=\"none\">No host appears in this period.</p>" : t.Done("hosts"));
  }

  // 5. Policies.
  {
    Table t({"Policy", "Version", "Digest", "Signer", "Activated", "Ended"});
    for (const json& p : r["policies"]) {
      if (!t.Row()) continue;
      std::string ended;
      if (!p["revoked"].is_null()) ended = Pill("bad", "revoked") + "<br>" + Time(p["revoked"]) + "<br>" + E(p["revoked"]["reason"]);
      else if (!p["superseded"].is_null()) ended = Pill("info", "superseded") + "<br>" + Time(p["superseded"]);
      else ended = Pill("ok", "in force");
      t.Cells({"<strong>" + E(p["policy_id"]) + "</strong>", OrDash(E(p["version"])), Digest(p["policy_digest"]),
               E(p["signer"]), Time(p["activated"]), ended});
    }
    h += Section("5. Policy versions in force", r["policies"].size(),
                 (r["policies"].empty() ? std::string("<p class=\"none\">No policy activation in force in this period.</p>")
                                        : t.Done("policy activations")) +
                     "<p class=\"note\">Includes activations made before the period that were still in force in it.</p>");
  }

  // 6. Key releases.
  {
    Table t({"#", "Time", "Dataset", "Requester", "Lease", "Host", "Job", "Expires", "Actor"});
    for (const json& k : r["key_releases"]) {
      if (!t.Row()) continue;
      std::string tm = S(k["time"]);
      if (tm.size() > 10 && tm[10] == 'T') tm[10] = ' ';
      t.Cells({Index(k["index"]), "<span class=\"mono\">" + HtmlEscape(tm) + "</span>", "<strong>" + E(k["dataset_id"]) + "</strong>",
               OrDash(E(k["requester"])), E(k["lease_id"]), E(k["host"]), Digest(k["job_digest"]), OrDash(E(k["expires"])), E(k["actor"])});
    }
    h += Section("6. Key releases", r["key_releases"].size(),
                 r["key_releases"].empty() ? "<p class=\"none\">No key was released in this period.</p>"
                                           : t.Done("key releases"));
  }

  // 7. Leases.
  {
    Table t({"Lease", "Datasets", "Host", "Job", "Released", "Renewals", "Expires", "Revoked"});
    for (const json& l : r["leases"]) {
      if (!t.Row()) continue;
      std::string released = l["first_release"].is_null() ? "<span class=\"muted\">before the period</span>"
                                                          : Time(l["first_release"]);
      if (l["releases"].get<uint64_t>() > 1) released += "<br><span class=\"muted\">" + E(l["releases"]) + " releases</span>";
      std::string ren = std::to_string(l["renewals"].size());
      if (!l["renewals"].empty()) ren += "<br><span class=\"muted\">last " + E(l["renewals"].back()["time"]) + "</span>";
      t.Cells({"<strong>" + E(l["lease_id"]) + "</strong>", List(l["datasets"]), OrDash(E(l["host"])),
               Digest(l["job_digest"]), released, ren, OrDash(E(l["expires"])), Revoked(l["revoked"])});
    }
    h += Section("7. Leases", r["leases"].size(),
                 r["leases"].empty() ? "<p class=\"none\">No lease was granted, renewed or revoked in this period.</p>"
                                     : t.Done("leases"));
  }

  // 8. Failed attestations.
  {
    Table t({"#", "Time", "Host", "Failed checks", "Job", "Policy", "Actor"});
    for (const json& f : r["failed_attestations"]) {
      if (!t.Row()) continue;
      std::string checks = "<ul class=\"plain\">";
      for (const json& c : f["failed_checks"]) checks += "<li><code>" + E(c["check"]) + "</code>: " + E(c["reason"]) + "</li>";
      checks += "</ul>";
      std::string tm = S(f["time"]);
      if (tm.size() > 10 && tm[10] == 'T') tm[10] = ' ';
      t.Cells({Index(f["index"]), "<span class=\"mono\">" + HtmlEscape(tm) + "</span>", "<strong>" + E(f["host"]) + "</strong>",
               checks, Digest(f["job_digest"]), Digest(f["policy_digest"]), E(f["actor"])});
    }
    h += Section("8. Failed attestations", r["failed_attestations"].size(),
                 r["failed_attestations"].empty() ? "<p class=\"none\">No attestation failed in this period.</p>"
                                                  : t.Done("failed attestations"),
                 true);
  }

  // 8b. Key releases refused by a data-use policy after the evidence passed.
  {
    Table t({"#", "Time", "Host", "Job", "Requester", "Datasets", "Policy", "Reason"});
    for (const json& f : r["refused_releases"]) {
      if (!t.Row()) continue;
      std::string tm = S(f["time"]);
      if (tm.size() > 10 && tm[10] == 'T') tm[10] = ' ';
      std::string ds;
      for (const json& d : f["datasets"]) ds += (ds.empty() ? "" : ", ") + E(d);
      t.Cells({Index(f["index"]), "<span class=\"mono\">" + HtmlEscape(tm) + "</span>", "<strong>" + E(f["host"]) + "</strong>",
               E(f["job_id"]) + "<br>" + Digest(f["job_digest"]), OrDash(E(f["requester"])), ds, E(f["policy_id"]) + "<br>" + Digest(f["policy_digest"]),
               E(f["reason"])});
    }
    h += Section("8b. Refused key releases", r["refused_releases"].size(),
                 r["refused_releases"].empty() ? "<p class=\"none\">No key release was refused in this period.</p>"
                                               : t.Done("refused key releases"),
                 true);
  }

  // 9. Revocations.
  {
    Table t({"#", "Time", "Subject", "Id", "Reason", "Actor"});
    for (const json& v : r["revocations"]) {
      if (!t.Row()) continue;
      std::string tm = S(v["time"]);
      if (tm.size() > 10 && tm[10] == 'T') tm[10] = ' ';
      t.Cells({Index(v["index"]), "<span class=\"mono\">" + HtmlEscape(tm) + "</span>", E(v["subject"]),
               "<strong>" + E(v["subject_id"]) + "</strong>", E(v["reason"]), E(v["actor"])});
    }
    h += Section("9. Revocations", r["revocations"].size(),
                 r["revocations"].empty() ? "<p class=\"none\">Nothing was revoked in this period.</p>"
                                          : t.Done("revocations"),
                 true);
  }

  h += "<footer>Produced by <code>enclave-audit report</code> from a log that verified in full; a log that fails "
       "verification yields no report. Digests are shortened to 16 hex digits (hover for the whole value; the JSON "
       "report has them in full). Times are UTC. To re-check: <code>enclave-audit verify --log DIR --key LOG.pub "
       "--state FILE</code>, then compare the root above.</footer>\n</main></body></html>\n";
  return h;
}

}  // namespace enclave::audit
