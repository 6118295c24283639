// The khai console page: reads the JSON API (/api/...) and re-reads the view shown whenever
// the event stream (/api/stream) reports a change. Everything from the API is put into the page
// as text, never as HTML.
"use strict";

const view = document.getElementById("view");
const crumbs = document.getElementById("crumbs");

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function link(href, text) { return el("a", { href }, text); }
function when(ms) { return ms ? new Date(ms).toLocaleTimeString() : ""; }
function ms(v) { return v === null || v === undefined ? "–" : v < 10 ? v.toFixed(1) + " ms" : Math.round(v) + " ms"; }
function result(r) { return el("span", { class: r }, r); }
function enc(s) { return encodeURIComponent(s); }
function objectHref(controller, o) { return `#/o/${enc(controller)}/${enc(o.namespace || "-")}/${enc(o.name)}`; }

function table(headers, rows, empty) {
  if (!rows.length) return el("p", { class: "muted" }, empty);
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map(h => el("th", {}, h)))),
    el("tbody", {}, rows.map(r => el("tr", {}, r.map(c => c instanceof Node ? el("td", {}, c) : el("td", {}, c))))));
}

// Off loopback the API asks for a bearer token (docs/console.md, "Access off loopback"); the
// page asks for one when told 401 and keeps it for this tab only.
function headers(more) {
  const token = sessionStorage.getItem("khai-token");
  return token ? { ...more, authorization: `Bearer ${token}` } : more;
}

class NeedsToken extends Error {}

