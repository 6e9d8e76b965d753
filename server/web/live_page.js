// The live page: polls api/timeline once a second and draws it with uPlot.
// After the first answer it asks only for the points after the last one
// it has (since=, the answer's "next") and appends them, keeping the
// daemon's `capacity` points. The charts are kept in window.batchdCharts
// (id -> uPlot) for tests.
"use strict";

const POLL_MS = 1000;
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];
const charts = {};
window.batchdCharts = charts;
window.batchdPolls = 0;

function color(i) { return COLORS[i % COLORS.length]; }

function bytes(v) {
  if (v == null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v.toFixed(0)) + " " + units[i];
}

// Each chart: title, what it shows, and from a timeline its series
// ([{label, stroke, dash, scale}]) and columns (aligned on t).
const SPECS = [
  {
    id: "throughput", title: "Images/s per job, trainer demand and capacity",
    help: "solid: images/s sent; dashed: what the job's trainers would " +
          "take if they never waited; grey: what this daemon can decode " +
          "at its most workers",
    build(d) {
      const series = [], cols = [];
      d.jobs.forEach((j, i) => {
        series.push({label: j.job + " images/s", stroke: color(i)});
        cols.push(j.images_per_second);
        series.push({label: j.job + " demand", stroke: color(i), dash: [6, 4]});
        cols.push(j.demand_images_per_second);
      });
      series.push({label: "capacity", stroke: "#888", dash: [2, 3]});
      cols.push(d.capacity_images_per_second);
      return {series, cols};
    },
  },
  {
    id: "trainers", title: "Trainer time per job: waiting for input, computing",
    help: "from the trainers' reports; waiting above 10 % is input-bound",
    range: [0, 100], unit: "%",
    build(d) {
      const series = [], cols = [];
      d.jobs.forEach((j, i) => {
        series.push({label: j.job + " wait %", stroke: color(i)});
        cols.push(j.wait_percent);
        series.push({label: j.job + " compute %", stroke: color(i),
                     dash: [6, 4]});
        cols.push(j.compute_percent);
      });
      return {series, cols};
    },
  },
  {
    id: "workers", title: "Decode workers and their busy %",
    help: "busy at 75 % or more means the workers are the limit; " +
          "vertical lines: autoscale changes",
    build(d) {
      return {
        series: [
          {label: "workers", stroke: "#1f77b4", scale: "n",
           paths: uPlot.paths.stepped({align: 1})},
          {label: "busy %", stroke: "#d62728", scale: "%"},
        ],
        cols: [d.workers, d.busy_percent],
      };
    },
    axes: [{scale: "n", label: "workers"},
           {scale: "%", side: 1, label: "busy %", grid: {show: false}}],
    scales: {"%": {range: [0, 100]}, n: {range: (u, lo, hi) => [0, hi + 1]}},
    markers: true,
  },
  {
    id: "stages", title: "Time per image in each stage, ms",
    help: "wall-clock per thread over each second: read, decode, " +
          "transform and augment per decoded image, send per image sent",
    build(d) {
      const s = d.stage_ms_per_image;
      const series = [{label: "read", stroke: color(0)},
                      {label: "decode", stroke: color(1)},
                      {label: "transform", stroke: color(2)}];
      const cols = [s.read, s.decode, s.transform];
      // The augmentation ops, once the timeline carries them and the
      // daemon has spent time on them.
      if (s.augment && s.augment.some(v => v != null && v > 0)) {
        series.push({label: "augment", stroke: color(4)});
        cols.push(s.augment);
      }
      series.push({label: "send", stroke: color(3)});
      cols.push(s.send);
      return {series, cols};
    },
  },
  {
    id: "buffers", title: "Batch buffer bytes and the budget",
    help: "reserved by open streams, idle buffers kept for reuse, and " +
          "--max-buffer-bytes",
    bytes: true,
    build(d) {
      return {
        series: [{label: "reserved", stroke: color(0)},
                 {label: "idle", stroke: color(2)},
                 {label: "budget", stroke: "#888", dash: [4, 4]}],
        cols: [d.buffer_reserved_bytes, d.buffer_idle_bytes,
               d.buffer_limit_bytes],
      };
    },
  },
  {
    id: "substitutions", title: "Substituted samples per second",
    help: "bad files replaced by a deterministic substitute " +
          "(batchd_substitutions_total says why)",
    build(d) {
      return {series: [{label: "substitutions/s", stroke: color(1)}],
              cols: [d.substitutions_per_second]};
    },
  },
];

// Draws the autoscale changes as vertical lines with their text.
function markerPlugin(getMarkers) {
  return {
    hooks: {
      draw: [u => {
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = "#9467bd";
        ctx.fillStyle = "#9467bd";
        ctx.setLineDash([3, 3]);
        ctx.font = "11px sans-serif";
        for (const m of getMarkers()) {
          const x = Math.round(u.valToPos(m.t, "x", true));
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.fillText(m.change.split(":")[0], x + 3, u.bbox.top + 12);
        }
        ctx.restore();
      }],
    },
  };
}

let latest = null;

function makeChart(spec, built, data) {
  const section = document.getElementById("chart-" + spec.id);
  const holder = section.querySelector(".plot");
  holder.textContent = "";
  const opts = {
    width: 600, height: 220,
    series: [{}].concat(built.series.map(s => Object.assign(
        {width: 1.5, spanGaps: false,
         value: spec.bytes ? (u, v) => bytes(v) :
                (u, v) => v == null ? "" : (+v.toPrecision(4)) +
                                           (spec.unit || "")}, s))),
    axes: spec.axes ? [{}].concat(spec.axes) :
        [{}, {values: spec.bytes ? (u, vals) => vals.map(bytes) : undefined,
              size: 80}],
    scales: Object.assign({x: {time: true}},
                          spec.scales || (spec.range ? {y: {range: spec.range}}
                                                     : {})),
    plugins: spec.markers ? [markerPlugin(() => latest ? latest.autoscale
                                                       : [])] : [],
  };
  return new uPlot(opts, data, holder);
}

