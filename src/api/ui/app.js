// The halite explorer. Plain JavaScript, no build step: it reads the
// public API only (tables, series listing, /api/v1/query, InfluxQL's
// /query for tables of open tag sets, /metrics) and draws with uPlot.
// `window.explorer` holds what the page last asked and drew, for the
// browser test and for anyone curious in the console.
"use strict";

const explorer = (window.explorer = {
  tables: [],
  table: null,
  listing: null,
  request: null,
  chart: null,
  rows: null,
  status: null,
  drawn: 0,
  error: null,
});

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
};

// ------------------------------------------------------------------ api --

class ApiError extends Error {}

// A server that checks tokens answers 401: the page asks for one and
// keeps it for this tab only (sessionStorage), never in the URL.
const TOKEN_KEY = "halite.token";
const token = () => sessionStorage.getItem(TOKEN_KEY);
const authorized = (headers = {}) => (token() ? { ...headers, Authorization: `Bearer ${token()}` } : headers);

function askForToken(why) {
  $("token-form").hidden = false;
  $("token").focus();
  throw new ApiError(`${why}: this server needs an API token with the read scope; paste one above (\`halite token create --scope read\`).`);
}

async function api(path, body) {
  const init = body === undefined
    ? { headers: authorized() }
    : { method: "POST", headers: authorized({ "Content-Type": "application/json" }), body: JSON.stringify(body) };
  const r = await fetch(path, init);
  if (r.status === 401) askForToken(token() ? "the token was refused" : "no token");
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON: say so below */ }
  if (!r.ok) {
    // halite's API answers {"error": {"message"}}; the InfluxDB protocol {"error": "…"}.
    const msg = json && json.error ? json.error.message || json.error : text.slice(0, 200);
    throw new ApiError(`${r.status} ${path}: ${msg}`);
  }
  if (json === null) throw new ApiError(`${path} did not answer JSON`);
  return json;
}

// Prometheus text format → [{name, labels, value}] (no histograms' math).
function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\"/g, '"').replace(/\\n/g, "\n").replace(/\\\\/g, "\\");
      }
    }
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

async function metrics() {
  const r = await fetch("/metrics", { headers: authorized() });
  if (r.status === 401) askForToken(token() ? "the token was refused" : "no token");
  if (!r.ok) throw new ApiError(`${r.status} /metrics`);
  return parseMetrics(await r.text());
}

const sum = (ms, name, pred = () => true) =>
  ms.filter((m) => m.name === name && pred(m.labels)).reduce((a, m) => a + m.value, 0);

// -------------------------------------------------------------- format --

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}
// Integers with thousands separators; other numbers exactly as stored
// (rounding would show 0.0004 as 0).
const number = (n) => (Number.isInteger(n) ? n.toLocaleString("en") : String(n));
const iso = (ms) => new Date(ms).toISOString().replace(".000Z", "Z");
const seriesLabel = (s) =>
  s.key ? Object.entries(s.key).map(([k, v]) => `${k}=${v}`).join(", ")
        : [s.metric, ...Object.entries(s.tags).map(([k, v]) => `${k}=${v}`)].join(", ");
const shellQuote = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;

// Each table pick and each draw takes a new generation; an answer that
// comes back after a newer one began is dropped, so a slow query cannot
// overwrite the chart of the series picked after it.
let generation = 0;
class Superseded extends Error {}
const still = (g) => { if (g !== generation) throw new Superseded(); };

function say(text, isError = false) {
  $("message").textContent = text;
  $("message").className = isError ? "error" : "muted";
  if (isError) explorer.error = text;
}

// -------------------------------------------------------------- tables --

// Salt epochs change the bucket count over time: the most a table has.
const bucketsOf = (t) => {
  const salt = t.key.salt;
  if (!salt) return 1;
  return Math.max(salt.buckets, ...(salt.epochs || []).map((e) => e.buckets || 0));
};
const saltFrom = (salt) =>
  typeof salt.from === "string" ? salt.from : salt.from ? JSON.stringify(salt.from) : "series";

