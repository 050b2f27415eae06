// Pure functions on series: smoothing, downsampling, seed groups. No DOM (tested with node).

/** Debiased exponential moving average (TensorBoard's): weight 0 leaves the values as they are.
 * Missing values (null) stay missing and do not move the average. */
export function emaSmooth(values, weight) {
  if (!(weight > 0)) return values.slice();
  let last = 0;
  let count = 0;
  return values.map((value) => {
    if (value === null || !Number.isFinite(value)) return null;
    last = last * weight + (1 - weight) * value;
    count += 1;
    return last / (1 - Math.pow(weight, count));
  });
}

/** At most about maxPoints points: the x range is cut into buckets and each keeps the points of
 * its lowest and highest y (in x order), so spikes survive. Returns [xs, ...ys] like the input;
 * bucket extremes are chosen on the first y series. */
export function downsampleMinMax(xs, ys, maxPoints) {
  const n = xs.length;
  if (n <= maxPoints || maxPoints < 4) return [xs, ...ys];
  const buckets = Math.floor(maxPoints / 2);
  const keep = [];
  const first = ys[0];
  for (let b = 0; b < buckets; b += 1) {
    const start = Math.floor((b * n) / buckets);
    const end = Math.floor(((b + 1) * n) / buckets);
    let low = -1;
    let high = -1;
    for (let i = start; i < end; i += 1) {
      const v = first[i];
      if (v === null || !Number.isFinite(v)) continue;
      if (low < 0 || v < first[low]) low = i;
      if (high < 0 || v > first[high]) high = i;
    }
    if (low < 0) {
      keep.push(start);
      continue;
    }
    if (low === high) keep.push(low);
    else keep.push(Math.min(low, high), Math.max(low, high));
  }
  return [keep.map((i) => xs[i]), ...ys.map((y) => keep.map((i) => y[i]))];
}

/** Seeds of one group on a common x axis: for every x any seed has, the mean, min and max of
 * the seeds that have a value there, and those values (for their bootstrap interval).
 * series: [{xs, ys}] with xs ascending. */
export function groupStats(series) {
  const byX = new Map();
  for (const { xs, ys } of series) {
    xs.forEach((x, i) => {
      const y = ys[i];
      if (x === null || y === null || !Number.isFinite(y)) return;
      if (!byX.has(x)) byX.set(x, []);
      byX.get(x).push(y);
    });
  }
  const xs = [...byX.keys()].sort((a, b) => a - b);
  const mean = [];
  const min = [];
  const max = [];
  const values = [];
  for (const x of xs) {
    const here = byX.get(x);
    mean.push(here.reduce((a, b) => a + b, 0) / here.length);
    min.push(Math.min(...here));
    max.push(Math.max(...here));
    values.push(here);
  }
  return { xs, mean, min, max, values };
}

/** A group's IQM and interval as the runs table shows it: "3258 [2769, 3430]". */
export function intervalLabel(stats) {
  if (!stats) return null;
  const figure = (v) => (Math.abs(v) >= 1000 ? v.toFixed(0) : Number(v.toPrecision(4)).toString());
  return `${figure(stats.iqm)} [${figure(stats.low)}, ${figure(stats.high)}]`;
}

/** The runs' groups: runs sharing a group name (their seeds) together, in first-seen order. */
export function groupRuns(runs) {
  const groups = new Map();
  for (const run of runs) {
    if (!groups.has(run.group)) groups.set(run.group, []);
    groups.get(run.group).push(run);
  }
  return groups;
}

/** The columns worth plotting: every numeric column but the axes and the round counter. */
export function plottableColumns(columns) {
  const skip = new Set(["round", "env_steps", "wall_time_s"]);
  return columns.filter((c) => !skip.has(c));
}

/** A group's heading: a search's trials are counted as trials, other groups as seeds. */
export function groupTitle(group, runs) {
  const kind = runs[0] && runs[0].group_kind === "trials" ? "trials" : "seeds";
  return `${group} (${runs.length} ${kind})`;
}

/** Whether a group's runs may be drawn as one mean line with a band: seeds of one config, not
 * a search's trials (different values, not repetitions). */
export function averagesAsSeeds(runs) {
  return runs.length > 1 && runs.every((run) => run.group_kind !== "trials");
}

