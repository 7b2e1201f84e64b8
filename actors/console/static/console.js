// greenroom console: the page. Everything a turn says (model text, tool arguments, reasons)
// goes into text nodes (el(), textContent), never into markup: there is no innerHTML here.
"use strict";

const state = { csrf: null, source: null, page: null, user: null };

// " by NAME" when a decision, stop or call names who sent it; "" when it names nobody.
function by(name) { return name ? ` by ${name}` : ""; }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function when(ts) {
  if (!ts) return "-";
  const d = new Date(ts * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

function ago(ts) {
  if (!ts) return "-";
  const s = Math.max(0, Date.now() / 1000 - ts);
  return s < 60 ? `${s.toFixed(0)} s` : s < 3600 ? `${(s / 60).toFixed(0)} min` : `${(s / 3600).toFixed(1)} h`;
}

function json(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "content-type": "application/json", "x-greenroom-csrf": state.csrf },
    body: JSON.stringify(body),
  };
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch (e) { data = { error: `HTTP ${response.status}` }; }
  return { status: response.status, data };
}

// A command's answer beside its button (and in #last-reply, which stays when the button goes):
// applied, or refused and why. A refused command never looks applied.
async function command(replyNode, label, path, body) {
  const last = document.getElementById("last-reply");
  for (const node of [replyNode, last]) { if (node) { node.className = "reply pending"; node.textContent = "sending..."; } }
  let result;
  try { result = await api(path, body); } catch (e) { result = { status: 0, data: { error: String(e) } }; }
  const { status, data } = result;
  const ok = status === 200 && data.ok;
  const text = ok ? (data.message || "applied") : "refused: " + (data.message || data.error || `HTTP ${status}`);
  replyNode.className = ok ? "reply ok" : "reply refused";
  replyNode.textContent = text;
  if (last) { last.className = replyNode.className; last.textContent = `${label}: ${text}`; }
  return result;
}

// -- the list ---------------------------------------------------------------------------------

const STATUSES = ["all", "running", "awaiting_approval", "paused", "finished"];

function showList() {
  const filter = new URLSearchParams(location.hash.split("?")[1] || "").get("status") || "all";
  const table = el("tbody", { id: "turn-rows" });
  const numbers = el("section", { id: "numbers" });
  const nodes = el("section", { id: "nodes" });
  const filters = el("nav", { id: "filters" }, STATUSES.map((s) =>
    el("a", { href: s === "all" ? "#/" : `#/?status=${s}`, class: s === filter ? "active" : null, "data-status": s }, s.replace("_", " "))));
  const main = document.getElementById("main");
  main.replaceChildren(
    el("h1", {}, "Turns"), el("p", {}, el("a", { href: "#/sessions", id: "sessions-link" }, "sessions")), filters,
    el("table", { id: "turns" },
      el("thead", {}, el("tr", {}, ["turn", "status", "host", "round", "pending approvals", "waiting since", "parent", "children", "updated"].map((h) => el("th", {}, h)))),
      table),
    nodes, numbers);
  // Rows are kept by turn id and only their cells change, so a link stays where it is while
  // the list updates under the pointer.
  const kept = new Map();
  const render = (data) => {
    const rows = data.turns.filter((t) => filter === "all" || t.status.split(" ")[0] === filter);
    const trs = rows.map((t) => {
      let tr = kept.get(t.turn_id);
      if (!tr) {
        tr = el("tr", { "data-turn": t.turn_id }, el("td", {}, el("a", { href: `#/turn/${encodeURIComponent(t.turn_id)}` }, t.turn_id)));
        for (let i = 0; i < 8; i++) tr.append(el("td", {}));
        kept.set(t.turn_id, tr);
      }
      tr.className = t.status;
      const cells = [
        [statusText(t)],
        [t.owner_host || t.owner || "-"],
        [t.round],
        [t.pending_approvals.join(", ") || "-"],
        [t.waiting_since ? `${when(t.waiting_since)} (${ago(t.waiting_since)})` : "-"],
        [t.parent_turn_id ? el("a", { href: `#/turn/${encodeURIComponent(t.parent_turn_id)}` }, t.parent_turn_id) : "-"],
        [t.children.length ? t.children.map((c) => el("a", { href: `#/turn/${encodeURIComponent(c)}` }, c, " ")) : "-"],
        [when(t.updated_at)],
      ];
      const tds = tr.querySelectorAll("td");
      cells.forEach((content, i) => {
        const td = tds[i + 1];
        const key = JSON.stringify(content.map((c) => (c instanceof Node ? c.textContent : c)));
        if (td.dataset.key !== key) { td.dataset.key = key; td.replaceChildren(...content.flat()); }
      });
      tds[1].className = "status";
      tds[2].className = "host";
      tds[4].className = "pending-count";
      return tr;
    });
    if (!rows.length) table.replaceChildren(el("tr", {}, el("td", { colspan: 9 }, "no turns")));
    else if (trs.some((tr, i) => table.children[i] !== tr) || table.children.length !== trs.length) table.replaceChildren(...trs);
    renderNodes(nodes, data);
    renderNumbers(numbers, data.numbers);
  };
  follow("api/stream/turns", { turns: (d) => { document.getElementById("where").textContent = d.where; render(d); } });
}

