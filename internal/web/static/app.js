// The status page: polls api/state every second and renders it. Every
// value from the server goes into text nodes or attributes, never into
// HTML: holders' labels and lock names come from clients.
"use strict";
(function () {
  const POLL_MS = 1000;
  const $ = (id) => document.getElementById(id);

  // el builds an element: attrs set properties ("class" is className),
  // children are nodes or strings (strings become text nodes).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const c of children.flat()) {
      if (c !== undefined && c !== null && c !== false) e.append(c);
    }
    return e;
  }

  function age(s) {
    if (!(s >= 0)) return "";
    if (s < 10) return s.toFixed(1) + "s";
    if (s < 60) return Math.floor(s) + "s";
    const m = Math.floor(s / 60), sec = Math.floor(s % 60);
    if (m < 60) return m + "m " + String(sec).padStart(2, "0") + "s";
    const h = Math.floor(m / 60);
    if (h < 48) return h + "h " + String(m % 60).padStart(2, "0") + "m";
    return Math.floor(h / 24) + "d " + (h % 24) + "h";
  }

  function time(iso) {
    const d = new Date(iso);
    return isNaN(d) ? "" : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function table(heads, rows, cls) {
    return el("div", { class: "table-wrap" },
      el("table", { class: cls },
        el("thead", null, el("tr", null, heads.map(([h, cls]) => el("th", { class: cls }, h)))),
        el("tbody", null, rows)));
  }

  function renderNode(st) {
    const leader = st.leader ? st.leader : "none known";
    $("node").replaceChildren(
      "node ", el("strong", { class: "mono" }, st.node), " · ", el("strong", null, st.raftState || "?"),
      " · leader ", el("strong", { class: "mono", id: "leader" }, leader),
      " · applied index ", el("strong", { class: "mono" }, String(st.appliedIndex)));
    document.title = "lockcluster · " + st.node;
  }

  function renderMembers(ms) {
    if (!ms.length) {
      $("members").replaceChildren(el("p", { class: "empty" }, "No members known yet."));
      return;
    }
    const rows = ms.map((m) => el("tr", { class: m.self ? "self" : null },
      el("td", { class: "mono" }, m.id),
      el("td", null, m.leader ? el("span", { class: "chip leader" }, "leader") : el("span", { class: "chip" }, (m.suffrage || "directory only").toLowerCase())),
      el("td", { class: "mono" }, m.raftAddr || ""),
      el("td", { class: "mono" }, m.grpcAddr || ""),
      el("td", { class: "mono" }, m.httpAddr ? el("a", { href: "//" + m.httpAddr + "/" }, m.httpAddr) : ""),
      el("td", null, health(m.health))));
    $("members").replaceChildren(table([["id"], ["role"], ["raft"], ["gRPC"], ["HTTP (status page)"], ["health (as the leader sees it)"]], rows));
  }

  function health(h) {
    if (!h) return el("span", { class: "muted" }, "unknown");
    if (!h.reachable) {
      const since = h.sinceContactSeconds < 0 ? "never answered this leader" : "for " + Math.round(h.sinceContactSeconds) + "s";
      return el("span", { class: "chip unreachable" }, "unreachable " + since);
    }
    // It answers, but serves no clients: its own words say why.
    if (h.unfit) return [el("span", { class: "chip fenced", title: h.unfit }, "fenced"), " ", el("span", { class: "muted" }, h.unfit)];
    return el("span", { class: "chip ok" }, h.lag > 0 ? "ok, " + h.lag + " behind" : "ok");
  }

  function holder(l) {
    return [el("td", null, l.label || el("span", { class: "muted" }, "(no label)")),
      el("td", { class: "mono", title: "client id" }, l.clientId),
      el("td", { class: "mono num", title: "session / request id" }, l.session + " / " + l.requestId)];
  }

  function renderNamespace(ns) {
    const held = ns.held.map((l) => el("tr", { class: "held" },
      el("td", { class: "lockname" }, l.name),
      el("td", null, el("span", { class: "chip " + l.mode }, l.mode)),
      el("td", { class: "mono num", title: "fencing token" }, String(l.token)),
      holder(l),
      el("td", { class: "num", title: "since " + time(l.acquiredAt) }, age(l.ageSeconds))));
    const pos = {};
    const pending = ns.pending.map((l) => {
      pos[l.name] = (pos[l.name] || 0) + 1;
      return el("tr", { class: "pending" },
        el("td", { class: "lockname" }, l.name),
        el("td", null, el("span", { class: "chip " + l.mode }, l.mode)),
        el("td", { class: "num", title: "place in the queue of this name" }, "#" + pos[l.name]),
        holder(l),
        el("td", { class: "num", title: "since " + time(l.requestedAt) }, age(l.ageSeconds)));
    });
    const who = (role) => [[role], ["client id"], ["session / req", "num"]];
    return el("section", { class: "ns", "data-namespace": ns.name },
      el("h3", null, el("span", { class: "mono" }, ns.name),
        el("span", { class: "counts" }, ns.sessions + " sessions · " + ns.heldCount + " held · " + ns.pendingCount + " pending")),
      el("h4", null, "Held"),
      held.length ? table([["lock"], ["mode"], ["token", "num"], ...who("holder"), ["held for", "num"]], held, "locks") : el("p", { class: "empty" }, "Nothing held."),
      el("h4", null, "Pending"),
      pending.length ? table([["lock"], ["mode"], ["queue", "num"], ...who("waiter"), ["waiting for", "num"]], pending, "locks") : el("p", { class: "empty" }, "Nothing pending."),
      ns.truncated ? el("p", { class: "muted" }, "Lists cut short: the counts above are complete.") : null);
  }

  function render(st) {
    renderNode(st);
    renderMembers(st.members || []);
    const nss = st.namespaces || [];
    $("namespaces").replaceChildren(...(nss.length ? nss.map(renderNamespace) : [el("p", { class: "empty" }, "No sessions and no locks in any namespace.")]));
  }

  function status(text, error) {
    const s = $("status");
    s.textContent = text;
    s.className = error ? "status error" : "status";
  }

  async function poll() {
    try {
      const r = await fetch("api/state", { cache: "no-store", credentials: "same-origin" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      const st = await r.json();
      render(st);
      status("updated " + new Date().toLocaleTimeString(), false);
    } catch (e) {
      status("cannot read this node's state (" + e.message + "): retrying", true);
    }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();
