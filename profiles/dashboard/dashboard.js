// engine-perf's dashboard: draws what engine-perf computed (the JSON block "kiln-data") with
// uPlot. No statistics here beyond sums and differences of the numbers given.
(function () {
  "use strict";
  const t0 = performance.now();
  const data = JSON.parse(document.getElementById("kiln-data").textContent);
  // Okabe-Ito: distinguishable with the common colour-vision deficiencies.
  const C = { p50: "#0072B2", p99: "#D55E00", budget: "#000000", cp: "#CC79A7", miss: "#E69F00", band50: "rgba(0,114,178,0.15)",
              band99: "rgba(213,94,0,0.13)", bandMiss: "rgba(230,159,0,0.2)", machine: "#009E73" };
  const runsById = new Map(data.runs.map(r => [r.id, r]));
  const machines = new Map(data.machines.map(m => [m.fingerprint, m]));
  const esc = s => String(s == null ? "" : s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const fmt = (v, d = 3) => (v == null || !isFinite(v)) ? "" : Number(v).toFixed(d);
  const pct = v => (v == null || !isFinite(v)) ? "" : (v >= 0 ? "+" : "") + (100 * v).toFixed(1) + " %";
  const machineName = fp => { const m = machines.get(fp); return m ? `${fp.slice(0, 8)} (${m.cpu_model}, ${m.cores} cores, ${m.memory_gib} GiB)` : fp; };
  const runName = id => { const r = runsById.get(id); return r ? `#${id}${r.label ? " " + r.label : ""}` : `#${id}`; };
  const verdict = v => v ? `<span class="verdict ${esc(v)}">${esc(v)}</span>` : "";

  document.getElementById("meta").textContent =
    `${data.runs.length} runs in ${data.db}; written ${data.generated} by kiln ${data.kiln.version} (${data.kiln.commit.slice(0, 12)})`;

  // Verdict table.
  // The host's load before each run, where it differs enough to explain part of a change (the same
  // rule as engine-perf compare's note).
  const loadNote = x => {
    if (!x || x.load_a == null || x.load_b == null) return "";
    const cores = Math.max(1, x.cores || 1);
    if (Math.abs(x.load_a - x.load_b) <= Math.max(1, 0.25 * cores) && Math.max(x.load_a, x.load_b) <= cores) return "";
    return ` <span class="load-warn" title="load average before the runs; the host's load may explain part of the change (engine-perf ab interleaves)">` +
      `load ${x.load_a.toFixed(1)} → ${x.load_b.toFixed(1)}</span>`;
  };
  const vt = document.querySelector("#verdicts tbody");
  vt.innerHTML = data.verdicts.map(v => {
    const p = v.vs_previous, b = v.vs_baseline;
    const ci = x => x ? `${pct(x.p50_change)} [${pct(x.p50_change_ci[0])}, ${pct(x.p50_change_ci[1])}]` : "";
    return `<tr><td>${esc(v.key)}</td><td>${esc(v.profile)}</td><td>${esc(v.machine.slice(0, 8))}</td><td>${esc(runName(v.latest))}</td>` +
      `<td>${p ? verdict(p.verdict) + " vs " + esc(runName(p.a)) + loadNote(p) : "(first run)"}</td><td class="num">${ci(p)}</td>` +
      `<td>${b ? verdict(b.verdict) + " vs " + esc(v.baseline_label || runName(b.a)) + loadNote(b) : "(no baseline)"}</td><td class="num">${ci(b)}</td></tr>`;
  }).join("");

  // Charts: one card per series, latency and miss rate side by side.
  const charts = [];
  window.kilnCharts = charts;
  const chartsEl = document.getElementById("charts");
  const seenKeyProfile = new Map();
  function changePointPlugin(series) {
    return {
      hooks: {
        draw: [u => {
          const ctx = u.ctx;
          ctx.save();
          ctx.strokeStyle = C.cp;
          ctx.lineWidth = 2 * devicePixelRatio;
          ctx.setLineDash([3 * devicePixelRatio, 3 * devicePixelRatio]);
          for (const cp of series.change_points) {
            const x = Math.round(u.valToPos(series.t[cp.index], "x", true));
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
          }
          ctx.restore();
        }],
      },
    };
  }
  const width = el => Math.max(300, el.clientWidth || 520);
  const timeAxis = { stroke: "#333", grid: { stroke: "#eee" } };
  const valueAxis = label => ({ label, stroke: "#333", grid: { stroke: "#eee" }, size: 60 });
  data.series.forEach((s, i) => {
    const kp = s.key + "\u0000" + s.profile;
    const earlier = seenKeyProfile.get(kp);
    seenKeyProfile.set(kp, s.machine);
    const card = document.createElement("div");
    card.className = "card";
    card.dataset.series = i;
    const cps = s.change_points.map(cp =>
      `change point at ${esc(runName(cp.run))}: median p50 ${fmt(cp.median_before)} → ${fmt(cp.median_after)} ms ` +
      `(runs ${esc(runName(cp.runs_before[0]))}–${esc(runName(cp.runs_before[1]))} before, ${esc(runName(cp.runs_after[0]))}–${esc(runName(cp.runs_after[1]))} after; t-test p = ${cp.p_value.toExponential(1)})`);
    card.innerHTML = `<h3>${esc(s.key)} · ${esc(s.profile)} <small>(${esc(s.kind)})</small></h3>` +
      `<div class="sub">machine ${esc(machineName(s.machine))}${earlier !== undefined ? ' · <span class="new-machine">new machine: a separate series from the one above</span>' : ""}` +
      ` · ${s.runs.length} runs${s.budget_ms ? ` · budget ${fmt(s.budget_ms, 1)} ms` : ""}</div>` +
      `<div class="chart-row"><div class="chart lat"></div><div class="chart miss"></div></div>` +
      `<div class="cp-list">${cps.join("<br>")}</div>`;
    chartsEl.appendChild(card);
    const latEl = card.querySelector(".lat"), missEl = card.querySelector(".miss");
    const budget = s.t.map(() => s.budget_ms || null);
    const lat = new uPlot({
      title: "latency (ms)", width: width(latEl), height: 260, plugins: [changePointPlugin(s)],
      scales: { x: { time: true } },
      axes: [timeAxis, valueAxis("ms")],
      series: [
        {},
        { label: "p50", stroke: C.p50, width: 2, points: { show: true, size: 5 } },
        { label: "p50 low", stroke: C.p50, width: 0, points: { show: false } },
        { label: "p50 high", stroke: C.p50, width: 0, points: { show: false } },
        { label: "p99", stroke: C.p99, width: 2, dash: [6, 3], points: { show: true, size: 5 } },
        { label: "p99 low", stroke: C.p99, width: 0, points: { show: false } },
        { label: "p99 high", stroke: C.p99, width: 0, points: { show: false } },
        { label: "budget", stroke: C.budget, width: 1.5, dash: [10, 5], points: { show: false } },
      ],
      bands: [{ series: [3, 2], fill: C.band50 }, { series: [6, 5], fill: C.band99 }],
    }, [s.t, s.p50, s.p50_lo, s.p50_hi, s.p99, s.p99_lo, s.p99_hi, budget], latEl);
    charts.push({ series: i, kind: "latency", plot: lat });
    const miss = new uPlot({
      title: "deadline-miss rate", width: width(missEl), height: 260,
      scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(0.05, hi)] } },
      axes: [timeAxis, valueAxis("fraction of runs")],
      series: [
        {},
        { label: "miss rate", stroke: C.miss, width: 2, points: { show: true, size: 5 } },
        { label: "low", stroke: C.miss, width: 0, points: { show: false } },
        { label: "high", stroke: C.miss, width: 0, points: { show: false } },
      ],
      bands: [{ series: [3, 2], fill: C.bandMiss }],
    }, [s.t, s.miss, s.miss_lo, s.miss_hi], missEl);
    charts.push({ series: i, kind: "miss_rate", plot: miss });
  });
  window.addEventListener("resize", () => {
    for (const c of charts) c.plot.setSize({ width: width(c.plot.root.parentElement), height: 260 });
  });

  // Layer comparison between two runs that carry per-layer times.
  const layerRuns = Object.keys(data.layers).map(Number).sort((a, b) => a - b);
  const selA = document.getElementById("layer-a"), selB = document.getElementById("layer-b"), selP = document.getElementById("layer-profile");
  const opt = id => `<option value="${id}">${esc(runName(id))} ${esc((runsById.get(id) || {}).time || "")}</option>`;
  selA.innerHTML = layerRuns.map(opt).join("");
  selB.innerHTML = layerRuns.map(opt).join("");
  if (layerRuns.length >= 2) {
    selA.value = String(layerRuns[layerRuns.length - 2]);
    selB.value = String(layerRuns[layerRuns.length - 1]);
  }
  function profilesOf() {
    const a = data.layers[selA.value] || {}, b = data.layers[selB.value] || {};
    return Object.keys(a).filter(p => p in b);
  }
  function fillProfiles() {
    const keep = selP.value;
    const ps = profilesOf();
    selP.innerHTML = ps.map(p => `<option>${esc(p)}</option>`).join("");
    if (ps.includes(keep)) selP.value = keep;
  }
  // A fused step and the ops it replaced on the other side are one entry (as engine-perf compare).
  function layerDiff(a, b) {
    const group = new Map();
    for (const rows of [a, b]) for (const [name, , , replaced] of rows) for (const r of replaced || []) if (r !== name && !group.has(r)) group.set(r, name);
    const entries = new Map();
    const add = (rows, side) => {
      for (const [name, op, ms] of rows) {
        const g = group.get(name);
        const key = g || name;
        const e = entries.get(key) || { name: key, op: "", a: 0, b: 0, members: 0 };
        if (!g) e.op = e.op || op; else e.members++;
        e[side] += ms;
        entries.set(key, e);
      }
    };
    add(a, "a");
    add(b, "b");
    return [...entries.values()].map(e => ({ ...e, op: e.members ? `${e.op} (${e.members} ops unfused)` : e.op, d: e.b - e.a }))
      .sort((x, y) => Math.abs(y.d) - Math.abs(x.d));
  }
  function drawLayers() {
    const p = selP.value;
    const a = (data.layers[selA.value] || {})[p], b = (data.layers[selB.value] || {})[p];
    const lt = document.querySelector("#layer-table tbody"), ot = document.querySelector("#optype-table tbody");
    if (!a || !b) { lt.innerHTML = ot.innerHTML = ""; return; }
    lt.innerHTML = layerDiff(a, b).slice(0, 25).map(e =>
      `<tr><td>${esc(e.name)}</td><td>${esc(e.op)}</td><td class="num">${fmt(e.a)}</td><td class="num">${fmt(e.b)}</td><td class="num">${(e.d >= 0 ? "+" : "") + fmt(e.d)}</td></tr>`).join("");
    const ops = new Map();
    for (const [, op, ms] of a) ops.set(op, { a: (ops.get(op) || { a: 0 }).a + ms, b: 0 });
    for (const [, op, ms] of b) { const o = ops.get(op) || { a: 0, b: 0 }; o.b += ms; ops.set(op, o); }
    ot.innerHTML = [...ops.entries()].map(([op, o]) => ({ op, ...o, d: o.b - o.a })).sort((x, y) => Math.abs(y.d) - Math.abs(x.d))
      .map(e => `<tr><td>${esc(e.op)}</td><td class="num">${fmt(e.a)}</td><td class="num">${fmt(e.b)}</td><td class="num">${(e.d >= 0 ? "+" : "") + fmt(e.d)}</td></tr>`).join("");
  }
  for (const s of [selA, selB]) s.addEventListener("change", () => { fillProfiles(); drawLayers(); });
  selP.addEventListener("change", drawLayers);
  fillProfiles();
  drawLayers();

  // Runs: machine, load, links.
  const link = (path, text) => path ? `<a href="${esc(encodeURI("file://" + path))}">${esc(text)}</a>` : "";
  const load = l => l ? l.map(x => x.toFixed(2)).join(" / ") : "";
  // The latest 200 runs at first; the rest on request (a long history need not cost every reader).
  const runsBody = document.querySelector("#runs tbody");
  const runRow = r =>
    `<tr><td>${r.id}</td><td>${esc(r.time)}</td><td>${esc(r.label)}</td><td>${esc(r.source)}</td><td>${esc(r.config)}</td>` +
    `<td>${esc(r.kiln_commit)}${r.kiln_dirty ? "+" : ""}</td><td>${esc(r.config_commit)}${r.config_dirty ? "+" : ""}</td>` +
    `<td title="${esc(machineName(r.machine))}">${esc(r.machine.slice(0, 8))}</td><td>${load(r.load_before)}</td><td>${load(r.load_after)}</td>` +
    `<td>${link(r.report, "report")}</td><td>${Object.entries(r.traces).map(([p, t]) => link(t, p)).join(" ")}</td></tr>`;
  const newestFirst = data.runs.slice().reverse();
  runsBody.innerHTML = newestFirst.slice(0, 200).map(runRow).join("");
  if (newestFirst.length > 200) {
    const more = document.createElement("button");
    more.id = "all-runs";
    more.textContent = `show all ${newestFirst.length} runs`;
    more.addEventListener("click", () => { runsBody.innerHTML = newestFirst.map(runRow).join(""); more.remove(); });
    document.getElementById("runs-section").appendChild(more);
  }

  window.kilnRenderMs = performance.now() - t0;
  document.body.dataset.rendered = "1";
})();