async function get(path) {
  const res = await fetch(path, { headers: headers({ accept: "application/json" }) });
  const body = await res.json();
  if (res.status === 401) throw new NeedsToken(body.error || res.statusText);
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function askToken(message) {
  const input = el("input", { id: "token", type: "password", size: "60", autocomplete: "off" });
  const use = el("button", { type: "button" }, "Use token");
  use.addEventListener("click", () => {
    sessionStorage.setItem("khai-token", input.value.trim());
    render();
    connect();
  });
  view.replaceChildren(el("p", { class: "error" }, message),
    el("p", {}, "A token whose user may read this console (kubectl create token NAME): "), input, " ", use);
}

function writes(t) {
  const parts = [];
  if (t.applied) parts.push(`${t.applied} applied`);
  if (t.unchanged) parts.push(`${t.unchanged} unchanged`);
  if (t.pruned) parts.push(`${t.pruned} pruned`);
  if (t.status_written) parts.push("status written");
  if (t.hot_loop) parts.push("paused: hot loop");
  return parts.join(", ") || "nothing";
}

function entries(title, list) {
  return [el("h2", {}, title), table(["for", "script", "function", "when"],
    list.map(e => [e.target, e.script, e.function, e.when]), "none")];
}

async function showOverview() {
  const o = await get("/api/overview");
  document.getElementById("operator").textContent = `${o.operator} · khai ${o.khai_version}`;
  crumbs.replaceChildren("Overview");
  const leader = o.leader_election.length
    ? o.leader_election.map(l => `${l.lease}: ${l.leading ? "leading" : "standing by"}`).join(", ")
    : "no leader election: this replica runs the controllers";
  view.replaceChildren(
    el("h2", {}, "Config"),
    el("dl", {},
      el("dt", {}, "revision"), el("dd", {}, o.revision.hash),
      el("dt", {}, "source"), el("dd", {}, o.revision.source + (o.revision.version ? ` @ ${o.revision.version}` : "")),
      el("dt", {}, "loaded"), el("dd", {}, when(o.revision.loaded_at_ms)),
      el("dt", {}, "leader"), el("dd", { id: "leader" }, leader)),
    el("h2", {}, "Reloads"),
    table(["when", "result", "revision", "error"], o.reloads.slice().reverse().map(r =>
      [when(r.at_ms), result(r.result), r.hash || "", r.error ? el("pre", { class: "error-text" }, r.error) : ""]), "none"),
    el("h2", {}, "Controllers"),
    table(["controller", "kind", "objects", "backoff", "damped", "queue", "busy", "reconciles/min", "errors/min", "p50", "p99"],
      o.controllers.map(c => [link(`#/c/${enc(c.name)}`, c.name), c.kind, c.objects,
        el("span", { class: c.backoff ? "backoff" : "" }, c.backoff), el("span", { class: c.damped ? "damped" : "" }, c.damped),
        c.queue_depth, `${c.busy}/${c.concurrency || "∞"}`, c.rates.reconciles_last_minute, c.rates.errors_last_minute,
        ms(c.rates.p50_ms), ms(c.rates.p99_ms)]), "none"),
    ...entries("Handlers", o.handlers), ...entries("Timers", o.timers), ...entries("Daemons", o.daemons),
    ...entries("Schedules", o.schedules), ...entries("Webhooks", o.webhooks));
}

async function showController(name) {
  const c = await get(`/api/controllers/${enc(name)}`);
  crumbs.replaceChildren(link("#/", "Overview"), " / ", c.name);
  const r = c.rates;
  view.replaceChildren(
    el("h2", {}, `${c.name} (${c.kind})`),
    el("dl", {},
      el("dt", {}, "script"), el("dd", {}, `${c.script}: ${c.reconcile}()`),
      el("dt", {}, "queue"), el("dd", {}, `${c.queue_depth} waiting, ${c.busy} running`),
      el("dt", {}, "last minute"), el("dd", {}, `${r.reconciles_last_minute} reconciles, ${r.errors_last_minute} errors`),
      el("dt", {}, "latency"), el("dd", {}, `p50 ${ms(r.p50_ms)} · p90 ${ms(r.p90_ms)} · p99 ${ms(r.p99_ms)}`)),
    el("h2", {}, "Objects"),
    table(["object", "phase", "state", "last result", "when", "took", "error"],
      c.objects.map(o => [link(objectHref(c.name, o), o.namespace ? `${o.namespace}/${o.name}` : o.name),
        o.phase || "", result(o.state), result(o.last.result), when(o.last.at_ms), ms(o.last.took_ms),
        o.last.error ? el("pre", { class: "error-text" }, o.last.error) : ""]),
      "No reconcile yet."));
}

async function showObject(controller, namespace, name) {
  const o = await get(`/api/objects/${enc(controller)}/${enc(namespace)}/${enc(name)}`);
  const shown = o.namespace ? `${o.namespace}/${o.name}` : o.name;
  crumbs.replaceChildren(link("#/", "Overview"), " / ", link(`#/c/${enc(controller)}`, controller), " / ", shown);
  view.replaceChildren(
    el("h2", {}, `${o.kind} ${shown}`),
    el("p", {}, link(`#/p/${enc(controller)}/${enc(namespace)}/${enc(name)}`, "Try an edited script on it in the playground")),
    el("dl", {},
      el("dt", {}, "uid"), el("dd", {}, o.uid),
      el("dt", {}, "phase"), el("dd", {}, o.phase || "–"),
      el("dt", {}, "state"), el("dd", {}, result(o.state))),
    el("h2", {}, "Last reconciles"),
    table(["when", "trigger", "took", "result", "writes", "error"], o.history.map(t =>
      [when(t.at_ms), t.triggers.join(", ") || "–", ms(t.took_ms), result(t.result), writes(t),
        t.error ? el("pre", { class: "error-text" }, t.error) : ""]), "none"),
    el("h2", {}, "Events"),
    o.events_error ? el("p", { class: "error" }, o.events_error) :
      table(["when", "type", "reason", "message", "count"],
        o.events.map(e => [e.at || "", el("span", { class: e.type === "Warning" ? "error" : "" }, e.type), e.reason, e.message, e.count || 1]),
        "none"));
}

// The playground: the controller's script in an editor, run against one live object with
// nothing written (POST /api/playground); the edit is offered as a ConfigMap patch.
async function showPlayground(controller, namespace, name) {
  const source = await get(`/api/playground/${enc(controller)}`);
  crumbs.replaceChildren(link("#/", "Overview"), " / ", link(`#/c/${enc(controller)}`, controller), " / playground");
  const target = el("input", { id: "object", value: namespace === "-" ? name : `${namespace}/${name}`, size: "40" });
  const editor = el("textarea", { id: "script", spellcheck: "false", rows: "10" });
  editor.value = source.text;
  const run = el("button", { id: "run", type: "button" }, "Run (dry: nothing is written)");
  const out = el("div", { id: "result" });
  const patch = el("pre", { id: "patch", class: "code" });
  const showPatch = () => {
    patch.textContent = JSON.stringify({ data: { [source.key]: editor.value } }, null, 2);
  };
  editor.addEventListener("input", showPatch);
  showPatch();
  run.addEventListener("click", async () => {
    const [ns, n] = target.value.includes("/") ? target.value.split("/", 2) : [null, target.value];
    out.replaceChildren(el("p", { class: "muted" }, "Running…"));
    try {
      const res = await fetch("/api/playground", {
        method: "POST",
        headers: headers({ "content-type": "application/json", accept: "application/json" }),
        body: JSON.stringify({ controller, namespace: ns, name: n, script: editor.value }),
      });
      const body = await res.json();
      if (!res.ok) throw new Error(body.error || res.statusText);
      out.replaceChildren(...playResult(body));
    } catch (e) {
      out.replaceChildren(el("p", { class: "error" }, e.message));
    }
  });
  view.replaceChildren(
    el("h2", {}, `Playground: ${controller}`),
    el("p", { class: "muted" }, `${source.file}: edit it and run it against a live object from khai's caches. ` +
      "The plan is compared with the cluster and each child write is sent as a server-side dry run; nothing is stored."),
    el("label", {}, "object ", target), " ", run,
    editor, out,
    el("h2", {}, "The edit as a ConfigMap patch"),
    el("p", { class: "muted" }, "For a config held in a ConfigMap: kubectl patch configmap NAME --type merge --patch-file patch.json"),
    patch);
}

function playResult(r) {
  const o = r.object;
  const parts = [el("h2", {}, "Result")];
  if (!o) {
    parts.push(el("p", { class: "success", id: "verdict" }, "nothing would change"));
  } else if (o.error) {
    parts.push(el("p", { class: "error", id: "verdict" }, "reconcile fails"), el("pre", { class: "error-text" }, o.error));
  } else if (o.skipped) {
    parts.push(el("p", { class: "muted", id: "verdict" }, `skipped: ${o.skipped}`));
  } else {
    const refused = (o.children || []).filter(c => c.refused);
    parts.push(el("p", { class: refused.length ? "error" : "requeue", id: "verdict" },
      refused.length ? `${refused.length} child write(s) refused by the API server's dry run` : "would write"));
    parts.push(table(["child", "action", "dry run"], (o.children || []).map(c =>
      [`${c.kind} ${c.namespace ? c.namespace + "/" : ""}${c.name}`, c.action || "", c.refused ? el("span", { class: "error" }, c.refused) : "accepted"]), "no child writes"));
  }
  parts.push(el("h2", {}, "Plan and diff"), el("pre", { class: "code", id: "diff" }, r.text));
  return parts;
}

async function render() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  try {
    if (parts[0] === "c" && parts[1]) await showController(parts[1]);
    else if (parts[0] === "o" && parts.length === 4) await showObject(parts[1], parts[2], parts[3]);
    else if (parts[0] === "p" && parts.length === 4) await showPlayground(parts[1], parts[2], parts[3]);
    else await showOverview();
  } catch (e) {
    if (e instanceof NeedsToken) askToken(e.message);
    else view.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

// A change shows 250 ms later (a burst rides along), and the view is read again at most once a
// second while changes keep coming: a person reads no faster, and khai serves less.
let pending = null;
let shown = 0;
function soon() {
  if (pending) return;
  const wait = Math.max(250, shown + 1000 - Date.now());
  pending = setTimeout(() => { pending = null; shown = Date.now(); render(); }, wait);
}

function changed(data) {
  const change = JSON.parse(data);
  if (change.type !== "hello" && !location.hash.startsWith("#/p/")) soon();
}

let stream = null;
function connect() {
  const live = document.getElementById("live");
  const on = () => { live.textContent = "● live"; live.classList.add("on"); };
  const off = () => { live.textContent = "○ reconnecting"; live.classList.remove("on"); };
  if (stream) stream.close();
  if (!sessionStorage.getItem("khai-token")) {
    const source = new EventSource("/api/stream");
    source.onopen = on;
    source.onerror = off;
    source.onmessage = (m) => changed(m.data);
    stream = source;
    return;
  }
  // EventSource cannot send a token: read the stream through fetch, line by line.
  const abort = new AbortController();
  stream = { close: () => abort.abort() };
  (async () => {
    const res = await fetch("/api/stream", { headers: headers({}), signal: abort.signal });
    if (!res.ok) throw new Error(res.statusText);
    on();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += value;
      let end;
      while ((end = pending.indexOf("\n\n")) >= 0) {
        const event = pending.slice(0, end);
        pending = pending.slice(end + 2);
        for (const line of event.split("\n")) if (line.startsWith("data: ")) changed(line.slice(6));
      }
    }
  })().catch(() => {}).finally(() => {
    off();
    if (!abort.signal.aborted) setTimeout(connect, 2000);
  });
}

// A new view renders at once; a refresh still pending for the old one would only redo it, or
// in the playground reset the script being edited.
window.addEventListener("hashchange", () => {
  clearTimeout(pending);
  pending = null;
  render();
});
render();
connect();
