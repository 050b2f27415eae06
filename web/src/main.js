// The drl dashboard page: runs from /api/runs, their CSV rows polled incrementally, uPlot charts.
import uPlot from "uplot";
import {
  averagesAsSeeds, differingKeys, downsampleMinMax, emaSmooth, flattenConfig, groupRuns, groupStats,
  groupTitle, intervalLabel, latestAndBest, plottableColumns, sortRows, tickLabels, toCsv, valueLabel,
} from "./series.js";

const POLL_MS = 1000;
const RUN_LIST_MS = 5000;
const MAX_POINTS = 2000;
const SUMMARY_MS = 10000;  // a run's checkpoint summary (runs table) is fetched again after this
const ALL_METRICS = "all";
// Drawn in the return and success charts, not in the metric grid.
const RETURN_COLUMNS = new Set(["episode_return_mean", "episode_return_min", "episode_return_max",
  "eval_return_mean", "eval_return_std", "eval_env_steps", "success_rate", "eval_success_rate"]);
const PALETTE = ["#2457c5", "#d9480f", "#2b8a3e", "#ae3ec9", "#e67700", "#0b7285", "#c2255c",
  "#5c940d", "#364fc7", "#862e9c", "#a61e4d", "#087f5b"];

const state = {
  runs: [],                 // /api/runs entries
  data: new Map(),          // id -> {columns, rows, offset, generation, error}
  selected: new Set(),
  touched: false,           // the user changed the selection: stop selecting new runs
  dirty: true,
  polling: false,
  charts: [],
  drawn: {},                // run or group name -> return points drawn (tests read it)
  successDrawn: {},         // the same for the success chart
  summaries: new Map(),     // id -> {summary, fetched}: /api/runs/<id>/summary
  sort: { column: "best evaluation", descending: true },
  table: [],                // the runs table's rows as shown (tests read it)
  intervals: new Map(),     // a band's seed values (JSON) -> {low, high}, or "pending"
  groups: { key: "", stats: {}, fetched: 0 },  // /api/groups for the runs shown
};
const MAX_INTERVALS = 400;  // bands kept; the oldest go first
const $ = (id) => document.getElementById(id);

function colorOf(index) { return PALETTE[index % PALETTE.length]; }

async function getJson(url) {
  const response = await fetch(url, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || `${response.status}`);
  return body;
}

async function refreshRuns() {
  try {
    const { runs } = await getJson("/api/runs");
    const known = new Set(state.runs.map((r) => r.id));
    state.runs = runs;
    for (const run of runs) if (!known.has(run.id) && !state.touched) state.selected.add(run.id);
    for (const id of [...state.selected]) if (!runs.some((r) => r.id === id)) state.selected.delete(id);
    renderRunList();
    $("status").textContent = `${runs.length} run(s)`;
  } catch (error) {
    $("status").textContent = `run list: ${error.message}`;
  }
}

async function pollRun(run) {
  const held = state.data.get(run.id) || { columns: [], rows: [], offset: 0, generation: "", error: null };
  const query = `offset=${held.offset}&generation=${encodeURIComponent(held.generation)}`;
  try {
    const chunk = await getJson(`/api/runs/${run.id}/rows?${query}`);
    const rows = chunk.reset ? chunk.rows : held.rows.concat(chunk.rows);
    const changed = chunk.reset || chunk.rows.length > 0 || held.error !== null;
    state.data.set(run.id, { columns: chunk.columns, rows, offset: chunk.offset,
      generation: chunk.generation, error: null });
    if (changed) { state.dirty = true; if (held.error !== null) renderRunList(); }
  } catch (error) {
    if (held.error !== error.message) {
      state.data.set(run.id, { ...held, error: error.message });
      renderRunList();
    }
  }
}

async function pollSelected() {
  // One poll at a time: a slow first load must not be read twice from the same offset.
  if (state.polling) return;
  state.polling = true;
  try {
    const selected = state.runs.filter((r) => state.selected.has(r.id));
    await Promise.all(selected.map(pollRun));
    await Promise.all(selected.map(fetchSummary));
    await fetchGroups(selected);
  } finally {
    state.polling = false;
  }
  if (state.dirty) render();
}

async function fetchSummary(run) {
  const held = state.summaries.get(run.id);
  if (held && Date.now() - held.fetched < SUMMARY_MS) return;
  try {
    const summary = await getJson(`/api/runs/${run.id}/summary`);
    const changed = !held || JSON.stringify(held.summary) !== JSON.stringify(summary);
    state.summaries.set(run.id, { summary, fetched: Date.now() });
    if (changed) state.dirty = true;
  } catch (error) {
    state.summaries.set(run.id, { summary: { config: null, checkpoint_error: error.message }, fetched: Date.now() });
  }
}