async function loadTables() {
  const [tables, ms] = await Promise.all([api("/api/v1/tables"), metrics().catch(() => [])]);
  explorer.tables = tables.filter((t) => !t.name.split(":")[1].startsWith("__"));
  const list = $("tables");
  list.replaceChildren();
  if (!explorer.tables.length) {
    list.append(el("li", { class: "muted" }, "No tables yet: write some data (see the README)."));
  }
  for (const t of explorer.tables) {
    const onDisk = sum(ms, "halite_store_file_bytes", (l) => l.table === t.name);
    const inMemory = sum(ms, "halite_memstore_bytes", (l) => l.table === t.name);
    const buckets = bucketsOf(t);
    const a = el("a", { href: `#table=${encodeURIComponent(t.name)}`, "data-table": t.name }, t.name);
    list.append(el("li", {}, a, el("small", {},
      `${t.key.tags ? "open tags" : "key fields"} · ${buckets} bucket${buckets === 1 ? "" : "s"} · ` +
      `${t.regions.length} region${t.regions.length === 1 ? "" : "s"} · ${bytes(onDisk + inMemory)}`)));
  }
}

function describe(t) {
  const facts = $("table-facts");
  facts.replaceChildren();
  const fact = (k, v) => facts.append(el("dt", {}, k), el("dd", {}, v));
  if (t.key.tags) {
    fact("key", "[salt] metric · tags (UIDs) · reversed time");
  } else {
    fact("key", t.key.fields.map((f) => `${f.name}: ${f.type}${f.width ? `(${f.width})` : ""}`).join(" · "));
  }
  const salt = t.key.salt;
  fact("salt", salt ? `${bucketsOf(t)} buckets from ${saltFrom(salt)}` : "none");
  fact("regions", String(t.regions.length));
  fact("families", t.families.map((f) => `${f.name} (${f.data_block_encoding || "PREFIX"}, ${f.compression || "NONE"})`).join(", "));
  fact("durability", t.durability);
}

// A value from the page's address is used only if the page offers it.
const pick = (select, value) => {
  if (value && [...select.options].some((o) => o.value === value)) select.value = value;
};

// Takes the chart, the request and the rows off the page, so what stays
// on it never belongs to another series than the one picked.
function clearShown() {
  if (plot) { plot.destroy(); plot = null; }
  $("chart").replaceChildren();
  $("request").hidden = true;
  $("rows").hidden = true;
  explorer.request = explorer.chart = explorer.rows = null;
}

async function selectTable(name, wanted = {}) {
  const g = ++generation;
  // Nothing of the table before stays on screen or in reach of Draw.
  explorer.listing = null;
  clearShown();
  $("series").replaceChildren();
  $("query-form").hidden = true;
  let t = explorer.tables.find((x) => x.name === name);
  if (!t) {
    // Made since the page loaded (an InfluxDB client's first write, say).
    await loadTables();
    if (g !== generation) return;
    t = explorer.tables.find((x) => x.name === name);
  }
  for (const a of document.querySelectorAll("#tables a")) a.classList.toggle("on", a.dataset.table === name);
  if (!t) { say(`no table ${name}`, true); return; }
  explorer.table = t;
  $("pick-table").hidden = true;
  $("table-info").hidden = false;
  $("table-name").textContent = t.name;
  describe(t);
  say("listing series…");
  const listing = await api(`/api/v1/tables/${encodeURIComponent(name)}/series?limit=1000`);
  if (g !== generation) return;
  explorer.listing = listing;
  const select = $("series");
  listing.series.forEach((s, i) => select.append(el("option", { value: String(i) }, seriesLabel(s))));
  $("query-form").hidden = false;
  if (!listing.series.length) { say("This table has no series yet."); return; }
  let index = 0;
  if (wanted.series) {
    const found = listing.series.findIndex((s) => seriesLabel(s) === wanted.series);
    if (found >= 0) index = found;
  }
  select.value = String(index);
  showFields(wanted.fields);
  pick($("range"), wanted.range);
  pick($("function"), wanted.fn);
  say(`${listing.series.length}${listing.truncated ? "+" : ""} series`);
  await draw();
}