// A turn's status, and "(no live host)" when it is not finished and no live host holds it: nothing
// acts on it until a host takes it over (or, on SQLite, a runtime opens the file again).
function statusText(t) {
  if (t.status === "finished") return `finished: ${t.finish_reason}`;
  return t.held === false ? `${t.status} (no live host)` : t.status;
}

// Where the turns run: each node with live hosts, how many, and the unfinished turns they hold.
function renderNodes(node, data) {
  const nodes = data.nodes || [];
  if (!nodes.length && !data.unheld) { node.replaceChildren(); return; }
  node.replaceChildren(el("h2", {}, "Nodes"),
    el("table", { class: "small", id: "node-rows" },
      el("tr", {}, el("th", {}, "node"), el("th", {}, "live hosts"), el("th", {}, "turns")),
      nodes.map((n) => el("tr", { "data-node": n.node }, el("td", {}, n.node), el("td", { class: "hosts" }, n.hosts ?? "-"), el("td", { class: "turns" }, n.turns))),
      data.unheld ? el("tr", { "data-node": "" }, el("td", {}, "(no live host)"), el("td", { class: "hosts" }, "-"), el("td", { class: "turns" }, data.unheld)) : ""));
}

function renderNumbers(node, n) {
  const tools = n["gen_ai.execute_tool.duration"];
  const stops = n["greenroom.turn.interruptions"];
  node.replaceChildren(
    el("h2", {}, "Numbers"),
    el("dl", {},
      el("dt", {}, "greenroom.turns.live"), el("dd", { id: "n-live" }, n["greenroom.turns.live"]),
      el("dt", {}, "greenroom.turns.waiting"), el("dd", { id: "n-waiting" }, n["greenroom.turns.waiting"]),
      el("dt", {}, "greenroom.approval.oldest_wait"), el("dd", {}, `${n["greenroom.approval.oldest_wait"].toFixed(1)} s`),
      el("dt", {}, "gen_ai.client.token.usage"),
      el("dd", { id: "n-tokens" }, `input ${n["gen_ai.client.token.usage"].input}, output ${n["gen_ai.client.token.usage"].output}`)),
    el("h3", {}, "gen_ai.execute_tool.duration"),
    tools.length ? el("table", { class: "small" }, el("tr", {}, el("th", {}, "tool"), el("th", {}, "outcome"), el("th", {}, "calls"), el("th", {}, "mean")),
      tools.map((t) => el("tr", {}, el("td", {}, t.tool), el("td", {}, t.outcome), el("td", {}, t.count), el("td", {}, `${t.mean.toFixed(3)} s`)))) : el("p", {}, "no calls"),
    el("h3", {}, "greenroom.turn.interruptions"),
    stops.length ? el("ul", {}, stops.map((s) => el("li", {}, `${s.kind} (${s.cause}): ${s.count}`))) : el("p", {}, "none"));
}

// -- live streams -------------------------------------------------------------------------------

function follow(path, handlers) {
  if (state.page) state.page.close();
  const conn = document.getElementById("conn");
  const source = new EventSource(path);
  state.page = source;
  source.onopen = () => { conn.textContent = "live"; conn.className = "conn live"; };
  source.onerror = () => { conn.textContent = "reconnecting"; conn.className = "conn down"; };
  for (const [name, fn] of Object.entries(handlers)) {
    source.addEventListener(name, (e) => fn(JSON.parse(e.data)));
  }
}

