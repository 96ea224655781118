// grpoctl ui: one page over the JSON API (grpoctl/ui/api.py). Every figure comes from
// the server; the page only draws, and smooths nothing itself (the server sends the EMA).
// Views by URL hash: #/ (runs), #/study/NAME, #/run/ID. While anything shown is running
// the page polls every poll_s seconds, asking only for the points after its cursor.
"use strict";

const COLORS = ["#0a66d8", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#0b7285", "#e67700", "#5f3dc4", "#364fc7", "#087f5b"];
const STEP_INCREMENTS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
const state = { meta: null, view: null, timer: null, generation: 0, sort: { key: "created_at", dir: -1 }, filter: "" };

// ---------------------------------------------------------------- helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function fmt(x, digits = 3) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return String(x);
  return Math.abs(x) >= 1000 ? x.toFixed(0) : x.toPrecision(digits);
}

function statusCell(status) {
  return el("td", { class: "status-" + status, "data-status": status }, status);
}

function updated() {
  document.getElementById("updated").textContent = "updated " + new Date().toTimeString().slice(0, 8);
}

function ready() {
  // data-ready-ms: milliseconds since navigation started (benchmarks/bench_ui.py reads it)
  document.body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
  document.body.setAttribute("data-ready", "");
}

function setLive(on) {
  document.getElementById("live").textContent = on ? "● live" : "";
  document.body.toggleAttribute("data-live", on);
}

function schedule(poll, anyRunning) {
  clearTimeout(state.timer);
  setLive(anyRunning);
  if (!anyRunning) return;
  const generation = state.generation;
  state.timer = setTimeout(async () => {
    if (generation !== state.generation) return;
    try {
      await poll();
    } catch (err) {
      document.getElementById("updated").textContent = "poll failed: " + err.message;
      schedule(poll, true);
    }
  }, state.meta.poll_s * 1000);
}

function metricLabel(name) {
  const info = state.meta.metrics[name];
  return info ? `${name} (${info.unit}): ${info.description}` : name;
}

// ---------------------------------------------------------------- charts

// One chart for a curves answer: per variant its smoothed mean (bold), the raw mean
// (faint), and either each seed's smoothed line (thin) or a labelled min-max band.
function chartData(curves, flags) {
  const steps = new Set();
  const columns = [];
  const series = [{ label: "step" }];
  const bands = [];
  curves.variants.forEach((v, i) => {
    const color = COLORS[i % COLORS.length];
    const add = (points, opts) => {
      points[0].forEach((s) => steps.add(s));
      columns.push(points);
      series.push({ spanGaps: true, points: { show: points[0].length < 3 }, ...opts });
      return series.length - 1;
    };
    if (v.band) {
      const hi = add(v.band.high, { label: `${v.label} ${v.band.label}`, stroke: color + "55", width: 1 });
      const lo = add(v.band.low, { label: `${v.label} low`, stroke: color + "55", width: 1, show: true });
      series[lo].label = `${v.label} (band low)`;
      bands.push({ series: [hi, lo], fill: color + "22" });
    }
    for (const seed of v.seeds || []) add(seed.smooth, { label: `${seed.name}`, stroke: color + "99", width: 1 });
    add(v.raw, { label: `${v.label} raw`, stroke: color + "40", width: 1 });
    add(v.smooth, { label: `${v.label}` + (v.n_seeds > 1 ? ` (mean of ${v.n_seeds})` : ""), stroke: color, width: 2.5 });
  });
  const xs = [...steps].sort((a, b) => a - b);
  const index = new Map(xs.map((s, i) => [s, i]));
  const data = [xs];
  for (const [ss, vs] of columns) {
    const ys = new Array(xs.length).fill(null);
    ss.forEach((s, i) => { ys[index.get(s)] = vs[i]; });
    data.push(ys);
  }
  return { data, series, bands, flags };
}