function chosenSeries() {
  const i = Number($("series").value);
  return explorer.listing && explorer.listing.series[i];
}

function showFields(wanted) {
  const s = chosenSeries();
  const box = $("fields");
  box.querySelectorAll("label").forEach((l) => l.remove());
  if (!s) return;
  const asked = wanted ? wanted.split(",").filter((f) => s.fields.includes(f)) : [];
  const checked = asked.length ? asked : s.fields.slice(0, 1);
  for (const f of s.fields) {
    const input = el("input", { type: "checkbox", value: f });
    input.checked = checked.includes(f);
    box.append(el("label", {}, input, ` ${f}`));
  }
}

const chosenFields = () => [...document.querySelectorAll("#fields input:checked")].map((i) => i.value);

// What the page shows, as its address: a link to it, and what `route`
// compares with to tell a new pick from the page's own update.
const stateHash = () => {
  const t = explorer.table;
  const s = chosenSeries();
  return t && s ? new URLSearchParams({
    table: t.name, series: seriesLabel(s), fields: chosenFields().join(","),
    range: $("range").value, fn: $("function").value,
  }).toString() : "";
};

// ---------------------------------------------------------------- draw --

// The range asked for, ending after `newest` (the series' newest point,
// when the page ends there and one is known) or now.
function timeRange(newest) {
  const span = Number($("range").value);
  const end = newest != null ? newest + 1 : Date.now();
  return { start: Math.max(0, end - span), end };
}

const anchoredAtNewest = () => $("anchor").value === "newest";

async function draw() {
  const t = explorer.table;
  const s = chosenSeries();
  const fields = chosenFields();
  if (!t || !s) return;
  if (!fields.length) { say("Pick at least one field.", true); return; }
  const hash = stateHash();
  if (location.hash.slice(1) !== hash) history.replaceState(null, "", `#${hash}`);
  explorer.error = null;
  say("querying…");
  const g = ++generation;
  try {
    const shown = t.key.tags ? await drawInfluxQL(t, s, fields, g) : await drawQuery(t, s, fields, g);
    still(g);
    // Published together, so a reader never sees one draw's chart with
    // another's rows.
    Object.assign(explorer, shown);
    explorer.drawn++;
  } catch (e) {
    if (!(e instanceof Superseded)) {
      clearShown();
      say(e.message, true);
    }
  }
}

// A table's time unit (its key's `time_unit`, ms by default) in ms.
const unitMs = (t) => ({ s: 1000, ms: 1, us: 1e-3, ns: 1e-6 })[t.key.time_unit || "ms"];

// One aggregate window per chart pixel, so a year draws as fast as an
// hour; whole steps of the table's time unit (a table kept in seconds
// takes only whole seconds).
function windowMs(t, span) {
  const px = Math.max(100, $("chart").clientWidth || 800);
  const step = Math.max(1, unitMs(t));
  return Math.max(step, Math.ceil(span / px / step) * step);
}

// An aggregate's window start in ms, whatever the table's unit.
const windowStartMs = (a) =>
  a.window_ms ?? (a.window_s != null ? a.window_s * 1000 : a.window_us != null ? a.window_us / 1e3 : a.window_ns / 1e6);

