// The jobledger dashboard: every view reads the REST API as of one point of the log, the
// slider's. Text goes into the page through textContent only: the log may be forged.
"use strict";

const state = {
  at: "end", job: null, vertex: null, explained: null, records: 0, following: true, generation: 0,
  mode: "records", log: null, jobEvents: [],
};
// how the slider moves: by record count, by append time, or by the selected job's events
const MODES = ["records", "time", "job"];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "onclick") node.addEventListener("click", value);
    else if (key === "style") Object.assign(node.style, value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  }
  return node;
}

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  }
  return node;
}

async function get(path) {
  const sep = path.includes("?") ? "&" : "?";
  const response = await fetch(`${path}${sep}at=${encodeURIComponent(state.at)}`);
  const body = await response.json();
  if (!response.ok) throw new Error((body.errors || [response.statusText]).join("; "));
  return body;
}

// a time in the browser's zone, with that zone's offset: a time without its zone is a guess
function iso(ms) {
  if (!(ms > 0)) return "-";
  const d = new Date(ms);
  const pad = (n, width = 2) => String(Math.abs(n)).padStart(width, "0");
  const offset = -d.getTimezoneOffset();
  const zone = `${offset < 0 ? "-" : "+"}${pad(Math.trunc(offset / 60))}:${pad(offset % 60)}`;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)} ${zone}`;
}

// a span of milliseconds as the axis says it: whole seconds where the step allows
function elapsed(ms, step) {
  if (step >= 1000) return `${Math.round(ms / 1000)} s`;
  return ms >= 1000 ? `${(ms / 1000).toFixed(step >= 100 ? 1 : 2)} s` : `${ms} ms`;
}

function seconds(ms) {
  return ms >= 0 ? `${(ms / 1000).toFixed(1)} s` : "-";
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function showError(message) {
  const box = document.getElementById("error");
  box.hidden = !message;
  box.textContent = message || "";
}

async function render() {
  // several moves of the slider may be in flight: only the latest one's answers are shown
  const mine = ++state.generation;
  writeUrl();
  document.body.dataset.loading = "true";
  document.getElementById("loading").hidden = false;
  try {
    const [overview, jobs, tms, slots] = await Promise.all([
      get("/overview"), get("/jobs/overview"), get("/taskmanagers"), get("/slots"),
    ]);
    const job = await loadJob();
    if (mine !== state.generation) return;
    showError("");
    renderAsOf(overview["as-of"]);
    renderOverview(overview);
    renderJobs(jobs.jobs);
    renderTaskManagers(tms.taskmanagers, slots);
    renderJob(job);
    renderSidebar(overview, slots, job);
    placeSlider(overview["as-of"]);
    document.body.dataset.renderedAt = state.at;
  } catch (error) {
    if (mine === state.generation) showError(error.message);
  } finally {
    if (mine === state.generation) {
      document.body.dataset.loading = "false";
      document.getElementById("loading").hidden = true;
    }
  }
}

// every view can be linked: the job, vertex, attempt, point and slider mode are in the URL
function readUrl() {
  const query = new URLSearchParams(location.search);
  state.job = query.get("job");
  state.vertex = query.get("vertex");
  const attempt = query.get("attempt");
  state.explained = attempt && /^\d+\.\d+$/.test(attempt) ? attempt.split(".").map(Number) : null;
  state.mode = MODES.includes(query.get("slide")) ? query.get("slide") : "records";
  const at = query.get("at");
  state.at = at || "end";
  state.following = !at || at === "end";
}

function writeUrl() {
  const query = new URLSearchParams();
  if (state.job) query.set("job", state.job);
  if (state.vertex) query.set("vertex", state.vertex);
  if (state.explained) query.set("attempt", state.explained.join("."));
  if (state.at !== "end") query.set("at", state.at);
  if (state.mode !== "records") query.set("slide", state.mode);
  const search = query.toString();
  history.replaceState(null, "", `${location.pathname}${search ? `?${search}` : ""}`);
}

async function loadJob() {
  if (!state.job) return null;
  const path = `/jobs/${encodeURIComponent(state.job)}`;
  let details;
  try {
    details = await get(path);
  } catch (error) {
    return { missing: error.message };
  }
  const exceptions = await get(`${path}/exceptions`);
  const known = state.vertex && details.vertices.some((v) => v.id === state.vertex);
  const vertex = known ? await get(`${path}/vertices/${encodeURIComponent(state.vertex)}`) : null;
  let story = null;
  if (vertex && state.explained) {
    const [subtask, attempt] = state.explained;
    try {
      story = await get(`${path}/vertices/${encodeURIComponent(state.vertex)}/subtasks/${subtask}/explain?attempt=${attempt}`);
    } catch (error) {
      story = { target: error.message, lines: [] };
    }
  }
  return { details, exceptions, vertex, story };
}

function renderAsOf(asOf) {
  const offsets = Object.entries(asOf.offsets).map(([p, o]) => `${p}@${o}`).join(" ");
  document.getElementById("as-of").textContent =
    `as of ${asOf.position}: ${asOf.records} records; last offsets ${offsets || "none"}`;
}

// the slider shows the point the views show, however it was named (a link's `job/0@118`,
// an id, a time): by records, the cut's size; by time, the time named; by the job's events,
// the event's step
function placeSlider(asOf) {
  if (state.following) return;
  const slider = document.getElementById("at");
  if (state.mode === "records") slider.value = asOf.records;
  else if (state.mode === "job" && state.jobEvents.includes(state.at)) {
    slider.value = state.jobEvents.indexOf(state.at);
  } else if (state.mode === "time" && state.at.startsWith("s@")) {
    const named = state.at.slice(2);
    slider.value = /^[0-9]+$/.test(named) ? Number(named) : Date.parse(named);
  }
  document.getElementById("at-text").textContent = state.at;
}

function renderSidebar(overview, slots, job) {
  document.getElementById("nav-running-count").textContent = overview["jobs-running"];
  document.getElementById("nav-completed-count").textContent =
    overview["jobs-finished"] + overview["jobs-cancelled"] + overview["jobs-failed"];
  document.getElementById("nav-tm-count").textContent = overview.taskmanagers;
  document.getElementById("nav-pending-count").textContent = slots.pending.length;
  const shown = Boolean(job && !job.missing);
  for (const id of ["nav-job", "nav-graph", "nav-exceptions"]) {
    document.getElementById(id).hidden = !shown;
  }
  document.getElementById("nav-job").textContent = shown ? `Job ${job.details.name}` : "";
}

function renderOverview(o) {
  const shown = ["taskmanagers", "slots-total", "slots-available", "jobs-running",
    "jobs-finished", "jobs-cancelled", "jobs-failed", "pending-slot-requests"];
  document.getElementById("overview").replaceChildren(...shown.map(
    (key) => el("div", { "data-testid": `overview-${key}` }, el("dt", {}, key), el("dd", {}, o[key]))));
}

function renderJobs(jobs) {
  fill(document.querySelector("#jobs tbody"), jobs.map((job) => el("tr", {
    class: `clickable${job.jid === state.job ? " selected" : ""}`,
    "data-testid": `job-row-${job.jid}`,
    onclick: () => {
      state.job = job.jid; state.vertex = null; state.explained = null;
      if (state.mode === "job") refreshLog().then(render); else render();
    },
  },
  el("td", {}, job.jid), el("td", {}, job.name), el("td", { class: `state ${job.state}` }, job.state),
  el("td", {}, `${job.tasks.finished}/${job.tasks.total} finished`),
  el("td", {}, job.restarts), el("td", {}, seconds(job.duration)))));
}

// a record's writer as `jobledger history` says it (projections/log/writers.py)
function writer(w) {
  if (!w) return "nobody in this part of the log";
  if (w.principal !== null) return `${w.principal} (${w.role})`;
  if (w.key_id === null) return "unsigned";
  return w.refused === null ? `key ${w.key_id} (no keyring)` : `refused signature (key ${w.key_id})`;
}

function renderJob(loaded) {
  const section = document.getElementById("job");
  section.hidden = !loaded;
  if (!loaded) return;
  if (loaded.missing) {
    document.getElementById("job-id").textContent = state.job;
    document.getElementById("job-state").textContent = "not in the log at this point";
    document.getElementById("job-writers").textContent = "";
    for (const id of ["vertices", "exceptions", "statuses"]) fill(document.querySelector(`#${id} tbody`), []);
    document.getElementById("graph").replaceChildren();
    document.getElementById("vertex").hidden = true;
    document.getElementById("root-exception").textContent = "";
    return;
  }
  const job = loaded.details;
  document.getElementById("job-id").textContent = job.jid;
  const stateNode = document.getElementById("job-state");
  stateNode.textContent = job.state;
  stateNode.className = `state ${job.state}`;
  document.getElementById("job-writers").textContent = `submitted by: ${writer(job["submitted-by"])}`
    + (job["cancelled-by"] ? `; cancelled by: ${writer(job["cancelled-by"])}` : "");
  fill(document.querySelector("#statuses tbody"), job["status-history"].map((s) => el("tr", {},
    el("td", { class: `state ${s.status}` }, s.status), el("td", {}, iso(s.timestamp)),
    el("td", {}, writer(s.writer)),
    el("td", {}, s.cause ? `${s.cause.type} by ${writer(s.cause.writer)}` : ""))));
  renderGraph(job);
  fill(document.querySelector("#vertices tbody"), job.vertices.map((v) => el("tr", {
    class: `clickable${v.id === state.vertex ? " selected" : ""}`,
    "data-testid": `vertex-row-${v.id}`,
    onclick: () => { selectVertex(v.id); },
  },
  el("td", {}, v.id), el("td", {}, v.name), el("td", {}, v.parallelism),
  el("td", { class: `state ${v.status}` }, v.status),
  el("td", {}, Object.entries(v.tasks).filter(([, n]) => n).map(([s, n]) => `${s} ${n}`).join(", ")))));
  const exceptions = loaded.exceptions;
  document.getElementById("root-exception").textContent =
    exceptions["root-exception"] ? `root exception: ${exceptions["root-exception"]}` : "no exception";
  fill(document.querySelector("#exceptions tbody"), exceptions.exceptionHistory.entries.map((e) => el("tr", {},
    el("td", {}, iso(e.timestamp)), el("td", {}, e.taskName), el("td", {}, e.taskManagerId),
    el("td", {}, writer(e.writer)), el("td", {}, e.stacktrace))));
  renderVertex(job, loaded.vertex);
  const explain = document.getElementById("explain");
  explain.hidden = !loaded.story;
  explain.textContent = loaded.story ? [loaded.story.target, ...loaded.story.lines].join("\n") : "";
}