function flagPlugin(flags) {
  // A dashed red line at the step where each health flag began, with its name.
  return {
    hooks: {
      draw: (u) => {
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = "#c62828";
        ctx.fillStyle = "#c62828";
        ctx.setLineDash([5, 4]);
        ctx.font = `${11 * devicePixelRatio}px system-ui`;
        for (const f of flags) {
          const x = u.valToPos(f.step, "x", true);
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.fillText(`${f.kind} (${f.who})`, x + 4, u.bbox.top + 14 * devicePixelRatio);
        }
        ctx.restore();
      },
    },
  };
}

function drawChart(container, curves, flags, onZoom) {
  const { data, series, bands } = chartData(curves, flags);
  container.replaceChildren();
  const width = Math.max(400, container.clientWidth - 16);
  const opts = {
    width,
    height: 360,
    series,
    bands,
    scales: { x: { time: false } },
    axes: [{ label: "GRPO step", incrs: STEP_INCREMENTS }, { label: curves.unit || "", size: 60 }],
    legend: { live: true },
    cursor: { drag: { x: true, y: false } },
    plugins: [flagPlugin(flags)],
    hooks: {
      setSelect: [
        (u) => {
          if (u.select.width < 5) return;
          const lo = Math.floor(u.posToVal(u.select.left, "x"));
          const hi = Math.ceil(u.posToVal(u.select.left + u.select.width, "x"));
          onZoom(lo, hi);
        },
      ],
    },
  };
  const plot = new uPlot(opts, data, container);
  container.plot = plot;
  container.setAttribute("data-metric", curves.metric);
  container.setAttribute("data-points", String(data[0].length));
  return plot;
}

// Append a live poll's tail (points after the cursor) to the curves held.
function mergeTail(held, tail) {
  const cut = (points, newer) => {
    const keep = points[0].findIndex((s) => s > tail.cursor);
    const n = keep < 0 ? points[0].length : keep;
    return [points[0].slice(0, n).concat(newer[0]), points[1].slice(0, n).concat(newer[1])];
  };
  for (const v of held.variants) {
    const t = tail.variants.find((x) => x.label === v.label);
    if (!t) return false;
    v.raw = cut(v.raw, t.raw);
    v.smooth = cut(v.smooth, t.smooth);
    if (v.band && t.band) {
      v.band.low = cut(v.band.low, t.band.low);
      v.band.high = cut(v.band.high, t.band.high);
    }
    for (const seed of v.seeds || []) {
      const ts = (t.seeds || []).find((x) => x.run_id === seed.run_id);
      if (ts) seed.smooth = cut(seed.smooth, ts.smooth);
    }
  }
  if (tail.last_step !== null) held.last_step = Math.max(held.last_step ?? tail.last_step, tail.last_step);
  return true;
}

// Evals come every eval.every steps: an EMA over so few points lags by tens of steps (a
// curve still climbing would read as lower than it is), so they start unsmoothed.
const defaultSmoothing = (metric) => (metric.startsWith("eval/") ? "0" : "0.6");