// The seed groups' IQM and interval of the runs shown (the runs table), at most every
// SUMMARY_MS or when the runs shown change.
async function fetchGroups(runs) {
  const key = runs.map((r) => r.id).join(",");
  if (key === state.groups.key && Date.now() - state.groups.fetched < SUMMARY_MS) return;
  try {
    const { groups } = await getJson(`/api/groups?runs=${encodeURIComponent(key)}`);
    const changed = JSON.stringify(groups) !== JSON.stringify(state.groups.stats);
    state.groups = { key, stats: groups, fetched: Date.now() };
    if (changed) state.dirty = true;
  } catch (error) {
    state.groups = { key, stats: {}, fetched: Date.now() };
  }
}

// The 95% bootstrap interval of the seeds' mean at each point of a band (the server computes
// it with scipy): {low, high} once known; null while it is asked for, then the page redraws.
function meanIntervals(values) {
  const key = JSON.stringify(values);
  const known = state.intervals.get(key);
  if (known && known !== "pending") return known;
  if (!known) {
    state.intervals.set(key, "pending");
    fetch("/api/intervals", { method: "POST", body: JSON.stringify({ points: values }),
      headers: { "Content-Type": "application/json" } })
      .then((response) => response.json().then((body) => {
        if (!response.ok) throw new Error(body.error || `${response.status}`);
        state.intervals.set(key, body);
        while (state.intervals.size > MAX_INTERVALS) state.intervals.delete(state.intervals.keys().next().value);
        render();
      }))
      .catch((error) => {
        state.intervals.delete(key);
        $("status").textContent = `seed band: ${error.message}`;
      });
  }
  return null;
}

function column(run, name) {
  const held = state.data.get(run.id);
  if (!held) return null;
  const index = held.columns.indexOf(name);
  if (index < 0) return null;
  return held.rows.map((row) => row[index]);
}

function renderRunList() {
  const box = $("runs");
  box.textContent = "";
  let index = 0;
  for (const [group, runs] of groupRuns(state.runs)) {
    const groupBox = document.createElement("div");
    groupBox.className = "group";
    if (runs.length > 1) {
      const title = document.createElement("div");
      title.className = "group-name";
      title.textContent = groupTitle(group, runs);
      groupBox.append(title);
    }
    for (const run of runs) {
      const row = document.createElement("div");
      row.className = "run";
      const box2 = document.createElement("input");
      box2.type = "checkbox";
      box2.checked = state.selected.has(run.id);
      box2.dataset.run = run.id;
      box2.addEventListener("change", () => {
        state.touched = true;
        if (box2.checked) state.selected.add(run.id); else state.selected.delete(run.id);
        state.dirty = true;
        pollSelected();
      });
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colorOf(index);
      run.color = colorOf(index);
      index += 1;
      const link = document.createElement("a");
      link.textContent = run.name;
      link.title = run.csv;
      link.addEventListener("click", () => showRun(run));
      row.append(box2, swatch, link);
      if (run.note) {  // a search trial: its objective and state, its values on hover
        const note = document.createElement("span");
        note.className = "run-note";
        note.textContent = run.note;
        note.title = Object.entries(run.values || {}).map(([k, v]) => `${k} = ${v}`).join("\n");
        row.append(note);
      }
      groupBox.append(row);
      const held = state.data.get(run.id);
      if (held && held.error) {
        const error = document.createElement("div");
        error.className = "run-error";
        error.textContent = held.error;
        groupBox.append(error);
      }
    }
    box.append(groupBox);
  }
  updateMetricChoices();
}

function updateMetricChoices() {
  const select = $("metric");
  const columns = new Set();
  for (const held of state.data.values()) for (const c of plottableColumns(held.columns)) columns.add(c);
  const wanted = [ALL_METRICS, ...[...columns].filter((c) => !RETURN_COLUMNS.has(c))];
  const current = select.value;
  const existing = [...select.options].map((o) => o.value);
  if (wanted.join() === existing.join()) return;
  select.textContent = "";
  for (const name of wanted) {
    const option = document.createElement("option");
    option.value = name;
    option.textContent = name === ALL_METRICS ? "all (a grid)" : name;
    select.append(option);
  }
  select.value = wanted.includes(current) ? current : (wanted.includes("Loss/value") ? "Loss/value" : ALL_METRICS);
}