async function drawQuery(t, s, fields, g) {
  const fn = $("function").value;
  const series = Object.entries(s.key);
  const time = t.key.fields.find((f) => f.type === "timestamp" || f.type === "reversed_timestamp");
  if (!time) {
    // Nothing to chart over time: the rows alone.
    const raw = await api("/api/v1/query", { table: t.name, series, fields, limit: 100, shape: "series" });
    still(g);
    clearShown();
    say("This table's key has no time field: its rows are below, with nothing to chart over time.");
    return { request: null, chart: null, ...rowsOf(t, raw) };
  }
  let newest = null;
  if (anchoredAtNewest()) {
    // Asked at each draw: points keep arriving after the series was listed.
    // The first row in key order is the newest for newest-first keys.
    const last = await api("/api/v1/query", {
      table: t.name, series, fields, limit: 1, shape: "series", reverse: time.type === "timestamp",
    });
    still(g);
    const v = last.series.length && last.series[0].values.length ? last.series[0].values[0][0] : null;
    newest = v == null ? s.newest_ms : v * unitMs(t);
  }
  const { start, end } = timeRange(newest);
  const downsample = windowMs(t, end - start);
  const request = {
    table: t.name, series, start_ms: start, end_ms: end, fields,
    aggregate: { functions: [fn], downsample_ms: downsample },
  };
  const answer = await api("/api/v1/query", request);
  still(g);
  const raw = await api("/api/v1/query", {
    table: t.name, series, start_ms: start, end_ms: end, fields, limit: 100, shape: "series",
  });
  still(g);
  // Everything arrived: shown together.
  const windows = new Map();
  for (const a of answer.aggregates) {
    const w = windowStartMs(a);
    if (!windows.has(w)) windows.set(w, {});
    windows.get(w)[a.field] = a.values[fn];
  }
  const drawn = chart(windows, fields, `${fn} per ${downsample} ms`);
  const cli = [
    "halite query", `--server ${location.host}`, `--table ${shellQuote(t.name)}`,
    `--series ${shellQuote(series.map(([k, v]) => `${k}=${v}`).join(","))}`,
    `--start ${start}`, `--end ${end}`, `--fields ${shellQuote(fields.join(","))}`,
    `--agg ${fn}`, `--downsample ${downsample}`, "--limit 10000",
  ].join(" ");
  showRequest(`curl -s -X POST http://${location.host}/api/v1/query${curlAuth()} -H 'Content-Type: application/json' -d ${shellQuote(JSON.stringify(request))}`, cli);
  return { request, chart: drawn, ...rowsOf(t, raw) };
}

// A `shape: series` answer's rows on screen, times in ms.
function rowsOf(t, raw) {
  const rows = [];
  const scale = unitMs(t);
  for (const one of raw.series) {
    for (const v of one.values) rows.push([v[0] == null ? null : v[0] * scale, ...v.slice(1)]);
  }
  const columns = raw.series.length ? raw.series[0].columns : ["time"];
  return { rows: showRows(columns, rows, raw.continuation ? "the first 100 of the range" : "") };
}

const quoteIdent = (s) => `"${String(s).replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
const quoteString = (s) => `'${String(s).replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;

async function influxql(db, q) {
  const answer = await api(`/query?${new URLSearchParams({ db, q, epoch: "ms" })}`);
  const result = answer.results && answer.results[0];
  if (result && result.error) throw new ApiError(result.error);
  return (result && result.series) || [];
}

// `WHERE host = 'a'` also matches a series tagged {host: a, region: x}:
// every query groups by all tags and keeps the one whose tags are the
// series' own (a tag the series lacks comes back empty).
const sameTags = (got, want) =>
  Object.entries(got || {}).every(([k, v]) => (Object.hasOwn(want, k) ? want[k] : "") === v) &&
  Object.keys(want).every((k) => got && k in got);
const ofSeries = (series, s) => series.find((one) => sameTags(one.tags, s.tags));

