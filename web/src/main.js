// The drl dashboard page: runs from /api/runs, their CSV rows polled incrementally, uPlot charts.
import uPlot from "uplot";
import {
  averagesAsSeeds, downsampleMinMax, emaSmooth, groupRuns, groupStats, groupTitle, plottableColumns,
} from "./series.js";

const POLL_MS = 1000;
const RUN_LIST_MS = 5000;
const MAX_POINTS = 2000;
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
};
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
    await Promise.all(state.runs.filter((r) => state.selected.has(r.id)).map(pollRun));
  } finally {
    state.polling = false;
  }
  if (state.dirty) render();
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
  const wanted = [...columns].filter((c) => !c.startsWith("episode_return"));
  const current = select.value;
  const existing = [...select.options].map((o) => o.value);
  if (wanted.join() === existing.join()) return;
  select.textContent = "";
  for (const name of wanted) {
    const option = document.createElement("option");
    option.value = option.textContent = name;
    select.append(option);
  }
  select.value = wanted.includes(current) ? current : (wanted.includes("Loss/value") ? "Loss/value" : wanted[0] || "");
}

// One line (and optionally a band) per run, or per seed group: [{label, color, xs, ys, lo, hi}].
function lines(yName, loName, hiName) {
  const xName = $("x-axis").value;
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
      result.push({ label: `${group} (${series.length} seeds)`, color: series[0].run.color,
        xs: stats.xs, ys: stats.mean, lo: stats.min, hi: stats.max });
      continue;
    }
    for (const s of series) {
      const lo = loName ? column(s.run, loName) : null;
      const hi = hiName ? column(s.run, hiName) : null;
      result.push({ label: s.run.name, color: s.run.color, xs: s.xs, ys: emaSmooth(s.ys, weight),
        lo: lo ? emaSmooth(lo, weight) : null, hi: hi ? emaSmooth(hi, weight) : null });
    }
  }
  return result;
}

function chart(target, title, drawn, log) {
  const xName = $("x-axis").value;
  const tables = [];
  const series = [{ label: xName === "env_steps" ? "env steps" : "wall time (s)" }];
  const bands = [];
  for (const line of drawn) {
    const ys = [line.ys];
    if (line.lo && line.hi) ys.push(line.lo, line.hi);
    const cleaned = ys.map((y) => y.map((v) => (log && !(v > 0) ? null : v)));
    const ordered = line.xs.map((x, i) => [x, i]).filter(([x]) => x !== null).sort((a, b) => a[0] - b[0]);
    const xs = ordered.map(([x]) => x);
    const aligned = cleaned.map((y) => ordered.map(([, i]) => y[i]));
    tables.push(downsampleMinMax(xs, aligned, MAX_POINTS));
    const base = series.length;
    series.push({ label: line.label, stroke: line.color, width: 2, spanGaps: true });
    if (line.lo && line.hi) {
      series.push({ label: `${line.label} min`, stroke: "transparent", spanGaps: true, bandEdge: true });
      series.push({ label: `${line.label} max`, stroke: "transparent", spanGaps: true, bandEdge: true });
      bands.push({ series: [base + 2, base + 1], fill: `${line.color}22` });
    }
  }
  const data = tables.length ? uPlot.join(tables) : [[]];
  const width = Math.max(320, target.clientWidth || 800);
  target.textContent = "";
  const options = {
    title, width, height: 300, series, bands,
    padding: [8, 36, 0, 8], // room for the last x label
    scales: { x: { time: false }, y: log ? { distr: 3 } : {} },
    axes: [{}, { size: 60 }],
    legend: { live: true },
    cursor: { drag: { x: true, y: false } },
  };
  const plot = new uPlot(options, data, target);
  // The band's edges are read out on hover with their line's entry hidden from the legend.
  plot.root.querySelectorAll(".u-legend .u-series").forEach((row, i) => {
    if (series[i] && series[i].bandEdge) row.style.display = "none";
  });
  return plot;
}

function render() {
  state.dirty = false;
  for (const c of state.charts) c.destroy();
  state.charts = [];
  updateMetricChoices();
  const log = $("log-scale").checked;
  const returns = lines("episode_return_mean", "episode_return_min", "episode_return_max");
  state.drawn = Object.fromEntries(returns.map((l) => [l.label, l.ys.filter((v) => v !== null).length]));
  state.charts.push(chart($("return-chart"), "", returns, log));
  const metric = $("metric").value;
  $("metric-title").textContent = metric || "metric";
  if (metric) state.charts.push(chart($("metric-chart"), "", lines(metric, null, null), log));
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
  for (const id of ["x-axis", "metric", "log-scale", "group-seeds"]) {
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
  runs: () => state.runs.map((r) => r.name),
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