// One line (and optionally a band) per run, or per seed group: [{label, color, xs, ys, lo, hi}].
// options.x: the x column when the x axis is env steps (evaluations: the evaluated weights' step);
// options.suffix: after each label; options.dash: a dashed line.
function lines(yName, loName, hiName, options = {}) {
  const chosen = $("x-axis").value;
  const xName = chosen === "env_steps" && options.x ? options.x : chosen;
  const suffix = options.suffix || "";
  const weight = Number($("smoothing").value);
  const grouping = $("group-seeds").checked;
  const selected = state.runs.filter((r) => state.selected.has(r.id) && state.data.has(r.id));
  const result = [];
  for (const [group, runs] of groupRuns(selected)) {
    const series = runs.map((run) => ({ run, xs: column(run, xName), ys: column(run, yName) }))
      .filter((s) => s.xs && s.ys);
    if (series.length === 0) continue;
    if (grouping && averagesAsSeeds(series.map((s) => s.run))) {
      const stats = groupStats(series.map((s) => ({ xs: s.xs, ys: emaSmooth(s.ys, weight) })));
      const line = { label: `${group} (${series.length} seeds)${suffix}`, color: series[0].run.color,
        xs: stats.xs, ys: stats.mean, lo: stats.min, hi: stats.max, dash: options.dash,
        edges: ["min", "max"] };
      if ($("band").value === "interval") {
        const interval = meanIntervals(stats.values);
        Object.assign(line, { lo: interval && interval.low, hi: interval && interval.high,
          edges: ["95% low", "95% high"] });
      }
      result.push(line);
      continue;
    }
    for (const s of series) {
      const lo = loName ? column(s.run, loName) : null;
      const hi = hiName ? column(s.run, hiName) : null;
      result.push({ label: `${s.run.name}${suffix}`, color: s.run.color, xs: s.xs,
        ys: emaSmooth(s.ys, weight), lo: lo ? emaSmooth(lo, weight) : null,
        hi: hi ? emaSmooth(hi, weight) : null, dash: options.dash });
    }
  }
  return result;
}

function chart(target, title, drawn, log, height = 300, small = false) {
  const xName = $("x-axis").value;
  const tables = [];
  const series = [{ label: xName === "env_steps" ? "env steps" : "wall time (s)" }];
  const bands = [];
  for (const line of drawn) {
    const ys = [line.ys];
    if (line.lo && line.hi) ys.push(line.lo, line.hi);
    const cleaned = ys.map((y) => y.map((v) => (v === null || (log && !(v > 0)) ? null : v)));
    const ordered = line.xs.map((x, i) => [x, i]).filter(([x]) => x !== null).sort((a, b) => a[0] - b[0]);
    const xs = ordered.map(([x]) => x);
    const aligned = cleaned.map((y) => ordered.map(([, i]) => y[i]));
    tables.push(downsampleMinMax(xs, aligned, MAX_POINTS));
    const base = series.length;
    series.push({ label: line.label, stroke: line.color, width: 2, spanGaps: true,
      dash: line.dash ? [6, 4] : undefined, points: { show: line.xs.length < 60 },
      value: (u, v) => valueLabel(v) });
    if (line.lo && line.hi) {
      for (const edge of line.edges || ["min", "max"]) {
        series.push({ label: `${line.label} ${edge}`, stroke: "transparent", spanGaps: true,
          bandEdge: true, value: (u, v) => valueLabel(v) });
      }
      bands.push({ series: [base + 2, base + 1], fill: `${line.color}22` });
    }
  }
  const data = tables.length ? uPlot.join(tables) : [[]];
  const width = Math.max(320, target.clientWidth || 800);
  target.textContent = "";
  const options = {
    title, width, height, series, bands,
    padding: [8, 36, 0, 8], // room for the last x label
    scales: { x: { time: false }, y: log ? { distr: 3 } : {} },
    // Log axes keep uPlot's labels (powers of ten); linear ones show small values right.
    axes: [{}, { size: 60, values: log ? undefined : (u, splits) => tickLabels(splits) }],
    legend: { show: !small, live: true },
    cursor: { drag: { x: true, y: false } },
  };
  const plot = new uPlot(options, data, target);
  // The band's edges are read out on hover with their line's entry hidden from the legend.
  plot.root.querySelectorAll(".u-legend .u-series").forEach((row, i) => {
    if (series[i] && series[i].bandEdge) row.style.display = "none";
  });
  return plot;
}