// A metric picker, a smoothing slider and a chart; `curvesPath(query)` names the API.
function curvePanel(metricNames, flags, curvesPath, onDrawn) {
  const panel = el("div", {});
  const names = [...new Set([state.meta.headline, ...metricNames])];
  const picker = el("select", { id: "metric", title: "metric" }, names.map((n) => el("option", { value: n, title: metricLabel(n) }, n)));
  const smoothing = el("input", { id: "smoothing", type: "range", min: "0", max: "0.95", step: "0.05", value: defaultSmoothing(state.meta.headline) });
  const smoothingText = el("span", { class: "dim" }, "EMA " + smoothing.value);
  const description = el("div", { class: "note", id: "metric-description" });
  const chart = el("div", { class: "chart", id: "chart" });
  const view = { held: null, zoom: null, cursor: null };
  panel.append(el("div", { class: "toolbar" }, el("label", {}, "metric ", picker), el("label", {}, "smoothing ", smoothing), smoothingText,
    el("span", { class: "note" }, "faint: raw; drag to zoom, double-click to reset")), description, chart);

  const query = (extra) => {
    const q = new URLSearchParams({ metric: picker.value, smoothing: smoothing.value, points: "200", ...extra });
    if (view.zoom) { q.set("from", view.zoom[0]); q.set("to", view.zoom[1]); }
    return q.toString();
  };
  async function load(prefetched) {
    const curves = prefetched ? await prefetched : await api(curvesPath(query({})));
    view.held = curves;
    description.textContent = metricLabel(curves.metric) + (curves.downsampled ? " · downsampled by step buckets (first/min/max/last kept)" : "");
    const plot = drawChart(chart, curves, flags, (lo, hi) => { view.zoom = [lo, hi]; load(); });
    chart.setAttribute("data-last-step", String(curves.last_step));
    plot.over.addEventListener("dblclick", () => { if (view.zoom) { view.zoom = null; load(); } });
    updated();
    if (onDrawn) onDrawn();
  }
  async function poll(cursor) {
    if (!view.held || view.zoom) return;
    const tail = await api(curvesPath(query({ after_step: String(cursor) })));
    tail.cursor = cursor;
    if (!mergeTail(view.held, tail)) return load();
    const plot = chart.plot;
    const { data } = chartData(view.held, flags);
    if (data.length !== plot.data.length) return load();
    plot.setData(data);
    chart.setAttribute("data-points", String(data[0].length));
    chart.setAttribute("data-last-step", String(view.held.last_step));
  }
  picker.addEventListener("change", () => {
    view.zoom = null;
    smoothing.value = defaultSmoothing(picker.value);
    smoothingText.textContent = "EMA " + smoothing.value;
    load();
  });
  picker.value = state.meta.headline;
  smoothing.addEventListener("change", () => { smoothingText.textContent = "EMA " + smoothing.value; load(); });
  return { panel, load, poll, chart, firstQuery: () => query({}) };
}

// ---------------------------------------------------------------- runs view

function runsTable(runs, columns) {
  const sorted = [...runs].sort((a, b) => {
    const k = state.sort.key;
    const x = a[k] ?? -Infinity, y = b[k] ?? -Infinity;
    return (x < y ? -1 : x > y ? 1 : 0) * state.sort.dir;
  });
  const head = el("tr", {}, columns.map(([key, label, num]) =>
    el("th", { class: num ? "num" : null, onclick: () => { state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : -1 }; route(); } },
      label + (state.sort.key === key ? (state.sort.dir > 0 ? " ▲" : " ▼") : ""))));
  const rows = sorted.map((r) => el("tr", { "data-run": r.name, "data-status": r.status },
    el("td", { class: "num" }, r.id),
    el("td", {}, el("a", { href: `#/run/${r.id}` }, r.name)),
    el("td", {}, r.group ? el("a", { href: `#/study/${encodeURIComponent(r.group)}` }, r.group) : ""),
    el("td", {}, r.variant || ""),
    statusCell(r.status),
    el("td", { class: "num", "data-step": r.last_step }, `${r.last_step}/${r.total_steps}`),
    el("td", { class: "num" }, fmt(r.accuracy)),
    el("td", { class: "num" }, fmt(r.reward)),
    el("td", {}, (r.tags || []).map((t) => el("span", { class: "tag" }, t))),
    el("td", { class: "dim" }, (r.created_at || "").slice(0, 16).replace("T", " "))));
  return el("table", { id: "runs" }, el("thead", {}, head), el("tbody", {}, rows));
}

const RUN_COLUMNS = [["id", "id", true], ["name", "name"], ["group", "sweep / group"], ["variant", "variant"], ["status", "status"],
  ["last_step", "step", true], ["accuracy", "eval acc", true], ["reward", "reward", true], ["tags", "tags"], ["created_at", "created"]];