// -- one turn -----------------------------------------------------------------------------------

function showTurn(turnId) {
  const main = document.getElementById("main");
  const parts = {
    head: el("section", { id: "turn-head" }),
    controls: el("section", { id: "controls" }),
    pending: el("section", { id: "pending" }),
    running: el("section", { id: "running" }),
    timeline: el("section", { id: "timeline" }),
    text: el("pre", { id: "text", class: "text" }),
    events: el("ol", { id: "events" }),
    history: el("section", { id: "history" }),
  };
  main.replaceChildren(
    el("p", {}, el("a", { href: "#/" }, "all turns")),
    parts.head, parts.controls, parts.pending, parts.running,
    el("h2", {}, "Timeline"), parts.timeline,
    el("h2", {}, "Text as it streams"), parts.text,
    el("h2", {}, "Events"), parts.events,
    parts.history);
  renderControls(parts.controls, turnId);
  let view = null;
  let text = "";
  const timer = setInterval(() => { if (view && view.timeline.open) drawTimeline(parts.timeline, view.timeline); }, 1000);
  window.addEventListener("hashchange", () => clearInterval(timer), { once: true });
  follow(`api/stream/turns/${encodeURIComponent(turnId)}`, {
    update: (d) => {
      if (d.where) document.getElementById("where").textContent = d.where;
      for (const e of d.events) {
        parts.events.append(eventItem(e));
        if (e.kind === "text_delta") text += e.text;
        if (e.kind === "finish" && text && !text.endsWith("\n")) text += "\n";
      }
      parts.text.textContent = text;
      view = d.view;
      renderHead(parts.head, view);
      renderPending(parts.pending, turnId, view);
      renderRunning(parts.running, turnId, view);
      drawTimeline(parts.timeline, view.timeline);
      renderHistory(parts.history, view.history);
    },
    gone: (d) => { main.replaceChildren(el("p", { id: "error", class: "refused" }, d.error), el("a", { href: "#/" }, "all turns")); },
  });
}

function renderHead(node, view) {
  const t = view.turn;
  const status = t.status === "finished" ? `finished: ${t.finish_reason}` : t.status;
  const host = t.owner_host || t.owner;
  const where = !t.owner ? (t.held === false ? "no live host holds it" : "")
    : t.held === false ? `no live host holds it (last on host ${host})`
    : `${t.status === "finished" ? "ran on" : "on"} host ${host} (node ${t.owner_node})`;
  node.replaceChildren(
    el("h1", {}, "Turn ", el("span", { id: "turn-id" }, t.turn_id)),
    el("p", {}, "Status: ", el("strong", { id: "turn-status", class: t.status }, status), `, round ${t.round}`,
      t.waiting_since ? `, waiting since ${when(t.waiting_since)} (${ago(t.waiting_since)})` : "",
      view.usage ? `, tokens: ${view.usage.prompt_tokens} in, ${view.usage.completion_tokens} out` : ""),
    where ? el("p", {}, "Where: ", el("span", { id: "turn-host", class: t.held === false ? "unheld" : null }, where)) : "",
    t.parent_turn_id ? el("p", {}, "Parent: ", el("a", { href: `#/turn/${encodeURIComponent(t.parent_turn_id)}`, id: "parent" }, t.parent_turn_id)) : "",
    view.forked_from ? el("p", { id: "forked-from" }, "Forked from: ", el("a", { href: `#/turn/${encodeURIComponent(view.forked_from.turn_id)}` }, view.forked_from.turn_id),
      ` at message ${view.forked_from.at}`, view.forked_from.at_seq !== null ? ` (event ${view.forked_from.at_seq})` : "",
      view.forked_from.replaced ? ", its last user message replaced" : "") : "",
    t.children.length ? el("p", { id: "children" }, "Sub-agents: ", t.children.map((c) => el("a", { href: `#/turn/${encodeURIComponent(c)}`, class: "child" }, c, " "))) : "",
    view.stop ? el("p", { id: "stop-requested" }, `Stop requested at ${when(view.stop.at)}${by(view.stop.by)} (${view.stop.cause}): ${view.stop.reason}`) : "",
    view.cancel ? el("p", { id: "cancel-requested" }, `Cancel requested at ${when(view.cancel.at)}${by(view.cancel.by)} (${view.cancel.cause}): ${view.cancel.reason}`) : "");
}

