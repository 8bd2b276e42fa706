// lockd admin page: polls /ui/api every two seconds and renders the locks,
// elections, semaphores and apps it may see. The bearer token lives in this
// tab's session storage and goes only into the Authorization header.
"use strict";

const REFRESH_MS = 2000;
const $ = (sel) => document.querySelector(sel);

function token() { return sessionStorage.getItem("lockd-token") || ""; }

async function call(path, init = {}) {
  const headers = { "X-Lockd-Ui": "1" };
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (init.body) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { ...init, headers, credentials: "omit", cache: "no-store" });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.message || ("HTTP " + res.status));
  return body;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = el("tr");
  for (const c of cells) {
    const td = el("td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c == null ? "" : String(c);
    tr.appendChild(td);
  }
  return tr;
}

function fill(table, rows, cols, emptyText) {
  const tbody = $(table + " tbody");
  tbody.replaceChildren(...rows);
  if (rows.length === 0) {
    const td = el("td", emptyText, "empty");
    td.colSpan = cols;
    tbody.appendChild(el("tr")).appendChild(td);
  }
}

function mode(m) { return (m || "").replace("LOCK_MODE_", "").toLowerCase(); }
function holderName(h) { return h.client ? h.owner + " (" + h.client + ")" : h.owner; }
function left(d) {
  const s = parseFloat(d || "0");
  return s >= 60 ? Math.floor(s / 60) + "m" + Math.round(s % 60) + "s" : s.toFixed(1) + "s";
}
function when(ts) {
  if (!ts) return "";
  const t = new Date(ts);
  const secs = Math.round((t - Date.now()) / 1000);
  const rel = secs >= 0 ? "in " + secs + "s" : (-secs) + "s ago";
  return t.toLocaleString() + " (" + rel + ")";
}

function releaseButton(key, owner, label) {
  const b = el("button", label || "Force release", "danger");
  b.type = "button";
  b.dataset.key = key;
  b.dataset.owner = owner;
  b.addEventListener("click", () => confirmRelease(key, owner));
  return b;
}

function render(data) {
  const locks = [], elections = [], semaphores = [];
  for (const l of data.locks) {
    if (l.kind === "LOCK_KIND_ELECTION") {
      const leader = l.holders[0] || {};
      elections.push(row([l.key, holderName(leader), l.election.term, l.election.value, left(leader.ttlLeft),
        l.waitingWriters, releaseButton(l.key, leader.owner, "Force out leader")]));
    } else if (l.kind === "LOCK_KIND_SEMAPHORE") {
      const names = l.holders.map(holderName).join(", ");
      semaphores.push(row([l.key, l.semaphore.permitsInUse + " / " + l.semaphore.limit, names,
        releaseButton(l.key, "", "Release all")]));
    } else if (l.holders.length === 0) {
      locks.push(row([l.key, "(none)", "", "", "", "", l.waitingWriters, ""]));
    } else {
      for (const h of l.holders) {
        locks.push(row([l.key, holderName(h), mode(h.mode), h.holdCount, h.fencingToken, left(h.ttlLeft),
          l.waitingWriters, releaseButton(l.key, h.owner)]));
      }
    }
  }
  fill("#locks", locks, 8, "No locks held.");
  fill("#elections", elections, 7, "No elections with a leader.");
  fill("#semaphores", semaphores, 4, "No semaphore permits held.");
}

function renderApps(data) {
  const rows = (data.apps || []).map((a) => row([a.app, a.hasToken ? when(a.expireTime) : "no token",
    when(a.lastMintTime), a.mintsToday, when(a.nextRefreshTime), a.lastError || ""]));
  fill("#apps", rows, 6, "No apps configured.");
}

function setStatus(text, error) {
  const s = $("#status");
  s.textContent = text;
  s.className = error ? "error" : "";
}

let timer = null;
async function refresh() {
  clearTimeout(timer);
  try {
    const prefix = $("#prefix").value;
    const [locks, apps] = await Promise.all([
      call("/ui/api/locks?prefix=" + encodeURIComponent(prefix)),
      call("/ui/api/apps"),
    ]);
    render(locks);
    renderApps(apps);
    setStatus("updated " + new Date().toLocaleTimeString() + (locks.truncated ? " (more keys than shown: narrow the prefix)" : ""));
  } catch (e) {
    setStatus(e.message, true);
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

function confirmRelease(key, owner) {
  const d = $("#confirm");
  $("#confirm-what").textContent = owner ? key + " held by " + owner : "every holder of " + key;
  d.returnValue = "";
  d.onclose = async () => {
    if (d.returnValue !== "yes") return;
    try {
      const res = await call("/ui/api/force-release", { method: "POST", body: JSON.stringify({ key, owner }) });
      setStatus("force-released " + res.released.length + " lease(s) of " + key);
    } catch (e) {
      setStatus("force release: " + e.message, true);
    }
    refresh();
  };
  d.showModal();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("lockd-token", $("#token").value.trim());
    $("#token").value = "";
    refresh();
  });
  $("#forget").addEventListener("click", () => { sessionStorage.removeItem("lockd-token"); refresh(); });
  $("#filter-form").addEventListener("submit", (ev) => { ev.preventDefault(); refresh(); });
  $("#prefix").addEventListener("change", refresh);
  refresh();
});
