// The jobledger dashboard: every view reads the REST API as of one point of the log, the
// slider's. Text goes into the page through textContent only: the log may be forged.
"use strict";

const state = {
  at: "end", job: null, vertex: null, explained: null, records: 0, following: true, generation: 0,
};

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

async function get(path) {
  const sep = path.includes("?") ? "&" : "?";
  const response = await fetch(`${path}${sep}at=${encodeURIComponent(state.at)}`);
  const body = await response.json();
  if (!response.ok) throw new Error((body.errors || [response.statusText]).join("; "));
  return body;
}

function iso(ms) {
  return ms > 0 ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "-";
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
    document.body.dataset.renderedAt = state.at;
  } catch (error) {
    if (mine === state.generation) showError(error.message);
  }
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
    onclick: () => { state.job = job.jid; state.vertex = null; state.explained = null; render(); },
  },
  el("td", {}, job.jid), el("td", {}, job.name), el("td", { class: `state ${job.state}` }, job.state),
  el("td", {}, `${job.tasks.finished}/${job.tasks.total} finished`),
  el("td", {}, job.restarts), el("td", {}, seconds(job.duration)))));
}

function renderJob(loaded) {
  const section = document.getElementById("job");
  section.hidden = !loaded;
  if (!loaded) return;
  if (loaded.missing) {
    document.getElementById("job-id").textContent = state.job;
    document.getElementById("job-state").textContent = "not in the log at this point";
    for (const id of ["vertices", "exceptions"]) fill(document.querySelector(`#${id} tbody`), []);
    document.getElementById("vertex").hidden = true;
    document.getElementById("root-exception").textContent = "";
    return;
  }
  const job = loaded.details;
  document.getElementById("job-id").textContent = job.jid;
  const stateNode = document.getElementById("job-state");
  stateNode.textContent = job.state;
  stateNode.className = `state ${job.state}`;
  fill(document.querySelector("#vertices tbody"), job.vertices.map((v) => el("tr", {
    class: `clickable${v.id === state.vertex ? " selected" : ""}`,
    "data-testid": `vertex-row-${v.id}`,
    onclick: () => { state.vertex = v.id; state.explained = null; render(); },
  },
  el("td", {}, v.id), el("td", {}, v.name), el("td", {}, v.parallelism),
  el("td", { class: `state ${v.status}` }, v.status),
  el("td", {}, Object.entries(v.tasks).filter(([, n]) => n).map(([s, n]) => `${s} ${n}`).join(", ")))));
  const exceptions = loaded.exceptions;
  document.getElementById("root-exception").textContent =
    exceptions["root-exception"] ? `root exception: ${exceptions["root-exception"]}` : "no exception";
  fill(document.querySelector("#exceptions tbody"), exceptions.exceptionHistory.entries.map((e) => el("tr", {},
    el("td", {}, iso(e.timestamp)), el("td", {}, e.taskName), el("td", {}, e.taskManagerId),
    el("td", {}, e.stacktrace))));
  renderVertex(job, loaded.vertex);
  const explain = document.getElementById("explain");
  explain.hidden = !loaded.story;
  explain.textContent = loaded.story ? [loaded.story.target, ...loaded.story.lines].join("\n") : "";
}

function renderVertex(job, vertex) {
  const box = document.getElementById("vertex");
  box.hidden = !vertex;
  if (!vertex) return;
  document.getElementById("vertex-id").textContent = vertex.id;
  // the scale runs from the vertex's first deployment (else the job's start) to "now"
  const starts = vertex.subtasks.flatMap((t) => t["attempt-history"]).map((a) => a["start-time"]).filter((t) => t >= 0);
  const start = starts.length ? Math.min(...starts) : job["start-time"];
  const span = Math.max(job.now - start, 1);
  const place = (ms) => `${Math.max(0, Math.min(100, ((ms - start) / span) * 100))}%`;
  const rows = [];
  for (const subtask of vertex.subtasks) {
    for (const attempt of subtask["attempt-history"]) {
      const steps = Object.entries(attempt.timestamps).sort((a, b) => a[1] - b[1]);
      const bars = steps.map(([name, at], i) => {
        const until = i + 1 < steps.length ? steps[i + 1][1] : (attempt["end-time"] >= 0 ? at : job.now);
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
  document.getElementById("timeline").replaceChildren(...rows);
}

function renderTaskManagers(tms, slots) {
  document.getElementById("taskmanagers").replaceChildren(...tms.map((tm) => {
    const rows = slots.task_executors[tm.id] || [];
    return el("div", { class: "tm", "data-testid": `tm-${tm.id}` },
      el("div", {}, `${tm.id} (${tm.path || "unregistered"}): ${tm.freeSlots} of ${tm.slotsNumber} slots free`),
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
  const slider = document.getElementById("at");
  state.records = log.records;
  slider.max = log.records;
  if (state.following) slider.value = log.records;
  slider.title = log.marks.map((m) => `${m.count}: ${m.job} ${m.status}`).join("\n");
  document.getElementById("marks").replaceChildren(
    ...log.marks.map((m) => el("option", { value: m.count, label: `${m.job} ${m.status}` })));
}

function moved() {
  const slider = document.getElementById("at");
  const value = Number(slider.value);
  state.following = value >= state.records;
  state.at = state.following ? "end" : `count:${value}`;
  document.getElementById("at-text").textContent = state.following ? `end (${state.records})` : state.at;
  render();
}

async function start() {
  await refreshLog();
  const slider = document.getElementById("at");
  slider.addEventListener("input", moved);
  moved();
  setInterval(async () => {
    const before = state.records;
    await refreshLog();
    if (state.following && state.records !== before) moved();
  }, 2000);
}

start();