// Each button's answer is drawn beside that button, and the other one's is cleared: a stop's
// "applied" never stands next to "Cancel with grace".
function renderControls(node, turnId) {
  const stopReply = el("span", { id: "stop-reply", class: "reply" });
  const cancelReply = el("span", { id: "cancel-reply", class: "reply" });
  const reason = el("input", { id: "turn-reason", placeholder: "reason (optional)" });
  const grace = el("input", { id: "cancel-grace", type: "number", min: "0", step: "0.5", placeholder: "grace, s" });
  const base = `api/turns/${encodeURIComponent(turnId)}`;
  const send = (reply, other, label, path, body) => { other.className = "reply"; other.textContent = ""; return command(reply, label, path, body); };
  node.replaceChildren(el("h2", {}, "Steer"),
    el("div", { class: "row" }, reason,
      el("button", { id: "stop-turn", class: "danger", onclick: () => send(stopReply, cancelReply, "stop the turn", `${base}/stop`, reason.value ? { reason: reason.value } : {}) }, "Stop the turn"),
      stopReply),
    el("div", { class: "row" }, grace,
      el("button", { id: "cancel-turn", onclick: () => send(cancelReply, stopReply, "cancel the turn", `${base}/cancel`, { ...(reason.value ? { reason: reason.value } : {}), grace: grace.value === "" ? null : Number(grace.value) }) }, "Cancel with grace"),
      cancelReply),
    renderSteering(base),
    el("p", {}, "Last answer: ", el("span", { id: "last-reply", class: "reply" }, "-")));
}

// New input, pause and resume: each answered beside its button.
function renderSteering(base) {
  const text = el("input", { id: "input-text", placeholder: "new input for the model" });
  const now = el("input", { id: "input-now", type: "checkbox" });
  const denyPending = el("input", { id: "input-deny-pending", type: "checkbox" });
  const inputReply = el("span", { id: "input-reply", class: "reply" });
  const pauseReply = el("span", { id: "pause-reply", class: "reply" });
  const sendInput = () => {
    if (!text.value) { inputReply.className = "reply refused"; inputReply.textContent = "refused: type the input first"; return; }
    const body = { text: text.value, when: now.checked ? "now" : "next_call", deny_pending: denyPending.checked };
    command(inputReply, "send input", `${base}/input`, body).then((r) => { if (r.status === 200 && r.data.ok) text.value = ""; });
  };
  const resume = () => {
    const body = text.value ? { text: text.value } : {};
    command(pauseReply, "resume", `${base}/resume`, body).then((r) => { if (r.status === 200 && r.data.ok) text.value = ""; });
  };
  return el("div", { id: "steering" },
    el("div", { class: "row" }, text,
      el("label", {}, now, " now"), el("label", {}, denyPending, " deny pending calls"),
      el("button", { id: "send-input", onclick: sendInput }, "Send input"), inputReply),
    el("div", { class: "row" },
      el("button", { id: "pause-turn", onclick: () => command(pauseReply, "pause", `${base}/pause`, {}) }, "Pause"),
      el("button", { id: "pause-now", onclick: () => command(pauseReply, "pause now", `${base}/pause`, { when: "now" }) }, "Pause now"),
      el("button", { id: "resume-turn", onclick: resume }, "Resume (with the input, if any)"),
      pauseReply));
}

