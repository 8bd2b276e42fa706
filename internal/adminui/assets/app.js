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

// Bidirectional and other invisible format characters in keys, owners
// and values are shown as their code points, and each such text is
// isolated in a <bdi>, so none of them can reorder what surrounds it
// ("(orders)" shown as "(sredro)").
const INVISIBLE = /[\u00AD\u061C\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u206F\uFEFF]/g;
function shown(s) {
  return String(s == null ? "" : s).replace(INVISIBLE,
    (c) => "\u27E8U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27E9");
}
function isolated(s) { return el("bdi", shown(s)); }
function texts(...parts) {
  const f = document.createDocumentFragment();
  for (const p of parts) f.appendChild(typeof p === "string" ? document.createTextNode(p) : p);
  return f;
}

function mode(m) { return (m || "").replace("LOCK_MODE_", "").toLowerCase(); }
function holderName(h) {
  return h.client ? texts(isolated(h.owner), " (", isolated(h.client), ")") : isolated(h.owner);
}
function holderNames(hs) {
  const f = document.createDocumentFragment();
  hs.forEach((h, i) => { if (i > 0) f.appendChild(document.createTextNode(", ")); f.appendChild(holderName(h)); });
  return f;
}
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
      elections.push(row([isolated(l.key), holderName(leader), l.election.term, isolated(l.election.value), left(leader.ttlLeft),
        l.waitingWriters, releaseButton(l.key, leader.owner, "Force out leader")]));
    } else if (l.kind === "LOCK_KIND_SEMAPHORE") {
      semaphores.push(row([isolated(l.key), l.semaphore.permitsInUse + " / " + l.semaphore.limit, holderNames(l.holders),
        releaseButton(l.key, "", "Release all")]));
    } else if (l.holders.length === 0) {
      locks.push(row([isolated(l.key), "(none)", "", "", "", "", l.waitingWriters, ""]));
    } else {
      for (const h of l.holders) {
        locks.push(row([isolated(l.key), holderName(h), mode(h.mode), h.holdCount, h.fencingToken, left(h.ttlLeft),
          l.waitingWriters, releaseButton(l.key, h.owner)]));
      }
    }
  }
  fill("#locks", locks, 8, "No locks held.");
  fill("#elections", elections, 7, "No elections with a leader.");
  fill("#semaphores", semaphores, 4, "No semaphore permits held.");
}

function renderApps(data) {
  const rows = (data.apps || []).map((a) => row([isolated(a.app), a.hasToken ? when(a.expireTime) : "no token",
    when(a.lastMintTime), a.mintsToday, when(a.nextRefreshTime), isolated(a.lastError || "")]));
  fill("#apps", rows, 6, "No apps configured.");
}

function setStatus(text, error) {
  const s = $("#status");
  s.textContent = text;
  s.className = error ? "error" : "";
}

// screens holds the page token of each screen of keys visited, the one
// shown last; next is the token of the screen after it ("" for none).
let screens = [""], next = "";
function showScreens() {
  $("#prev").disabled = screens.length === 1;
  $("#next").disabled = next === "";
  $("#screen").textContent = next === "" && screens.length === 1 ? "" : "keys, screen " + screens.length;
}

let timer = null;
async function refresh() {
  clearTimeout(timer);
  try {
    const prefix = $("#prefix").value;
    const [locks, apps] = await Promise.all([
      call("/ui/api/locks?prefix=" + encodeURIComponent(prefix) + "&page_token=" + encodeURIComponent(screens[screens.length - 1])),
      call("/ui/api/apps"),
    ]);
    render(locks);
    renderApps(apps);
    next = locks.next || "";
    showScreens();
    setStatus("updated " + new Date().toLocaleTimeString());
  } catch (e) {
    setStatus(e.message, true);
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

function confirmRelease(key, owner) {
  const d = $("#confirm");
  $("#confirm-what").replaceChildren(owner ? texts(isolated(key), " held by ", isolated(owner)) : texts("every holder of ", isolated(key)));
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
  const restart = () => { screens = [""]; next = ""; refresh(); };
  $("#filter-form").addEventListener("submit", (ev) => { ev.preventDefault(); restart(); });
  $("#prefix").addEventListener("change", restart);
  $("#next").addEventListener("click", () => { if (next !== "") { screens.push(next); refresh(); } });
  $("#prev").addEventListener("click", () => { if (screens.length > 1) { screens.pop(); refresh(); } });
  refresh();
});