// A chart with its name and its downloads (the drawn data as CSV, the chart as PNG) in box.
// small: a grid cell (no legend: values of the lines under the cursor would crowd it).
function chartBox(box, name, drawn, log, height, small = false) {
  const head = document.createElement("div");
  head.className = "chart-tools";
  const title = document.createElement("span");
  title.className = "chart-name";
  title.textContent = name;
  const target = document.createElement("div");
  box.append(head, target);  // in the page first: the chart takes its width
  const plot = chart(target, "", drawn, log, height, small);
  const entry = { name, plot };
  const csv = document.createElement("button");
  csv.textContent = "CSV";
  csv.title = "download the drawn data";
  csv.addEventListener("click", () => download(`${fileName(name)}.csv`, new Blob([chartCsv(entry)], { type: "text/csv" })));
  const png = document.createElement("button");
  png.textContent = "PNG";
  png.title = "download the chart";
  png.addEventListener("click", () => plot.ctx.canvas.toBlob((blob) => download(`${fileName(name)}.png`, blob)));
  head.append(title, csv, png);
  state.charts.push(entry);
  return plot;
}

function fileName(name) { return name.replace(/[^A-Za-z0-9_.-]+/g, "_"); }

function download(name, blob) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

// The data a chart draws (after smoothing and downsampling), x then each line: CSV text.
function chartCsv(entry) {
  const { data, series } = entry.plot;
  return toCsv(series.map((s) => s.label), data.map((values) => Array.from(values)));
}

function render() {
  state.dirty = false;
  for (const c of state.charts) c.plot.destroy();
  state.charts = [];
  updateMetricChoices();
  const log = $("log-scale").checked;
  const returns = lines("episode_return_mean", "episode_return_min", "episode_return_max");
  const evaluations = lines("eval_return_mean", null, null,
    { x: "eval_env_steps", suffix: " (evaluation)", dash: true });
  const drawn = [...returns, ...evaluations];
  state.drawn = Object.fromEntries(drawn.map((l) => [l.label, l.ys.filter((v) => v !== null).length]));
  $("return-chart").textContent = "";
  chartBox($("return-chart"), "episode return", drawn, log, 300);
  const successes = [...lines("success_rate", null, null), ...lines("eval_success_rate", null, null,
    { x: "eval_env_steps", suffix: " (evaluation)", dash: true })];
  state.successDrawn = Object.fromEntries(
    successes.map((l) => [l.label, l.ys.filter((v) => v !== null).length]));
  $("success-box").hidden = successes.length === 0;
  $("success-chart").textContent = "";
  if (successes.length) chartBox($("success-chart"), "success rate", successes, false, 220);
  const metric = $("metric").value;
  const grid = $("metric-charts");
  grid.textContent = "";
  const names = metric === ALL_METRICS
    ? [...$("metric").options].map((o) => o.value).filter((v) => v !== ALL_METRICS) : [metric];
  $("metric-title").textContent = metric === ALL_METRICS ? `every metric (${names.length})` : metric || "metric";
  grid.style.gridTemplateColumns = names.length > 1 ? "" : "1fr";
  for (const name of names.filter(Boolean)) {
    const cell = document.createElement("div");
    grid.append(cell);
    const small = names.length > 1;
    chartBox(cell, name, lines(name, null, null), log, small ? 200 : 300, small);
  }
  renderTable();
}