function renderPending(node, turnId, view) {
  const base = `api/turns/${encodeURIComponent(turnId)}`;
  const keep = new Map([...node.querySelectorAll(".pending")].map((n) => [`${n.dataset.turn}/${n.dataset.call}`, n]));
  if (!view.pending.length) { node.replaceChildren(); return; }
  const items = view.pending.map((p) => {
    const key = `${p.turn_id}/${p.call_id}`;
    const old = keep.get(key);
    const decided = p.decision ? `(${p.decision}${by(p.decided_by)}; waiting for the other decisions)` : "";
    if (old) { old.querySelector(".decision").textContent = decided; return old; }
    const reason = el("input", { class: "reason", placeholder: "reason the model will read (deny)" });
    const reply = el("span", { class: "reply" });
    const decide = (approved, args) => command(reply, `${approved ? "approve" : "deny"} ${p.call_id}`, `${base}/decide`, { decisions: [{ turn_id: p.turn_id, call_id: p.call_id, approved, reason: reason.value || null, arguments: args ?? null }] });
    const edited = el("textarea", { class: "edit-arguments", rows: 4, cols: 60 });
    edited.value = JSON.stringify(p.arguments ?? {}, null, 2);
    const approveEdited = () => {
      let args;
      try { args = JSON.parse(edited.value); } catch (e) { reply.className = "reply refused"; reply.textContent = `refused: the arguments are not JSON (${e.message})`; return; }
      decide(true, args);
    };
    return el("div", { class: "pending", "data-call": p.call_id, "data-turn": p.turn_id },
      el("h3", {}, el("span", { class: "tool" }, p.name), " ", el("code", {}, p.call_id),
        p.turn_id !== turnId ? el("span", { class: "of-child" }, " of sub-agent ", el("a", { href: `#/turn/${encodeURIComponent(p.turn_id)}` }, p.turn_id)) : ""),
      p.description ? el("p", { class: "description" }, p.description) : "",
      p.approvers ? el("p", { class: "approvers" }, `May be decided by: ${p.approvers.join(", ")}`) : "",
      el("pre", { class: "arguments" }, json(p.arguments)),
      el("details", { class: "edit" }, el("summary", {}, "Edit arguments before approving"), edited,
        el("button", { class: "approve-edited", onclick: approveEdited }, "Approve with these arguments")),
      el("div", { class: "row" }, reason,
        el("button", { class: "approve", onclick: () => decide(true) }, "Approve"),
        el("button", { class: "deny danger", onclick: () => decide(false) }, "Deny"),
        el("span", { class: "decision" }, decided),
        reply));
  });
  const allReason = node.querySelector("#all-reason") || el("input", { id: "all-reason", placeholder: "reason for denying all" });
  const allReply = node.querySelector("#all-reply") || el("span", { id: "all-reply", class: "reply" });
  const all = (approved) => command(allReply, approved ? "approve all" : "deny all", `${base}/decide`, {
    decisions: view.pending.filter((p) => !p.decision).map((p) => ({ turn_id: p.turn_id, call_id: p.call_id, approved, reason: approved ? null : (allReason.value || null) })),
  });
  node.replaceChildren(el("h2", {}, "Waiting for a decision"), ...items,
    el("div", { class: "row all" }, allReason,
      el("button", { id: "approve-all", onclick: () => all(true) }, "Approve all"),
      el("button", { id: "deny-all", class: "danger", onclick: () => all(false) }, "Deny all"), allReply));
}

function renderRunning(node, turnId, view) {
  const keep = new Map([...node.querySelectorAll(".running-call")].map((n) => [n.dataset.call, n]));
  if (!view.running.length) { node.replaceChildren(); return; }
  const base = `api/turns/${encodeURIComponent(turnId)}`;
  node.replaceChildren(el("h2", {}, "Running calls"), ...view.running.map((c) => {
    if (keep.has(c.call_id)) return keep.get(c.call_id);
    const reply = el("span", { class: "reply" });
    return el("div", { class: "running-call", "data-call": c.call_id },
      el("span", { class: "tool" }, c.name), " ", el("code", {}, c.call_id), ` since ${when(c.started_at)}`,
      c.approved_by ? ` (approved${by(c.approved_by)})` : "", " ",
      el("pre", { class: "arguments" }, json(c.arguments)),
      el("button", { class: "stop-call danger", onclick: () => command(reply, `stop ${c.call_id}`, `${base}/calls/${encodeURIComponent(c.call_id)}/stop`, {}) }, "Stop this call"),
      reply);
  }));
}

