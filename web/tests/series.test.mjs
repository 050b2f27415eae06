import assert from "node:assert/strict";
import { test } from "node:test";
import {
  averagesAsSeeds, differingKeys, downsampleMinMax, emaSmooth, groupRuns, groupStats, groupTitle,
  intervalLabel, latestAndBest, sortRows, tickLabels, toCsv, valueLabel,
} from "../src/series.js";

test("debiased EMA: the first value is kept, then values are averaged", () => {
  assert.deepEqual(emaSmooth([1, 2, 3], 0), [1, 2, 3]);
  const smoothed = emaSmooth([10, 0, null, 0], 0.5);
  assert.equal(smoothed[0], 10); // debiased: not 5
  assert.ok(Math.abs(smoothed[1] - (0.5 * 5 + 0) / 0.75) < 1e-12); // (5 * 0.5) / (1 - 0.25)
  assert.equal(smoothed[2], null);
  assert.ok(smoothed[3] < smoothed[1]);
});

test("min/max downsampling keeps spikes and bounds the size", () => {
  const xs = Array.from({ length: 10000 }, (_, i) => i);
  const ys = xs.map((x) => (x === 5000 ? 100 : x === 7000 ? -100 : 0));
  const [dx, dy] = downsampleMinMax(xs, [ys], 2000);
  assert.ok(dx.length <= 2000 && dx.length > 900);
  assert.ok(dy.includes(100) && dy.includes(-100));
  for (let i = 1; i < dx.length; i += 1) assert.ok(dx[i] > dx[i - 1]);
  const [same] = downsampleMinMax([1, 2, 3], [[1, 2, 3]], 2000);
  assert.deepEqual(same, [1, 2, 3]);
});

test("seed groups: mean, min and max on the union of x", () => {
  const stats = groupStats([
    { xs: [1, 2], ys: [1, 3] },
    { xs: [1, 2, 3], ys: [3, 5, 7] },
  ]);
  assert.deepEqual(stats.xs, [1, 2, 3]);
  assert.deepEqual(stats.mean, [2, 4, 7]);
  assert.deepEqual(stats.values, [[1, 3], [3, 5], [7]]); // what a point's interval resamples
  assert.deepEqual(stats.min, [1, 3, 7]);
  assert.deepEqual(stats.max, [3, 5, 7]);
  const groups = groupRuns([
    { id: "a", group: "hopper" },
    { id: "b", group: "cheetah" },
    { id: "c", group: "hopper" },
  ]);
  assert.deepEqual([...groups.keys()], ["hopper", "cheetah"]);
  assert.deepEqual(groups.get("hopper").map((r) => r.id), ["a", "c"]);
});

test("a search's trials are a group of trials, never averaged as seeds", () => {
  const seeds = [{ group: "hopper", group_kind: "seeds" }, { group: "hopper", group_kind: "seeds" }];
  const trials = [{ group: "search x", group_kind: "trials" }, { group: "search x", group_kind: "trials" }];
  assert.equal(groupTitle("hopper", seeds), "hopper (2 seeds)");
  assert.equal(groupTitle("search x", trials), "search x (2 trials)");
  assert.equal(averagesAsSeeds(seeds), true);
  assert.equal(averagesAsSeeds(trials), false);
  assert.equal(averagesAsSeeds(seeds.slice(0, 1)), false);
});

test("the runs table: configs' differing keys, sorting, CSV, latest and best", () => {
  const a = { name: "a", algo: "ppo", env: { id: "Hopper-v5", seed: 0 }, algo_params: { lr: 3e-4, sizes: [64, 64] } };
  const b = { name: "b", algo: "ppo", env: { id: "Hopper-v5", seed: 1 }, algo_params: { lr: 1e-3, sizes: [64, 64] } };
  const c = { name: "c", algo: "ppo", env: { id: "Hopper-v5", seed: 0 }, algo_params: { lr: 3e-4, sizes: [256, 256], extra: 1 } };
  assert.deepEqual(differingKeys([a, b]), ["env.seed", "algo_params.lr"]);
  assert.deepEqual(differingKeys([a, c]), ["algo_params.sizes", "algo_params.extra"]);
  assert.deepEqual(differingKeys([a, null]), []);
  const rows = [{ n: "x", v: 2 }, { n: "y", v: null }, { n: "z", v: 10 }];
  assert.deepEqual(sortRows(rows, "v", false).map((r) => r.n), ["x", "z", "y"]);
  assert.deepEqual(sortRows(rows, "v", true).map((r) => r.n), ["z", "x", "y"]);
  assert.deepEqual(sortRows(rows, "n", true).map((r) => r.n), ["z", "y", "x"]);
  assert.equal(toCsv(["x", "a,b"], [[1, 2], [null, 'say "hi"']]), 'x,"a,b"\n1,\n2,"say ""hi"""\n');
  assert.deepEqual(latestAndBest([null, 3, 9, 4, null]), { latest: 4, best: 9 });
  assert.deepEqual(latestAndBest([null]), { latest: null, best: null });
});

test("tick labels keep small and large values apart and plain ones short", () => {
  // A learning rate's axis: uPlot's 3-decimal default read "0", "0.001", "0.001".
  assert.deepEqual(tickLabels([0, 0.00025, 0.0005, 0.00075]), ["0", "2.5e-4", "5.0e-4", "7.5e-4"]);
  assert.deepEqual(tickLabels([1e-5, 2e-5, 3e-5]), ["1e-5", "2e-5", "3e-5"]);
  assert.deepEqual(tickLabels([0, 0.25, 0.5, 0.75]), ["0", "0.25", "0.50", "0.75"]);
  assert.deepEqual(tickLabels([-200, 0, 200, 400]), ["-200", "0", "200", "400"]);
  assert.deepEqual(tickLabels([0.9, 0.95, 1, 1.05]), ["0.90", "0.95", "1.00", "1.05"]);
  assert.deepEqual(tickLabels([0, 500000, 1000000]), ["0", "5e+5", "1e+6"]);
  assert.deepEqual(tickLabels([0.1 + 0.2, 0.4]), ["0.3", "0.4"]); // float noise is no digit
  assert.deepEqual(tickLabels([null, 3]), ["", "3"]);
  for (const splits of [[1e-7, 1.5e-7, 2e-7], [3000, 3000.5, 3001], [0.0123, 0.0124]]) {
    const labels = tickLabels(splits);
    assert.equal(new Set(labels).size, labels.length, labels.join(" "));
  }
});

test("a value under the cursor keeps four significant digits at any size", () => {
  assert.equal(valueLabel(2.5e-5), "2.5e-5");
  assert.equal(valueLabel(0.012345), "0.01235");
  assert.equal(valueLabel(3245.1234), "3245");
  assert.equal(valueLabel(-0.5), "-0.5");
  assert.equal(valueLabel(0), "0");
  assert.equal(valueLabel(1234567), "1.235e+6");
  assert.equal(valueLabel(null), "--");
  assert.equal(valueLabel(Number.NaN), "--");
});

test("a group's IQM and interval as the runs table shows it", () => {
  assert.equal(intervalLabel({ iqm: 3257.8, low: 2768.9, high: 3430.2 }), "3258 [2769, 3430]");
  assert.equal(intervalLabel({ iqm: -0.34003, low: -0.3456, high: -0.33 }), "-0.34 [-0.3456, -0.33]");
  assert.equal(intervalLabel(undefined), null);
});
