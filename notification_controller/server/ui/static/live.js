// Live updates for /events and an object's page: new decisions from /api/stream are prepended.
// Plain DOM (textContent only, never innerHTML): every value came from outside. Without this file the
// pages are complete; the footer's "refresh" link reloads them.
"use strict";
(function () {
  var table = document.getElementById("events");
  if (!table || !window.EventSource) return;
  var want = new URLSearchParams(table.dataset.live === "all" ? "" : table.dataset.live);
  var MAX = 500;
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  function link(href, text) { var a = el("a", text); a.href = href; return a; }
  function enc(s) { return encodeURIComponent(s); }
  function ns(s) { var i = s.indexOf("/"); return enc(s.slice(0, i)) + "/" + enc(s.slice(i + 1)); }
  function when(t) { return t.slice(0, 10) + " " + t.slice(11, 19) + "Z"; }
  function cell(tr, child) { var td = el("td"); if (child) td.appendChild(child); tr.appendChild(td); return td; }
  function objectLink(ref) {
    var p = ref.split("/");
    if (p.length === 3 && p[0] && p[1] && p[2]) return link("/objects/" + p.map(enc).join("/"), ref);
    return el("span", ref || "\u2014");
  }
  function head(r) {
    var tbody = el("tbody", "", "event");
    tbody.dataset.event = r.eventId;
    var tr = el("tr", "", "event-head fresh");
    var td = cell(tr);
    td.colSpan = 7;
    td.appendChild(link("/events/" + enc(r.eventId), when(r.time)));
    td.appendChild(objectLink(r.object));
    td.appendChild(el("span", r.severity, "sev sev-" + r.severity));
    td.appendChild(el("b", r.reason));
    td.appendChild(el("span", r.message, "message"));
    tbody.appendChild(tr);
    return tbody;
  }
  function row(r) {
    var tr = el("tr", "", "decision fresh");
    cell(tr, el("span", when(r.time))).className = "nw";
    cell(tr, r.alert ? link("/objects/Alert/" + ns(r.alert), r.alert) : el("span", "\u2014")).className = "nw";
    cell(tr, r.provider ? link("/objects/Provider/" + ns(r.provider), r.provider) : null).className = "nw";
    var o = cell(tr, el("span", r.outcome, "outcome o-" + r.outcome));
    o.className = "nw";
    if (r.attempt) o.appendChild(el("span", " #" + r.attempt, "muted"));
    cell(tr, el("span", r.stage));
    var d = cell(tr, el("span", r.detail));
    d.className = "detail";
    if (r.statusCode) d.appendChild(el("span", " (" + r.statusCode + ")", "muted"));
    cell(tr, r.notificationId ? link("/notifications/" + enc(r.notificationId), "notification") : null);
    return tr;
  }
  function add(r) {
    var ok = true;
    want.forEach(function (v, k) { if (r[k] !== v) ok = false; });
    if (!ok) return;
    var empty = document.getElementById("no-events");
    if (empty) empty.remove();
    var groups = table.tBodies, tbody = null;
    for (var i = 0; i < groups.length; i++) {
      if (r.eventId && groups[i].dataset.event === r.eventId) { tbody = groups[i]; break; }
    }
    if (!tbody) {
      tbody = head(r);
      table.insertBefore(tbody, groups[0] || null);
      while (table.tBodies.length > MAX) table.removeChild(table.tBodies[table.tBodies.length - 1]);
    }
    tbody.insertBefore(row(r), tbody.rows[1] || null);
  }
  var source = new EventSource("/api/stream");
  source.addEventListener("record", function (m) {
    try { add(JSON.parse(m.data)); } catch (e) { /* a record this page cannot show */ }
  });
})();