function eventItem(e) {
  let detail = "";
  if (e.kind === "text_delta") detail = e.text;
  else if (e.kind === "tool_call_started") detail = `${e.name} ${e.call_id} ${json(e.arguments)}${e.by ? ` (approved${by(e.by)})` : ""}`;
  else if (e.kind === "tool_progress") detail = `${e.call_id} ${json(e.data)}`;
  else if (e.kind === "tool_finished") detail = `${e.name} ${e.call_id} ${e.outcome}${by(e.by)}: ${e.content}`;
  else if (e.kind === "tool_approval_request") detail = `${e.name} ${e.call_id}${e.child_turn_id ? ` (sub-agent ${e.child_turn_id})` : ""} ${json(e.arguments)}`;
  else if (e.kind === "error") detail = `${e.error_type}${by(e.by)}: ${e.message}${e.detail ? ` (${e.detail})` : ""}`;
  else if (e.kind === "finish") detail = e.finish_reason;
  else if (e.kind === "turn_retrying") detail = `attempt ${e.attempt}: ${e.reason}`;
  else if (e.kind === "input_accepted") detail = e.messages.map((m) => m.content).join(" / ");
  else if (e.kind === "budget_warning") detail = `${e.budget}: ${e.used} of ${e.limit}`;
  return el("li", { "data-seq": e.seq, "data-kind": e.kind, class: e.kind },
    el("span", { class: "seq" }, `#${e.seq}`), " ", el("span", { class: "at" }, when(e.at)), " ",
    el("span", { class: "kind" }, e.kind), " ", el("span", { class: "detail" }, detail));
}

function renderHistory(node, history) {
  node.replaceChildren(el("h2", {}, "History"), el("ol", { id: "messages" }, history.map((m) =>
    el("li", { class: `message ${m.role}` },
      el("span", { class: "role" }, m.tool_call_id ? `${m.role} [${m.tool_call_id}]` : m.role), " ",
      el("span", { class: "content" }, m.content ?? ""),
      (m.tool_calls || []).map((c) => el("code", { class: "call" }, ` ${c.name}(${c.arguments}) [${c.id}]`))))));
}

// -- the timeline, drawn as an SVG of shapes and text nodes -----------------------------------

function drawTimeline(node, t) {
  const width = 960, left = 150, right = 20, rowH = 26, top = 40;
  const now = t.open && t.start ? Math.max(t.end, Date.now() / 1000 - t.start) : t.end;
  const span = Math.max(now, 0.001);
  const x = (s) => left + (Math.min(s, span) / span) * (width - left - right);
  const rows = 1 + t.calls.length;
  const height = top + rows * rowH + 30;
  const g = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "timeline", id: "timeline-svg" });
  g.append(svg("rect", { x: 0, y: 0, width, height, class: "tl-bg" }));
  for (const w of t.waits) {
    const end = w.end ?? now;
    g.append(svg("rect", { x: x(w.start), y: top - 6, width: Math.max(2, x(end) - x(w.start)), height: rows * rowH + 6, class: "tl-wait" }));
    g.append(svg("text", { x: Math.min(x(w.start) + 4, width - 200), y: 14, class: "tl-wait-label" }, `waiting for a person ${(end - w.start).toFixed(1)} s`));
  }
  g.append(svg("text", { x: 8, y: top + 17, class: "tl-label" }, "model"));
  for (const m of t.model) {
    const end = m.end ?? now;
    g.append(svg("rect", { x: x(m.start), y: top + 4, width: Math.max(2, x(end) - x(m.start)), height: rowH - 8, class: "tl-model" },
      svg("title", {}, `model call ${m.n}: ${(end - m.start).toFixed(2)} s`)));
  }
  t.calls.forEach((c, i) => {
    const y = top + (i + 1) * rowH;
    const end = c.end ?? now;
    g.append(svg("text", { x: 8, y: y + 17, class: "tl-label" }, `${c.name} ${c.call_id}`));
    g.append(svg("rect", { x: x(c.start), y: y + 4, width: Math.max(3, x(end) - x(c.start)), height: rowH - 8, class: `tl-call ${c.outcome || "running"}`, "data-call": c.call_id },
      svg("title", {}, `${c.name} ${c.call_id}: ${c.outcome || "running"}, ${(end - c.start).toFixed(2)} s`)));
    g.append(svg("text", { x: Math.min(x(end) + 4, width - 90), y: y + 17, class: "tl-outcome" }, c.outcome || "running"));
  });
  for (const m of t.marks) {
    const asked = m.kind.endsWith("_requested");  // when a stop or cancel was asked for; the other kinds: where it landed
    g.append(svg("line", { x1: x(m.at), x2: x(m.at), y1: top - 10, y2: top + rows * rowH, class: `tl-mark ${m.kind}${asked ? " asked" : ""}` }));
    g.append(svg("text", { x: Math.min(x(m.at) + 3, width - 160), y: asked ? top + rows * rowH + 14 : 30, class: "tl-mark-label" },
      `${m.kind.replace("_", " ")}${m.cause ? ` (${m.cause})` : ""}${by(m.by)}`));
  }
  for (let i = 0; i <= 4; i++) {
    const s = (span * i) / 4;
    const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
    g.append(svg("text", { x: x(s), y: height - 4, class: "tl-tick", "text-anchor": anchor }, `${s.toFixed(s < 10 ? 2 : 0)} s`));
  }
  node.replaceChildren(g);
}