async function runsView(root) {
  const body = await api("/api/runs");
  const matches = (r) => !state.filter || [r.name, r.group, r.variant, r.status, ...(r.tags || [])].join(" ").toLowerCase().includes(state.filter.toLowerCase());
  const filter = el("input", { type: "search", id: "filter", placeholder: "filter: name, group, status, tag", value: state.filter });
  const holder = el("div", {});
  const draw = (b) => holder.replaceChildren(runsTable(b.runs.filter(matches), RUN_COLUMNS));
  filter.addEventListener("input", () => { state.filter = filter.value; draw(body); });
  root.replaceChildren(
    el("h2", {}, `${body.runs.length} runs`),
    el("div", { class: "studies" }, el("span", { class: "dim" }, "studies: "), body.studies.map((s) => el("a", { href: `#/study/${encodeURIComponent(s.name)}` }, `${s.name} (${s.kind})`))),
    el("div", { class: "toolbar" }, filter), holder);
  draw(body);
  updated();
  ready();
  const poll = async () => {
    const fresh = await api("/api/runs");
    Object.assign(body, fresh);
    draw(body);
    root.querySelector("h2").textContent = `${body.runs.length} runs`;
    updated();
    schedule(poll, fresh.runs.some((r) => r.status === "running"));
  };
  schedule(poll, body.runs.some((r) => r.status === "running"));
}

// ---------------------------------------------------------------- study view

function compareTable(compare) {
  const rows = compare.rows || [];
  const columns = [["variant", "variant"], ["seeds", "seeds"], ["final_acc", "final acc"], ["best_acc", "best acc"], ["status", "status"],
    ["diff", "vs baseline"], ["p_holm", "p (Holm)"], ["diff_test_name", "test"], ["verdict", "verdict"], ["health", "health"]];
  const cell = (r, k) => {
    if (k === "seeds") return r.seeds.length;
    if (k === "final_acc" && r.final_acc !== null && r.final_acc_sd !== undefined) return `${fmt(r.final_acc)} ± ${fmt(r.final_acc_sd, 2)} sd`;
    if (k === "diff" && r.diff !== null && r.diff !== undefined) return `${r.diff >= 0 ? "+" : ""}${fmt(r.diff)} [${fmt(r.diff_ci_low)}, ${fmt(r.diff_ci_high)}]`;
    if (k === "health") return (r.health || []).join(", ");
    if (k === "diff_test_name") return r.diff_test_name ? r.diff_test_name + (r.problem_level ? `; ${r.problem_level}` : "") : "";
    return fmt(r[k]);
  };
  const table = el("table", { id: "compare" },
    el("thead", {}, el("tr", {}, columns.map(([, label]) => el("th", {}, label)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, columns.map(([k]) => el("td", { class: k === "health" ? "flag" : null }, (k === "variant" && r.best ? "★ " : "") + cell(r, k)))))));
  const baseline = compare.baseline;
  const note = baseline ? `each variant against ${baseline.variant}: ${baseline.measure}; ${baseline.confidence * 100}% intervals and p-values of the test named in each row, Holm-corrected (as grpoctl compare)`
    : (compare.baseline_note || "no baseline comparison");
  return [table, el("p", { class: "note" }, note), ...(compare.warnings || []).map((w) => el("p", { class: "note error" }, "warning: " + w))];
}