async function drawInfluxQL(t, s, fields, g) {
  const [db, measurement] = t.name.split(":");
  if (s.metric !== measurement) {
    throw new ApiError(`series of metric ${s.metric} live in table ${t.name}: chart them with PromQL (Grafana) or InfluxQL on a measurement table`);
  }
  const where = Object.entries(s.tags).map(([k, v]) => `${quoteIdent(k)} = ${quoteString(v)}`);
  const from = `FROM ${quoteIdent(measurement)}`;
  let newest = null;
  if (anchoredAtNewest()) {
    // The newest point alone, asked at each draw: a read that stops
    // after one point.
    const found = await influxql(db, `SELECT ${quoteIdent(fields[0])} ${from}${where.length ? ` WHERE ${where.join(" AND ")}` : ""} GROUP BY * ORDER BY time DESC LIMIT 1`);
    still(g);
    const one = ofSeries(found, s);
    newest = one && one.values.length ? one.values[0][0] : null;
  }
  const { start, end } = timeRange(newest);
  const fn = $("function").value;
  const call = fn === "avg" ? "mean" : fn;
  const downsample = windowMs(t, end - start);
  const cond = [...where, `time >= ${start}ms`, `time < ${end}ms`].join(" AND ");
  const q = `SELECT ${fields.map((f) => `${call}(${quoteIdent(f)}) AS ${quoteIdent(f)}`).join(", ")} ${from} WHERE ${cond} GROUP BY time(${downsample}ms), * fill(none)`;
  const answer = ofSeries(await influxql(db, q), s);
  still(g);
  const raw = ofSeries(await influxql(db, `SELECT ${fields.map(quoteIdent).join(", ")} ${from} WHERE ${cond} GROUP BY * ORDER BY time DESC LIMIT 100`), s);
  still(g);
  // Everything arrived: shown together.
  const windows = new Map();
  for (const v of answer ? answer.values : []) {
    const w = {};
    answer.columns.forEach((c, i) => { if (i > 0) w[c] = v[i]; });
    windows.set(v[0], w);
  }
  const drawn = chart(windows, fields, `${fn} per ${downsample} ms`);
  showRequest(`curl -s -G http://${location.host}/query${curlAuth()} --data-urlencode ${shellQuote(`db=${db}`)} --data-urlencode 'epoch=ms' --data-urlencode ${shellQuote(`q=${q}`)}`,
    `influx -host ${location.hostname} -port ${location.port || 80} -database ${shellQuote(db)} -execute ${shellQuote(q)}`);
  return {
    request: { db, q },
    chart: drawn,
    rows: showRows(raw ? raw.columns : ["time", ...fields], raw ? raw.values : [], "the newest 100 of the range"),
  };
}

let plot = null;