// The runs table: one row per run shown, with the config values that differ between them.
function renderTable() {
  const runs = state.runs.filter((r) => state.selected.has(r.id) && state.data.has(r.id));
  const configs = runs.map((r) => (state.summaries.get(r.id) || { summary: {} }).summary.config || null);
  const keys = differingKeys(configs);
  const flats = configs.map((c) => (c ? flattenConfig(c) : {}));
  const rows = runs.map((run, i) => {
    const config = configs[i] || {};
    const evaluation = latestAndBest(column(run, "eval_return_mean"));
    const steps = latestAndBest(column(run, "env_steps")).latest;
    const wall = latestAndBest(column(run, "wall_time_s")).latest;
    const row = {
      run: run.name, algo: config.algo || "", env: (config.env && config.env.id) || "",
      "latest evaluation": evaluation.latest, "best evaluation": evaluation.best,
      "group IQM [95% interval]": intervalLabel(state.groups.stats[run.group]),
      "env steps": steps, "wall time (s)": wall === null ? null : Math.round(wall),
    };
    for (const key of keys) row[key] = key in flats[i] ? JSON.parse(flats[i][key]) : null;
    return row;
  });
  const columns = ["run", "algo", "env", ...keys, "latest evaluation", "best evaluation",
    ...(rows.some((row) => row["group IQM [95% interval]"]) ? ["group IQM [95% interval]"] : []),
    "env steps", "wall time (s)"];
  const sorted = sortRows(rows, columns.includes(state.sort.column) ? state.sort.column : "run", state.sort.descending);
  state.table = sorted.map((row) => columns.map((c) => row[c]));
  const table = $("runs-table");
  table.textContent = "";
  const head = document.createElement("tr");
  for (const name of columns) {
    const th = document.createElement("th");
    th.textContent = name;
    if (name === state.sort.column) th.className = state.sort.descending ? "sorted" : "sorted ascending";
    th.addEventListener("click", () => {
      state.sort = { column: name, descending: state.sort.column === name ? !state.sort.descending : true };
      renderTable();
    });
    head.append(th);
  }
  table.append(head);
  for (const row of sorted) {
    const tr = document.createElement("tr");
    for (const name of columns) {
      const td = document.createElement("td");
      const value = row[name];
      if (typeof value === "number") {
        td.className = "number";
        td.textContent = Number.isInteger(value) ? String(value) : valueLabel(value);
      } else {
        td.textContent = value === null || value === undefined ? "-" : typeof value === "string" ? value : JSON.stringify(value);
      }
      tr.append(td);
    }
    table.append(tr);
  }
}

async function showRun(run) {
  const page = $("run-page");
  page.hidden = false;
  $("run-title").textContent = `run ${run.name}`;
  $("run-summary").textContent = "loading...";
  try {
    const details = await getJson(`/api/runs/${run.id}/details`);
    const returns = column(run, "episode_return_mean") || [];
    const latest = [...returns].reverse().find((v) => v !== null);
    const parts = [`metrics ${details.csv}`];
    parts.push(`latest return ${latest === undefined ? "-" : latest.toFixed(1)}`);
    parts.push(`best return ${details.best_return === null ? "-" : details.best_return.toFixed(1)}`);
    if (details.progress) parts.push(`${details.progress.env_steps} env steps in ${details.progress.round} rounds`);
    if (details.checkpoint_error) parts.push(details.checkpoint_error);
    $("run-summary").textContent = parts.join(" · ");
    $("run-semantics").textContent = JSON.stringify(details.actor_semantics, null, 2);
    $("run-config").textContent = JSON.stringify(details.config, null, 2);
    const audit = $("run-audit");
    audit.textContent = "";
    for (const check of (details.audit && details.audit.checks) || []) {
      const tr = document.createElement("tr");
      for (const [text, cls] of [[check.name, ""], [check.status, check.status], [check.detail, ""]]) {
        const td = document.createElement("td");
        td.textContent = text;
        if (cls) td.className = cls;
        tr.append(td);
      }
      audit.append(tr);
    }
    const video = $("run-video");
    if (details.videos.length) {
      video.src = `/api/runs/${run.id}/video/${encodeURIComponent(details.videos[0])}`;
      video.hidden = false;
    } else {
      video.hidden = true;
      video.removeAttribute("src");
    }
  } catch (error) {
    $("run-summary").textContent = `details: ${error.message}`;
  }
}

function bindControls() {
  for (const id of ["x-axis", "metric", "log-scale", "group-seeds", "band"]) {
    $(id).addEventListener("change", () => { state.dirty = true; render(); });
  }
  $("smoothing").addEventListener("input", () => {
    $("smoothing-value").textContent = Number($("smoothing").value).toFixed(2);
    state.dirty = true;
    render();
  });
  window.addEventListener("resize", () => { state.dirty = true; render(); });
}

// For tests and benchmarks: what the return chart drew.
window.drlDashboard = {
  returnPoints: () => ({ ...state.drawn }),
  successPoints: () => ({ ...state.successDrawn }),
  runs: () => state.runs.map((r) => r.name),
  charts: () => state.charts.map((c) => c.name),
  chartCsv: (name) => chartCsv(state.charts.find((c) => c.name === name)),
  chartPng: (name) => state.charts.find((c) => c.name === name).plot.ctx.canvas.toDataURL("image/png"),
  table: () => ({ columns: [...$("runs-table").querySelectorAll("th")].map((th) => th.textContent), rows: state.table }),
};

async function main() {
  bindControls();
  await refreshRuns();
  await pollSelected();
  render();
  setInterval(refreshRuns, RUN_LIST_MS);
  setInterval(pollSelected, POLL_MS);
}

main();