async function studyView(root, name) {
  const base = `/api/studies/${encodeURIComponent(name)}`;
  // The first chart's curves are asked for beside the study (the headline metric).
  const firstCurves = api(`${base}/curves?` + new URLSearchParams({ metric: state.meta.headline, smoothing: defaultSmoothing(state.meta.headline), points: "200" }));
  firstCurves.catch(() => {});
  const study = await api(base);
  const flags = [];  // filled by compare's answer, after the first draw
  const flagsOf = {};
  const members = study.variants.flatMap((v) => v.runs.map((r) => ({ ...r, variant: v.label })));
  const memberTable = () => el("table", { id: "members" },
    el("thead", {}, el("tr", {}, ["variant", "run", "seed", "status", "step", "health flags"].map((h) => el("th", {}, h)))),
    el("tbody", {}, members.map((r) => el("tr", { "data-run": r.name, "data-status": r.status },
      el("td", {}, r.variant), el("td", {}, el("a", { href: `#/run/${r.id}` }, r.name)), el("td", { class: "num" }, r.seed), statusCell(r.status),
      el("td", { class: "num", "data-step": r.last_step }, r.last_step),
      el("td", { class: "flag" }, (flagsOf[r.id] || []).map((f) => `${f.kind} from step ${f.step}`).join("; "))))));
  const panel = curvePanel(study.metrics, flags, (q) => `${base}/curves?${q}`);
  const membersHolder = el("div", {}, memberTable());
  const compareHolder = el("div", { id: "compare-holder" }, el("p", { class: "dim" }, "comparing…"));
  root.replaceChildren(el("h2", {}, `study ${study.name}`), panel.panel,
    el("h3", {}, "runs"), membersHolder,
    el("h3", {}, "compared as grpoctl compare does"), compareHolder);
  await panel.load(firstCurves);
  ready();  // the table of runs and the first chart are drawn; compare's table follows
  const compare = async () => {
    const body = await api(`${base}/compare`);
    flags.length = 0;
    for (const r of members) {
      flagsOf[r.id] = body.flags[String(r.id)] || [];
      flags.push(...flagsOf[r.id].map((f) => ({ ...f, who: r.name })));
    }
    compareHolder.replaceChildren(...compareTable(body.compare));
    membersHolder.replaceChildren(memberTable());
    if (panel.chart.plot) panel.chart.plot.redraw();
    document.body.setAttribute("data-compared", "");
  };
  await compare();
  const running = (s) => s.variants.some((v) => v.runs.some((r) => r.status === "running"));
  const ids = (s) => s.variants.flatMap((v) => v.runs.map((r) => r.id)).join(",");
  const states = (s) => s.variants.flatMap((v) => v.runs.map((r) => `${r.status}`)).join(",");
  const poll = async () => {
    const fresh = await api(base);
    const cursor = Math.min(...members.filter((r) => r.status === "running").map((r) => r.last_step), Infinity);
    if (ids(fresh) !== ids(study)) return studyView(root, name);  // a new member: draw it all again
    const changed = states(fresh) !== states(study);
    study.variants = fresh.variants;
    members.forEach((r, i) => Object.assign(r, fresh.variants.flatMap((v) => v.runs)[i]));
    membersHolder.replaceChildren(memberTable());
    if (Number.isFinite(cursor)) await panel.poll(cursor);
    if (changed) await compare();
    updated();
    schedule(poll, running(fresh));
  };
  schedule(poll, running(study));
}

// ---------------------------------------------------------------- run view

function keyValueTable(id, entries) {
  return el("table", { id }, el("tbody", {}, entries.map(([k, v]) => el("tr", {}, el("td", { class: "dim" }, k), el("td", {}, v)))));
}

async function samplesPanel(holder, runId, steps) {
  const step = el("select", { id: "sample-step" }, [...steps].reverse().map((s) => el("option", { value: s }, `step ${s}`)));
  const which = el("select", { id: "sample-filter" }, ["all", "right", "wrong"].map((w) => el("option", { value: w }, w)));
  const list = el("div", { id: "samples" });
  async function load() {
    const body = await api(`/api/runs/${runId}/samples?step=${step.value}&filter=${which.value}`);
    list.replaceChildren(...(body.samples.length ? body.samples.map((s) => el("div", { class: "sample" + (s.answer_reward > 0 ? "" : " wrong"), "data-correct": s.answer_reward > 0 ? "yes" : "no" },
      el("div", { class: "dim" }, `${s.kind} · reward ${fmt(s.reward, 2)} (format ${fmt(s.format_reward, 2)}, answer ${fmt(s.answer_reward, 2)}) · truth `, el("b", {}, s.ground_truth)),
      el("pre", { class: "prompt" }, s.prompt), el("pre", { class: "response" }, s.response))) : [el("p", { class: "dim" }, "no completions match")]));
  }
  step.addEventListener("change", load);
  which.addEventListener("change", load);
  holder.replaceChildren(el("div", { class: "toolbar" }, step, which), list);
  if (steps.length) await load();
  else list.append(el("p", { class: "dim" }, "this run stored no completions"));
}