function chart(windows, fields, what) {
  const xs = [...windows.keys()].sort((a, b) => a - b);
  const data = [xs.map((x) => x / 1000)];
  const values = {};
  for (const f of fields) {
    values[f] = xs.map((x) => (windows.get(x)[f] ?? null));
    data.push(values[f]);
  }
  const box = $("chart");
  if (plot) { plot.destroy(); plot = null; }
  box.replaceChildren();
  const shown = { windows_ms: xs, values, what };
  if (!xs.length) {
    if (what) say("No points in this range: widen it, or end it at the series' newest point.");
    return shown;
  }
  const colours = ["#2a6fdb", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c", "#5c940d"];
  plot = new uPlot({
    width: Math.max(300, box.clientWidth || 800),
    height: 320,
    series: [{}, ...fields.map((f, i) => ({ label: f, stroke: colours[i % colours.length], width: 1.5 }))],
    axes: [{}, { size: 60 }],
  }, data, box);
  say(`${xs.length} windows, ${what}`);
  return shown;
}

// The shown commands name the token by variable, never by value.
const curlAuth = () => (token() ? ` -H "Authorization: Bearer $HALITE_TOKEN"` : "");

function showRequest(curl, cli) {
  $("request").hidden = false;
  $("curl").textContent = curl;
  $("cli").textContent = cli;
}

function showRows(columns, rows, note) {
  $("rows").hidden = false;
  $("rows-note").textContent = note ? `(${note})` : "";
  const table = $("rows-table");
  table.replaceChildren(el("tr", {}, ...columns.map((c) => el("th", {}, c))));
  for (const r of rows) {
    table.append(el("tr", {}, ...r.map((v, i) =>
      el("td", {}, v === null ? "" : i === 0 && columns[0] === "time" ? iso(v) : typeof v === "number" ? number(v) : String(v)))));
  }
  return { columns, rows };
}

// -------------------------------------------------------------- status --

const rateHistory = { t: [], rows: [] };
let statusPlot = null;
let previous = null;
// The status view refreshes every 2 s, one refresh after the other (a slow
// /metrics never overlaps the next); leaving the view ends the loop.
let statusRun = 0;

async function statusLoop(run) {
  // A rate spans two refreshes of this run, never the time away.
  previous = null;
  while (run === statusRun) {
    try {
      await refreshStatus(run);
    } catch (e) {
      $("cards").textContent = e.message;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

async function refreshStatus(run) {
  const ms = await metrics();
  // Left (or left and entered again) while /metrics answered.
  if (run !== statusRun) return;
  const now = Date.now() / 1000;
  // halite's own tables (`__tags`, the dictionaries) are not the user's ingest.
  const rowsWritten = sum(ms, "halite_rows_written_total", (l) => !/:__/.test(l.table || ""));
  const counters = {
    rows: rowsWritten,
    kafka: sum(ms, "halite_kafka_points_total"),
    requests: sum(ms, "halite_http_requests_total"),
    syncs: sum(ms, "halite_wal_syncs_total"),
    walBytes: sum(ms, "halite_wal_written_bytes_total"),
    flushes: sum(ms, "halite_flushes_total"),
    compactions: sum(ms, "halite_compactions_total"),
  };
  const rate = (k) => (previous && now > previous.at ? Math.max(0, (counters[k] - previous.c[k]) / (now - previous.at)) : 0);
  const cards = [
    ["rows written / s", number(Math.round(rate("rows"))), `${number(rowsWritten)} in all`],
    ["from Kafka / s", number(Math.round(rate("kafka"))), `${number(counters.kafka)} points in all`],
    ["HTTP requests / s", number(Math.round(rate("requests") * 10) / 10), ""],
    ["WAL syncs / s", number(Math.round(rate("syncs") * 10) / 10), `${bytes(rate("walBytes"))}/s logged`],
    ["MemStores", bytes(sum(ms, "halite_memstore_bytes")), `${number(counters.flushes)} flushes`],
    ["store files", bytes(sum(ms, "halite_store_file_bytes")), `${number(sum(ms, "halite_store_files"))} files, ${number(counters.compactions)} compactions`],
    ["block cache", bytes(sum(ms, "halite_block_cache_bytes")), hitRatio(ms)],
    ["resident memory", bytes(sum(ms, "halite_process_resident_memory_bytes")), `up ${Math.round(sum(ms, "halite_uptime_seconds"))} s`],
  ];
  $("cards").replaceChildren(...cards.map(([k, v, d]) =>
    el("div", { class: "card", "data-card": k }, el("small", {}, k), el("strong", {}, v), el("span", {}, d))));
  explorer.status = { rows_written: rowsWritten, rows_per_s: rate("rows"), at: now };
  if (previous) {
    rateHistory.t.push(now);
    rateHistory.rows.push(rate("rows"));
    if (rateHistory.t.length > 300) { rateHistory.t.shift(); rateHistory.rows.shift(); }
  }
  previous = { at: now, c: counters };
  statusChart();
  statusTables(ms);
  statusKafka(ms);
}

function hitRatio(ms) {
  const hits = sum(ms, "halite_block_cache_hits_total");
  const misses = sum(ms, "halite_block_cache_misses_total");
  return hits + misses ? `${((100 * hits) / (hits + misses)).toFixed(1)} % hits` : "no reads yet";
}

function statusChart() {
  const box = $("status-chart");
  const data = [rateHistory.t, rateHistory.rows];
  if (!statusPlot) {
    statusPlot = new uPlot({
      width: Math.max(300, box.clientWidth || 800), height: 180,
      // At least the last minute on the axis, from the first refresh on.
      scales: { x: { time: true, range: (u, min, max) => [Math.min(min, max - 60), max + 1] } },
      series: [{}, { label: "rows/s", stroke: "#2a6fdb", width: 1.5, fill: "rgba(42,111,219,0.1)" }],
      axes: [{}, { size: 70 }],
    }, data, box);
  } else {
    statusPlot.setData(data);
  }
}

function statusTables(ms) {
  const names = [...new Set(ms.filter((m) => m.name === "halite_regions").map((m) => m.labels.table))].sort();
  const table = $("status-tables");
  table.replaceChildren(el("tr", {}, ...["table", "regions", "MemStore", "store files", "on disk", "flushes", "write amplification"].map((c) => el("th", {}, c))));
  for (const t of names) {
    const of = (name) => sum(ms, name, (l) => l.table === t);
    table.append(el("tr", {}, ...[t, number(of("halite_regions")), bytes(of("halite_memstore_bytes")),
      number(of("halite_store_files")), bytes(of("halite_store_file_bytes")), number(of("halite_flushes_total")),
      of("halite_write_amplification").toFixed(2)].map((v) => el("td", {}, v))));
  }
}

function statusKafka(ms) {
  const lag = ms.filter((m) => m.name === "halite_kafka_consumer_lag");
  const table = $("status-kafka");
  if (!lag.length) { table.replaceChildren(el("tr", {}, el("td", { class: "muted" }, "No Kafka consumer runs in this process."))); return; }
  table.replaceChildren(el("tr", {}, ...["topic", "partition", "committed", "lag"].map((c) => el("th", {}, c))));
  for (const m of lag.sort((a, b) => a.labels.topic.localeCompare(b.labels.topic) || a.labels.partition - b.labels.partition)) {
    const committed = ms.find((c) => c.name === "halite_kafka_committed_offset" && c.labels.topic === m.labels.topic && c.labels.partition === m.labels.partition);
    table.append(el("tr", {}, ...[m.labels.topic, m.labels.partition, committed ? number(committed.value) : "", number(m.value)].map((v) => el("td", {}, v))));
  }
}

// -------------------------------------------------------------- routing --

function view(name) {
  $("view-data").hidden = name !== "data";
  $("view-status").hidden = name !== "status";
  $("tab-data").classList.toggle("on", name === "data");
  $("tab-status").classList.toggle("on", name === "status");
  const run = ++statusRun;
  if (name === "status") statusLoop(run);
}

async function route() {
  const p = new URLSearchParams(location.hash.slice(1));
  if (p.get("view") === "status") { view("status"); return; }
  view("data");
  // A first visit charts the first table, so a new user sees data at once.
  const name = p.get("table") || (!explorer.table && explorer.tables.length ? explorer.tables[0].name : null);
  if (!name) return;
  const wanted = { series: p.get("series"), fields: p.get("fields"), range: p.get("range"), fn: p.get("fn") };
  const current = chosenSeries();
  if (!explorer.table || explorer.table.name !== name || !current ||
      (wanted.series && wanted.series !== seriesLabel(current))) {
    await selectTable(name, wanted);
    return;
  }
  // The same table and series: fields, range or function may still differ.
  if (location.hash.slice(1) !== stateHash()) {
    if (wanted.fields) showFields(wanted.fields);
    pick($("range"), wanted.range);
    pick($("function"), wanted.fn);
    await draw();
  }
}

async function start() {
  $("server").textContent = location.host;
  $("query-form").addEventListener("submit", (e) => { e.preventDefault(); draw(); });
  $("series").addEventListener("change", () => { showFields(); draw(); });
  $("series-filter").addEventListener("input", () => {
    const f = $("series-filter").value.toLowerCase();
    for (const o of $("series").options) o.hidden = !o.textContent.toLowerCase().includes(f);
  });
  for (const b of document.querySelectorAll("[data-copy]")) {
    b.addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText($(b.dataset.copy).textContent));
  }
  window.addEventListener("hashchange", () => route().catch((e) => say(e.message, true)));
  $("token-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const t = $("token").value.trim();
    if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    $("token-form").hidden = true;
    explorer.error = null;
    say("");
    try {
      await loadTables();
      await route();
    } catch (err) {
      say(err.message, true);
    }
  });
  try {
    await loadTables();
    await route();
  } catch (e) {
    say(e.message, true);
  }
}

start();