// -- routing --------------------------------------------------------------------------------------

// -- sessions: the list, and one session's turns and history (read from the store) ------------------

async function showSessions() {
  const { status, data } = await api("api/sessions");
  const main = document.getElementById("main");
  if (status !== 200) { main.replaceChildren(el("p", { class: "refused" }, data.error || `HTTP ${status}`)); return; }
  main.replaceChildren(el("h1", {}, "Sessions"), el("p", {}, el("a", { href: "#/" }, "all turns")),
    !data.stored ? el("p", { id: "no-sessions" }, "No store: sessions live in their Runtime's process only.")
    : !data.sessions.length ? el("p", { id: "no-sessions" }, "No sessions.")
    : el("table", { id: "sessions" },
      el("thead", {}, el("tr", {}, ["session", "turns", "created", "updated"].map((h) => el("th", {}, h)))),
      el("tbody", {}, data.sessions.map((s) => el("tr", { "data-session": s.session_id },
        el("td", {}, el("a", { href: `#/session/${encodeURIComponent(s.session_id)}` }, s.session_id)),
        el("td", {}, String(s.turns)), el("td", {}, when(s.created_at)), el("td", {}, when(s.updated_at)))))));
}

async function showSession(sessionId) {
  const { status, data } = await api(`api/sessions/${encodeURIComponent(sessionId)}`);
  const main = document.getElementById("main");
  const back = el("p", {}, el("a", { href: "#/sessions" }, "all sessions"));
  if (status !== 200) { main.replaceChildren(el("p", { id: "error", class: "refused" }, data.error || `HTTP ${status}`), back); return; }
  const link = (t) => el("a", { href: `#/turn/${encodeURIComponent(t)}` }, t);
  const history = el("section", { id: "history" });
  renderHistory(history, data.history);
  main.replaceChildren(el("h1", {}, "Session ", el("span", { id: "session-id" }, data.session_id)), back,
    el("p", {}, `Updated ${when(data.updated_at)}`),
    el("h2", {}, "Turns"), el("ol", { id: "session-turns" }, data.turns.map((t) =>
      el("li", {}, link(t.turn_id), ` ${t.status}${t.finish_reason ? ` (${t.finish_reason})` : ""}`))),
    el("p", { id: "session-running" }, "Running: ", data.running ? link(data.running) : "none"),
    el("p", { id: "session-queued" }, "Waiting: ", data.queued.length ? data.queued.join(", ") : "none"),
    history);
}

function route() {
  const hash = location.hash || "#/";
  const match = hash.match(/^#\/turn\/([^?]+)/);
  const session = hash.match(/^#\/session\/([^?]+)/);
  if (match) showTurn(decodeURIComponent(match[1]));
  else if (session) showSession(decodeURIComponent(session[1]));
  else if (hash.startsWith("#/sessions")) showSessions();
  else showList();
}

async function start() {
  const { status, data } = await api("api/session");
  if (status !== 200) {
    document.getElementById("main").replaceChildren(el("p", { class: "refused" }, data.error || `HTTP ${status}`));
    return;
  }
  state.csrf = data.csrf;
  state.user = data.user;
  document.getElementById("where").textContent = data.where;
  document.getElementById("user").textContent = data.user ? `signed in as ${data.user}` : "anonymous (the console's key)";
  window.addEventListener("hashchange", route);
  route();
}

start();