async function runView(root, runId) {
  const body = await api(`/api/runs/${runId}`);
  const r = body.run;
  const flags = body.flags.map((f) => ({ ...f, who: r.name }));
  const statusLine = el("p", { id: "run-status" }, statusCell(r.status).firstChild, ` · step ${r.last_step}/${r.total_steps} · ${body.host} (${body.device})`);
  const diff = Object.entries(body.config_diff);
  const panel = curvePanel(body.metrics, flags, (q) => `/api/runs/${runId}/curves?${q}`, ready);
  const samples = el("div", {});
  const logBox = el("pre", { class: "log", id: "log" });
  root.replaceChildren(
    el("h2", {}, `run ${r.id} · ${r.name}`, r.group ? el("span", { class: "dim" }, " in ", el("a", { href: `#/study/${encodeURIComponent(r.group)}` }, r.group)) : ""),
    statusLine, body.error ? el("pre", { class: "error" }, body.error) : "",
    panel.panel,
    el("div", { class: "grid2" },
      el("div", {}, el("h3", {}, "config diff from the defaults"), diff.length ? keyValueTable("config-diff", diff.map(([k, v]) => [k, JSON.stringify(v)])) : el("p", { class: "dim" }, "none")),
      el("div", {}, el("h3", {}, "health flags"), body.flags.length ? el("ul", {}, body.flags.map((f) => el("li", { class: "flag" }, `${f.kind} from step ${f.step}: ${f.detail}`))) : el("p", { class: "dim" }, "none"),
        el("h3", {}, "evals"), keyValueTable("evals", body.evals.map((e) => [`step ${e.step ?? "–"}${e.checkpoint ? " (checkpoint)" : ""}`, `${fmt(e.accuracy)} of ${e.n} · format ${fmt(e.format_rate)}`])),
        el("h3", {}, "checkpoints"), body.checkpoints.length ? keyValueTable("checkpoints", body.checkpoints.map((c) => [`step ${c.step}`, `${c.path}${c.deleted ? " (deleted)" : ""} · acc ${fmt(c.eval_accuracy)}`])) : el("p", { class: "dim" }, "none"))),
    el("h3", {}, "completions"), samples,
    el("h3", {}, "log"), logBox);
  await Promise.all([panel.load(), samplesPanel(samples, runId, body.sample_steps)]);
  let lastLog = 0;
  const loadLog = async () => {
    const log = await api(`/api/runs/${runId}/log?after_id=${lastLog}`);
    if (lastLog === 0 && !log.chunks.length) logBox.textContent = "(no stored log: only sweep members store theirs)";
    else if (lastLog === 0) logBox.textContent = "";
    logBox.textContent += log.chunks.map((c) => c.text).join("");
    lastLog = log.last_id;
  };
  await loadLog();
  let cursor = r.last_step;
  const poll = async () => {
    const fresh = await api(`/api/runs/${runId}`);
    statusLine.replaceChildren(statusCell(fresh.run.status).firstChild, ` · step ${fresh.run.last_step}/${fresh.run.total_steps} · ${fresh.host} (${fresh.device})`);
    statusLine.className = "status-" + fresh.run.status;
    await panel.poll(cursor);
    cursor = fresh.run.last_step;
    await loadLog();
    updated();
    schedule(poll, fresh.run.status === "running");
  };
  statusLine.className = "status-" + r.status;
  schedule(poll, r.status === "running");
}

// ---------------------------------------------------------------- routing

async function route() {
  state.generation += 1;
  clearTimeout(state.timer);
  document.body.removeAttribute("data-ready");
  const root = document.getElementById("view");
  const hash = location.hash.replace(/^#\/?/, "");
  const [kind, ...rest] = hash.split("/");
  try {
    if (kind === "study") await studyView(root, decodeURIComponent(rest.join("/")));
    else if (kind === "run") await runView(root, Number(rest[0]));
    else await runsView(root);
  } catch (err) {
    root.replaceChildren(el("p", { class: "error", id: "error" }, err.message));
    ready();
  }
}

async function start() {
  state.meta = await api("/api/meta");
  document.getElementById("registry").textContent = state.meta.registry;
  window.addEventListener("hashchange", route);
  await route();
}

start();
