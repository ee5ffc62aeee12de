// The status page: renders api/state, and reads it again whenever the
// event stream api/events says an entry this node applied changed
// something (at most one read in flight, at most five a second); the
// changes go to "Recent changes". Without the stream (no EventSource, or
// the server refuses it) it polls api/state every second. Every value from
// the server goes into text nodes or attributes, never into HTML: holders'
// labels and lock names come from clients.
"use strict";
(function () {
  const POLL_MS = 1000;
  const MIN_FETCH_MS = 200; // at most five reads of api/state a second
  const RECENT_MAX = 50;
  const RETRY_STREAM_MS = 30000; // after the server refused the stream
  // While live, the members' health and the leader (which no entry
  // changes) are read again this often; ages tick between reads.
  const LIVE_REFRESH_MS = 5000;
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
      el("td", { class: "num", title: "since " + time(l.acquiredAt), "data-age": l.ageSeconds }, age(l.ageSeconds))));
    const pos = {};
    const pending = ns.pending.map((l) => {
      pos[l.name] = (pos[l.name] || 0) + 1;
      return el("tr", { class: "pending" },
        el("td", { class: "lockname" }, l.name),
        el("td", null, el("span", { class: "chip " + l.mode }, l.mode)),
        el("td", { class: "num", title: "place in the queue of this name" }, "#" + pos[l.name]),
        holder(l),
        el("td", { class: "num", title: "since " + time(l.requestedAt), "data-age": l.ageSeconds }, age(l.ageSeconds)));
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

  // Ages tick between reads of the state: each is its age at the last
  // render plus the time since.
  let renderedAt = Date.now();
  function tickAges() {
    const dt = (Date.now() - renderedAt) / 1000;
    for (const td of document.querySelectorAll("td[data-age]")) {
      td.textContent = age(parseFloat(td.dataset.age) + dt);
    }
  }

  function render(st) {
    renderedAt = Date.now();
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

  // live: the event stream is open; the page reads api/state only when
  // an event says something changed.
  let live = false;

  function mode() {
    const m = $("mode");
    m.textContent = live ? "live" : "polling every second";
    m.className = live ? "chip live" : "chip polling";
    document.body.dataset.mode = live ? "live" : "polling";
  }

  // data-event-reads counts the reads of the state an event asked for
  // (the browser test: a change shows by the stream, not by a poll).
  async function refresh(byEvent) {
    try {
      const r = await fetch("api/state", { cache: "no-store", credentials: "same-origin" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      const st = await r.json();
      render(st);
      if (byEvent) document.body.dataset.eventReads = String(Number(document.body.dataset.eventReads || 0) + 1);
      status("updated " + new Date().toLocaleTimeString(), false);
    } catch (e) {
      status("cannot read this node's state (" + e.message + "): retrying", true);
    }
  }

  // want asks for a read of api/state: coalesced, at most one in flight
  // and one every MIN_FETCH_MS; a read asked for meanwhile follows.
  let inFlight = false, wanted = false, lastFetch = 0, waitTimer = null, eventAsked = false;
  function want(byEvent) {
    wanted = true;
    eventAsked = eventAsked || byEvent === true;
    if (inFlight || waitTimer) return;
    const wait = lastFetch + MIN_FETCH_MS - Date.now();
    if (wait > 0) {
      waitTimer = setTimeout(() => { waitTimer = null; want(); }, wait);
      return;
    }
    wanted = false;
    inFlight = true;
    lastFetch = Date.now();
    const asked = eventAsked;
    eventAsked = false;
    refresh(asked).finally(() => {
      inFlight = false;
      if (wanted) want();
    });
  }

  let pollTimer = null;
  function startPolling() {
    if (pollTimer) return;
    // data-polls counts these reads (the browser test: none while live).
    const tick = () => {
      document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
      want();
      pollTimer = setTimeout(tick, POLL_MS);
    };
    tick();
  }
  function stopPolling() {
    clearTimeout(pollTimer);
    pollTimer = null;
  }

  // Recent changes: the last RECENT_MAX changes, newest first.
  function changeNames(c) {
    if (c.record) return c.record.name + " (" + c.record.size + " bytes)";
    if (!c.names.length) return c.session ? "session " + c.session : "";
    const shown = c.names.slice(0, 5).join(", ");
    return c.names.length > 5 ? shown + ", … (" + c.names.length + " names)" : shown;
  }

  function addRecent(ev) {
    const body = $("recent-body");
    for (const c of ev.changes || []) {
      const kind = c.cause && c.cause !== "none" ? c.kind + " (" + c.cause + ")" : c.kind;
      body.prepend(el("tr", { class: "change" },
        el("td", { class: "mono", title: "index " + ev.index }, time(ev.time)),
        el("td", { class: "mono" }, c.namespace),
        el("td", null, el("span", { class: "chip " + c.kind, title: c.reason || null }, kind)),
        el("td", { class: "lockname" }, changeNames(c)),
        el("td", { title: c.client_id ? "client id " + c.client_id : null }, c.label || el("span", { class: "muted" }, c.client_id ? "(no label)" : "")),
        el("td", { class: "mono num", title: "fencing token" }, c.token ? String(c.token) : "")));
    }
    while (body.rows.length > RECENT_MAX) body.deleteRow(-1);
    $("recent-empty").hidden = body.rows.length > 0;
    $("recent-table").hidden = body.rows.length === 0;
  }

  function connect() {
    if (typeof EventSource !== "function") {
      startPolling();
      return;
    }
    let es;
    try {
      es = new EventSource("api/events");
    } catch (e) {
      startPolling();
      return;
    }
    es.onopen = () => {
      live = true;
      mode();
      stopPolling();
      want(); // what changed while the stream was not open
    };
    es.onmessage = (m) => {
      let ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      addRecent(ev);
      want(true);
    };
    // The stream skipped changes (this page was away too long): read the
    // whole state again.
    es.addEventListener("reset", () => want(true));
    es.onerror = () => {
      live = false;
      mode();
      startPolling();
      if (es.readyState === EventSource.CLOSED) {
        // Refused (no history on this node, too many streams, …): poll,
        // and try the stream again later. Otherwise the browser
        // reconnects by itself, resuming after the last event.
        setTimeout(connect, RETRY_STREAM_MS);
      }
    };
  }

  mode();
  want();
  connect();
  setInterval(tickAges, 1000);
  setInterval(() => { if (live) want(); }, LIVE_REFRESH_MS);
})();