/** A config as dotted keys -> JSON text of each leaf (lists are leaves). */
export function flattenConfig(config, prefix = "") {
  const flat = {};
  if (config === null || typeof config !== "object" || Array.isArray(config)) {
    flat[prefix] = JSON.stringify(config);
    return flat;
  }
  const keys = Object.keys(config);
  if (keys.length === 0 && prefix) flat[prefix] = "{}";
  for (const key of keys) Object.assign(flat, flattenConfig(config[key], prefix ? `${prefix}.${key}` : key));
  return flat;
}

// Keys that name where a run writes, not what it trains.
const OWN_KEYS = new Set(["name", "output_dir", "metrics_path"]);

/** The config keys whose values differ between the configs (a key one of them lacks differs),
 * in first-seen order; missing configs (null) are left out. */
export function differingKeys(configs) {
  const flats = configs.filter((c) => c).map((c) => flattenConfig(c));
  if (flats.length < 2) return [];
  const keys = [];
  for (const flat of flats) for (const key of Object.keys(flat)) if (!keys.includes(key)) keys.push(key);
  return keys.filter((key) => !OWN_KEYS.has(key) && !key.startsWith("logging.")
    && new Set(flats.map((flat) => (key in flat ? flat[key] : "\u0000missing"))).size > 1);
}

/** Rows sorted by one column: numbers as numbers, other values as text, empty ones last. */
export function sortRows(rows, column, descending) {
  const empty = (v) => v === null || v === undefined || v === "";
  return rows.slice().sort((a, b) => {
    const x = a[column];
    const y = b[column];
    if (empty(x) || empty(y)) return empty(x) - empty(y);
    const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return descending ? -order : order;
  });
}

/** CSV text of columns of equal length under a header; cells with a comma, quote or newline
 * are quoted; null is an empty cell. */
export function toCsv(header, columns) {
  const cell = (v) => {
    if (v === null || v === undefined) return "";
    const text = String(v);
    return /[",\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
  };
  const lines = [header.map(cell).join(",")];
  const length = columns.length ? columns[0].length : 0;
  for (let i = 0; i < length; i += 1) lines.push(columns.map((c) => cell(c[i])).join(","));
  return `${lines.join("\n")}\n`;
}

/** The last and the largest of the values that are numbers (null when none). */
export function latestAndBest(values) {
  const numbers = (values || []).filter((v) => v !== null && Number.isFinite(v));
  if (!numbers.length) return { latest: null, best: null };
  return { latest: numbers[numbers.length - 1], best: Math.max(...numbers) };
}

/** Labels for a linear axis's ticks: the fewest digits that still tell each tick's value to
 * within a thousandth of the tick spacing, in exponent form for values below 1e-3 or from 1e5
 * on. (uPlot's default format keeps 3 decimals: ticks at 2.5e-4, 5e-4 and 7.5e-4 read "0",
 * "0.001", "0.001".) */
export function tickLabels(splits) {
  const values = splits.filter((v) => v !== null && Number.isFinite(v));
  const sorted = [...new Set(values)].sort((a, b) => a - b);
  const gaps = sorted.slice(1).map((v, i) => v - sorted[i]);
  const largest = Math.max(0, ...values.map(Math.abs));
  const step = gaps.length ? Math.min(...gaps) : largest || 1;
  const exponent = largest >= 1e5 || (largest > 0 && largest < 1e-3);
  const write = (v, digits) => (v === 0 ? "0" : exponent ? v.toExponential(digits) : v.toFixed(digits));
  let digits = 0;
  while (digits < 15 && values.some((v) => Math.abs(Number(write(v, digits)) - v) > step * 1e-3)) {
    digits += 1;
  }
  return splits.map((v) => (v === null || !Number.isFinite(v) ? "" : write(v, digits)));
}

/** A value read out under the cursor: four significant digits, in exponent form below 1e-3
 * and from 1e6 on ("--" for none). (uPlot's default keeps 3 decimals: 2.5e-5 read "0".) */
export function valueLabel(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "--";
  const size = Math.abs(v);
  if (v === 0 || (size >= 1e-3 && size < 1e6)) return String(Number(v.toPrecision(4)));
  const [mantissa, exponent] = v.toExponential(3).split("e");
  return `${String(Number(mantissa))}e${exponent}`;
}