const NODE = { width: 210, height: 74, across: 90, down: 26, margin: 12 };

// each vertex's column: one right of its furthest input (a JobGraph is acyclic; a forged
// cycle is cut where it closes), so data flows left to right as in Flink's plan view
function columns(nodes) {
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const column = new Map();
  const place = (id, path) => {
    if (column.has(id)) return column.get(id);
    if (path.has(id) || !byId.has(id)) return -1;
    path.add(id);
    const inputs = byId.get(id).inputs.map((i) => place(i.id, path));
    path.delete(id);
    const at = Math.max(-1, ...inputs) + 1;
    column.set(id, at);
    return at;
  };
  for (const node of nodes) place(node.id, new Set());
  return column;
}

function clip(text, room) {
  return text.length > room ? `${text.slice(0, room - 1)}…` : text;
}

// the job graph as Flink's dashboard draws it: a box per vertex with its name and
// parallelism, coloured by its state; an arrow per edge with its ship strategy
function renderGraph(job) {
  const graph = document.getElementById("graph");
  const nodes = job.plan.nodes;
  const status = new Map(job.vertices.map((v) => [v.id, v.status]));
  const column = columns(nodes);
  const rows = [];
  const at = new Map();
  for (const node of nodes) {
    const c = column.get(node.id);
    rows[c] = (rows[c] || 0) + 1;
    at.set(node.id, {
      x: NODE.margin + c * (NODE.width + NODE.across),
      y: NODE.margin + (rows[c] - 1) * (NODE.height + NODE.down),
    });
  }
  const width = 2 * NODE.margin + rows.length * NODE.width + Math.max(0, rows.length - 1) * NODE.across;
  const height = 2 * NODE.margin + Math.max(1, ...rows.filter(Boolean)) * (NODE.height + NODE.down) - NODE.down;
  graph.setAttribute("viewBox", `0 0 ${width} ${height}`);
  graph.setAttribute("width", width);
  graph.setAttribute("height", height);
  const arrow = svg("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8,
    orient: "auto-start-reverse",
  }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow-head" }));
  const edges = nodes.flatMap((node) => node.inputs.filter((i) => at.has(i.id)).map((input) => {
    const from = at.get(input.id);
    const to = at.get(node.id);
    const [x1, y1] = [from.x + NODE.width, from.y + NODE.height / 2];
    const [x2, y2] = [to.x, to.y + NODE.height / 2];
    const bend = Math.max(30, (x2 - x1) / 2);
    return svg("g", { class: "edge", "data-testid": `graph-edge-${input.id}-${node.id}` },
      svg("title", {}, `${input.id} -> ${node.id}: ${input.ship_strategy}, ${input.exchange}`),
      svg("path", {
        d: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`,
        "marker-end": "url(#arrow)",
      }),
      svg("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 6, "text-anchor": "middle" },
        input.ship_strategy));
  }));
  const boxes = nodes.map((node) => {
    const { x, y } = at.get(node.id);
    const now = status.get(node.id) || "CREATED";
    return svg("g", {
      class: `vertex ${now}${node.id === state.vertex ? " selected" : ""}`,
      "data-testid": `graph-vertex-${node.id}`, "data-state": now,
      onclick: () => { selectVertex(node.id); },
    },
    svg("title", {}, `${node.description}\n${node.operators.join(" -> ")}`),
    svg("rect", { x, y, width: NODE.width, height: NODE.height, rx: 6 }),
    svg("rect", { x, y, width: 6, height: NODE.height, rx: 3, class: "state-bar" }),
    svg("text", { x: x + 14, y: y + 22, class: "name" }, clip(node.description, 28)),
    svg("text", { x: x + 14, y: y + 43 }, `Parallelism: ${node.parallelism}`),
    svg("text", { x: x + 14, y: y + 62, class: "status" }, now));
  });
  graph.replaceChildren(svg("defs", {}, arrow), ...edges, ...boxes);
}

function selectVertex(id) {
  state.vertex = id;
  state.explained = null;
  render();
}

const STATES = ["CREATED", "SCHEDULED", "DEPLOYING", "INITIALIZING", "RUNNING", "FINISHED",
  "CANCELING", "CANCELED", "FAILED"];

// the axis's step: 1, 2 or 5 times a power of ten, about six ticks over the span
function step(width) {
  const rough = width / 6;
  const power = 10 ** Math.floor(Math.log10(Math.max(rough, 1)));
  return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough);
}

function renderVertex(job, vertex) {
  const box = document.getElementById("vertex");
  box.hidden = !vertex;
  if (!vertex) return;
  document.getElementById("vertex-id").textContent = vertex.id;
  // the job's own time: from its submission to its last event (its end, or its latest
  // attempt state), never to the end of a log that went on idling after it
  const attempts = vertex.subtasks.flatMap((t) => t["attempt-history"]);
  const times = [...Object.values(job.timestamps), ...attempts.flatMap((a) => Object.values(a.timestamps))];
  const start = job["start-time"];
  const last = job["end-time"] >= 0 ? job["end-time"] : Math.max(start, ...times.filter((t) => t > 0));
  const span = Math.max(last - start, 1);
  const place = (ms) => `${Math.max(0, Math.min(100, ((ms - start) / span) * 100))}%`;
  const rows = [];
  for (const subtask of vertex.subtasks) {
    for (const attempt of subtask["attempt-history"]) {
      const steps = Object.entries(attempt.timestamps).sort((a, b) => a[1] - b[1]);
      const bars = steps.map(([name, at], i) => {
        const until = i + 1 < steps.length ? steps[i + 1][1] : (attempt["end-time"] >= 0 ? at : last);
        return el("div", {
          class: `bar ${name}`, title: `${name} at ${iso(at)}`,
          style: { left: place(at), width: `calc(${place(until)} - ${place(at)})` },
        });
      });
      const where = `${attempt["taskmanager-id"]}${attempt["slot-index"] != null ? `/${attempt["slot-index"]}` : ""}`;
      rows.push(el("div", {
        class: "label", "data-testid": `attempt-${subtask.subtask}-${attempt.attempt}`,
        title: "explain this attempt",
        onclick: () => { state.explained = [subtask.subtask, attempt.attempt]; render(); },
      },
        `[${subtask.subtask}] #${attempt.attempt} ${attempt.status} ${where}`));
      rows.push(el("div", { class: "track" }, ...bars));
    }
  }
  const every = step(span);
  const ticks = [];
  for (let t = 0; t <= span; t += every) {
    ticks.push(el("span", { class: "tick", style: { left: place(start + t) } }, `+${elapsed(t, every)}`));
  }
  rows.push(el("div", { class: "label axis-label", "data-testid": "axis-start" }, `from ${iso(start)}`));
  rows.push(el("div", { class: "axis", "data-testid": "axis" }, ...ticks));
  document.getElementById("timeline").replaceChildren(...rows);
  const shown = new Set(attempts.flatMap((a) => Object.keys(a.timestamps)));
  document.getElementById("legend").replaceChildren(...STATES.filter((s) => shown.has(s)).map(
    (s) => el("span", { class: "key", "data-testid": `legend-${s}` }, el("span", { class: `swatch bar ${s}` }), s)));
}

function renderTaskManagers(tms, slots) {
  document.getElementById("taskmanagers").replaceChildren(...tms.map((tm) => {
    const rows = slots.task_executors[tm.id] || [];
    const said = tm.registered ? `${tm.id} (${tm.path}): ${tm.freeSlots} of ${tm.slotsNumber} slots free`
      : `${tm.id}: lost (not registered at the ResourceManager); its slot table as it last was`;
    return el("div", { class: `tm${tm.registered ? "" : " lost"}`, "data-testid": `tm-${tm.id}` },
      el("div", {}, said),
      el("div", { class: "slots" }, ...rows.map((s) => el("span", {
        class: `slot ${s.at_resource_manager}`, "data-testid": `slot-${tm.id}-${s.index}`,
      }, `${s.index}: ${s.at_resource_manager}${s.job ? ` to ${s.job}` : ""}`))));
  }));
  fill(document.querySelector("#pending tbody"), slots.pending.map((p) => el("tr", {},
    el("td", {}, p.job_id), el("td", {}, p.slot_request_id), el("td", {}, p.profile),
    el("td", {}, p.reason))));
}

async function refreshLog() {
  const response = await fetch("/log");
  const log = await response.json();
  state.log = log;
  state.records = log.records;
  if (state.mode === "job" && state.job) {
    const history = await (await fetch(`/jobs/${encodeURIComponent(state.job)}/history?at=end`)).json();
    state.jobEvents = (history.events || []).map((e) => e.position);
  }
  const slider = document.getElementById("at");
  const [min, max] = range();
  slider.min = min;
  slider.max = max;
  if (state.following) slider.value = max;
  const marks = state.mode === "records" ? log.marks : [];
  slider.title = log.marks.map((m) => `${m.count}: ${m.job} ${m.status}`).join("\n");
  document.getElementById("marks").replaceChildren(
    ...marks.map((m) => el("option", { value: m.count, label: `${m.job} ${m.status}` })));
}

function range() {
  const log = state.log;
  if (state.mode === "time" && log.records) return [log["first-timestamp"], log["last-timestamp"]];
  if (state.mode === "job" && state.jobEvents.length) return [0, state.jobEvents.length - 1];
  return [0, log.records];
}

function pointOf(value) {
  if (state.mode === "time") return `s@${value}`;
  if (state.mode === "job" && state.jobEvents.length) return state.jobEvents[value];
  return `count:${value}`;
}

function moved() {
  const slider = document.getElementById("at");
  const value = Number(slider.value);
  state.following = value >= range()[1];
  state.at = state.following ? "end" : pointOf(value);
  document.getElementById("at-text").textContent = state.following ? `end (${state.records})` : state.at;
  render();
}

async function slideBy() {
  state.mode = document.getElementById("slide").value;
  state.following = true;
  await refreshLog();
  moved();
}

async function start() {
  readUrl();
  const mode = document.getElementById("slide");
  mode.value = state.mode;
  mode.addEventListener("change", slideBy);
  await refreshLog();
  const slider = document.getElementById("at");
  slider.addEventListener("input", moved);
  document.getElementById("at-text").textContent = state.following ? `end (${state.records})` : state.at;
  render();
  setInterval(async () => {
    const before = state.records;
    await refreshLog();
    if (state.following && state.records !== before) moved();
  }, 2000);
}

start();