function render(d) {
  latest = d;
  const verdict = document.getElementById("verdict");
  if (d.verdict) {
    verdict.textContent = d.verdict.line;
    verdict.dataset.kind = d.verdict.kind;
    verdict.dataset.t = d.verdict.t.toFixed(3);
  }
  // The shard cache's line (hit rate, bytes fetched per byte served,
  // whole/range choices, prefetch depth), as batchd top shows it; only
  // for a daemon with remote shards.
  const cache = document.getElementById("shard-cache");
  cache.hidden = !d.shard_cache;
  cache.textContent = d.shard_cache ? d.shard_cache.line : "";
  const n = d.t.length;
  if (n > 0) {
    // "_other" stands for the jobs beyond --timeline-max-jobs.
    const drawn = d.jobs.filter(j => j.images_per_second[n - 1] != null);
    const others = drawn.some(j => j.job == "_other") ? d.other_jobs : 0;
    const count = drawn.filter(j => j.job != "_other").length + others;
    document.getElementById("summary").textContent =
        `${d.workers[n - 1]} workers, ${d.busy_percent[n - 1].toFixed(0)} % ` +
        `busy · ${count} job${count == 1 ? "" : "s"} · ` +
        `buffers ${bytes(d.buffer_reserved_bytes[n - 1])} of ` +
        `${bytes(d.buffer_limit_bytes[n - 1])}`;
  }
  if (typeof uPlot === "undefined") {
    document.getElementById("notice").textContent =
        "charts unavailable: this daemon was built without uPlot " +
        "(BATCHD_WEB_UPLOT=OFF); /api/timeline has the data";
    return;
  }
  for (const spec of SPECS) {
    const built = spec.build(d);
    const data = [d.t].concat(built.cols);
    const key = built.series.map(s => s.label).join("\n");
    const chart = charts[spec.id];
    if (chart && chart.batchdKey === key) {
      chart.setData(data);
    } else {
      if (chart) chart.destroy();
      charts[spec.id] = makeChart(spec, built, data);
      charts[spec.id].batchdKey = key;
    }
  }
}

function setUp() {
  const main = document.getElementById("charts");
  for (const spec of SPECS) {
    const section = document.createElement("section");
    section.id = "chart-" + spec.id;
    const title = document.createElement("h2");
    title.textContent = spec.title;
    const help = document.createElement("p");
    help.textContent = spec.help;
    const plot = document.createElement("div");
    plot.className = "plot";
    section.append(title, help, plot);
    main.append(section);
  }
}

// The columns of a timeline answer that are aligned on t.
const COLUMNS = ["t", "workers", "busy_percent", "queued_samples",
                 "buffer_reserved_bytes", "buffer_idle_bytes",
                 "buffer_limit_bytes", "substitutions_per_second",
                 "capacity_images_per_second"];
const STAGES = ["read", "decode", "transform", "augment", "send"];
const JOB_COLUMNS = ["images_per_second", "wait_percent", "compute_percent",
                     "demand_images_per_second"];

function nulls(n) { return new Array(n).fill(null); }

// `old` with the points of `d` (an answer to since=) appended, the oldest
// dropped beyond d.capacity. A job missing from either side gets nulls
// there; a job with no value left is dropped.
function merge(old, d) {
  if (old == null || d.since == null) return d;
  const n = old.t.length, m = d.t.length;
  const keep = Math.max(0, n + m - d.capacity);
  const join = (a, b) => a.concat(b).slice(keep);
  const out = Object.assign({}, d);
  for (const c of COLUMNS) out[c] = join(old[c], d[c]);
  out.stage_ms_per_image = {};
  for (const s of STAGES) {
    out.stage_ms_per_image[s] = join(old.stage_ms_per_image[s] || nulls(n),
                                     d.stage_ms_per_image[s] || nulls(m));
  }
  const before = new Map(old.jobs.map(j => [j.job, j]));
  const jobs = d.jobs.map(j => {
    const o = before.get(j.job);
    before.delete(j.job);
    const merged = {job: j.job};
    for (const c of JOB_COLUMNS) {
      merged[c] = join(o ? o[c] : nulls(n), j[c]);
    }
    return merged;
  });
  for (const o of before.values()) {
    const merged = {job: o.job};
    for (const c of JOB_COLUMNS) merged[c] = join(o[c], nulls(m));
    if (merged.images_per_second.some(v => v != null)) jobs.push(merged);
  }
  out.jobs = jobs;
  const first = out.t.length ? out.t[0] : Infinity;
  out.autoscale = old.autoscale.concat(d.autoscale).filter(a => a.t >= first);
  return out;
}

let timeline = null;

async function poll() {
  try {
    const since = timeline && timeline.next != null ?
        "?since=" + timeline.next.toFixed(3) : "";
    const reply = await fetch("api/timeline" + since, {cache: "no-store"});
    if (!reply.ok) {
      if (reply.status == 400) timeline = null;  // ask for all next time
      throw new Error("HTTP " + reply.status);
    }
    timeline = merge(timeline, await reply.json());
    render(timeline);
    document.getElementById("notice").textContent =
        typeof uPlot === "undefined" ?
            document.getElementById("notice").textContent : "";
  } catch (e) {
    document.getElementById("notice").textContent =
        "cannot read api/timeline: " + e.message;
  }
  window.batchdPolls++;
  setTimeout(poll, POLL_MS);
}

document.getElementById("daemon").textContent = location.host;
setUp();
poll();
