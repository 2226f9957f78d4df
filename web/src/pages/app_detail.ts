// One app: its state, replicas and requests over time (the App JSON and the gateway's counters in
// /metrics, sampled every 2 s while the page is open), its events and replicas, the newest
// replica's log, scale / stop / start / delete, a link to the chat playground, and the token
// helper: an app token for the app's labels, shown once, with curl and openai snippets.
import { api, canWrite, messageOf, send, whoami } from "../api";
import { stateBadge } from "../components/badge";
import { copyBlock } from "../components/copy";
import { Field, input } from "../components/form";
import { lineChart, type Series } from "../components/linechart";
import { errorNotice, StatusLine } from "../components/notice";
import { dataTable } from "../components/table";
import { every, h, replace, uid } from "../dom";
import { dateTime } from "../format";
import { parseRecord } from "../logs";
import { metricValue, readMetrics } from "../prometheus";
import { navigate, registerPage } from "../router";
import type { App, Role } from "../types";
import { APP_POLL_MS, scalingText } from "./apps";

/** Samples kept for the charts (10 minutes at 2 s), and the span the charts show. */
const MAX_SAMPLES = 300;
const CHART_WINDOW_S = 600;
const LOG_REFRESH_MS = 10000;

/** The points at or after `from`, starting with the value the series had at `from`. */
function inWindow(points: [number, number][], from: number): [number, number][] {
  const shown = points.filter(([t]) => t >= from);
  const before = points.filter(([t]) => t < from).pop();
  if (before) shown.unshift([from, before[1]]);
  return shown;
}

/** Ready and desired replicas over time from the app's events, oldest first. The ready count is
 * known only from "created with N replica(s)" on (an app's first event), else left out. */
export function seedFromEvents(app: App, ready: [number, number][], desired: [number, number][]): void {
  const readyJobs = new Set<string>();
  let knowsReady = false;
  for (const e of app.status.events) {
    const t = Date.parse(e.at) / 1000;
    if (!isFinite(t)) continue;
    let m = /^created with (\d+) replica/.exec(e.what);
    if (m) {
      knowsReady = true;
      desired.push([t, Number(m[1])]);
      ready.push([t, 0]);
      continue;
    }
    m = /^scale (\d+) -> (\d+)/.exec(e.what);
    if (m) {
      desired.push([t, Number(m[2])]);
      continue;
    }
    m = /^replica (\S+) (is ready|ended|failed its probe)/.exec(e.what);
    if (m && knowsReady) {
      if (m[2] === "is ready") readyJobs.add(m[1]);
      else readyJobs.delete(m[1]);
      ready.push([t, readyJobs.size]);
    }
  }
}
const LOG_LINES_SHOWN = 300;

/** The app's labels as a token selector ("team=support,tier=gold"); platform labels left out. */
export function selectorOf(app: App): string {
  return Object.entries(app.spec.labels ?? {})
    .filter(([k]) => !k.startsWith("sovai."))
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
}

const clock = (s: number) => new Date(s * 1000).toLocaleTimeString(undefined, { hour12: false });

registerPage({
  path: "/deployments/:id",
  title: "App",
  async render(ctx) {
    const id = ctx.params.id;
    const me = await whoami();
    const writable = canWrite(me);
    let app: App;
    try {
      app = await api<App>("GET", `/v1/apps/${encodeURIComponent(id)}`, undefined, { signal: ctx.signal });
    } catch (error) {
      ctx.root.append(errorNotice(error, `App ${id}`));
      return;
    }
    ctx.setTitle(`App ${app.name}`);
    const path = `/v1/apps/${encodeURIComponent(app.id)}`;
    const status = new StatusLine();
    const header = h("div", { class: "job-head" });
    const facts = h("dl", { class: "facts" });
    const charts = h("div", { class: "grid-2" });
    const replicaChart = h("div", { class: "chart-holder", id: "replicas-chart" });
    const rateChart = h("div", { class: "chart-holder", id: "requests-chart" });
    charts.append(
      h("section", { class: "card", "aria-labelledby": "rep-h" }, h("h2", { id: "rep-h" }, "Replicas over time"), replicaChart),
      h("section", { class: "card", "aria-labelledby": "rate-h" }, h("h2", { id: "rate-h" }, "Requests per second"), rateChart),
    );
    const events = h("ol", { class: "history", reversed: true });
    const replicas = h("div");
    ctx.root.append(
      header,
      status.el,
      h("div", { class: "grid-2 wide-first" },
        h("section", { class: "card", "aria-labelledby": "app-facts-h" }, h("h2", { id: "app-facts-h" }, "Details"), facts),
        tokenHelper(app, me.role, writable, ctx.signal)),
      charts,
      writable ? scaleForm(app, path, status, (next) => { app = next; draw(); }, ctx.signal) : "",
      h("section", { class: "card", "aria-labelledby": "replicas-h" }, h("h2", { id: "replicas-h" }, "Replicas"), replicas),
      h("section", { class: "card", "aria-labelledby": "events-h" }, h("h2", { id: "events-h" }, "Events, newest first"), events),
      replicaLog(path, ctx.signal),
    );

    const act = async (what: "stop" | "start") => {
      try {
        app = await api<App>("POST", `${path}/${what}`, undefined, { signal: ctx.signal });
        status.show(what === "stop" ? "Stopping: its replicas are drained and stopped." : "Starting again.", "ok");
        draw();
      } catch (error) {
        status.error(error, `The app cannot ${what}`);
      }
    };
    const remove = async () => {
      if (!confirm(`Delete app ${app.name}? Its replicas stop and its URL stops answering.`)) return;
      try {
        await api("DELETE", path, undefined, { signal: ctx.signal });
        navigate("/deployments");
      } catch (error) {
        status.error(error, "The app cannot be deleted");
      }
    };

    // Samples: seconds → replicas (ready, desired) and requests per second.
    const ready: [number, number][] = [];
    const desired: [number, number][] = [];
    const rate: [number, number][] = [];
    // Before this page opened: the app's events (its last 32) say when the desired count changed
    // ("created with 1 replica(s)", "scale 1 -> 2: ...") and when replicas became ready or ended.
    seedFromEvents(app, ready, desired);
    let lastCount: { t: number; n: number } | null = null;

    let drawnKey = "";
    const draw = () => {
      const key = JSON.stringify([app.state, app.reason, app.status.replicas, app.status.events.length, app.spec]);
      if (key === drawnKey) return;
      drawnKey = key;
      const stoppable = ["QUEUED", "INITIALIZING", "RUNNING", "SCALING"].includes(app.state);
      const startable = app.state === "STOPPED" || app.state === "FAILED";
      replace(
        header,
        stateBadge(app.state),
        h("span", { class: "job-id" }, app.id),
        h("span", { class: "actions" },
          h("a", { href: `/playground?app=${encodeURIComponent(app.id)}`, class: "button primary" }, "Chat with it"),
          writable && stoppable ? h("button", { type: "button", class: "danger", onclick: () => void act("stop") }, "Stop") : "",
          writable && startable ? h("button", { type: "button", onclick: () => void act("start") }, "Start") : "",
          writable ? h("button", { type: "button", class: "danger", onclick: () => void remove() }, "Delete") : ""),
      );
      const spec = app.spec;
      const rows: [string, Node | string][] = [
        ["URL", h("code", { class: "app-url" }, app.url)],
        ["OpenAI base URL", h("code", {}, `${app.url}v1`)],
        ["Model", h("code", {}, spec.model ?? spec.image ?? "")],
      ];
      if (spec.base_model) rows.push(["Base model", h("code", {}, spec.base_model)]);
      rows.push(
        ["Flavor", `${spec.flavor} × ${spec.units ?? 1} per replica`],
        ["Scaling", scalingText(spec)],
        ["Replicas", `${app.status.ready_replicas} of ${app.status.desired_replicas} ready`],
        ["Labels", Object.keys(spec.labels ?? {}).length ? h("code", {}, selectorOf(app) || "(platform labels only)") : "none"],
        ["Access", spec.unsecure_http ? "public (no token)" : "a token of this project whose selector matches the labels"],
        ["Created", dateTime(new Date(app.created_at))],
      );
      if (app.reason) rows.push(["Reason", app.reason]);
      replace(facts, rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
      replace(
        replicas,
        dataTable(
          [
            { label: "Replica (job)", cell: (r) => h("a", { href: `/jobs/${encodeURIComponent(r.job)}` }, r.job) },
            { label: "Job state", cell: (r) => stateBadge(r.state) },
            { label: "Ready", cell: (r) => (r.draining ? "draining" : r.ready ? "yes" : "not yet") },
            { label: "Generation", className: "num", cell: (r) => String(r.generation) },
          ],
          app.status.replicas,
          { caption: "Replicas", hideCaption: true, empty: "No replica runs now.", rowKey: (r) => r.job },
        ),
      );
      replace(
        events,
        [...app.status.events].reverse().map((e) => h("li", {}, h("time", { datetime: e.at }, dateTime(new Date(e.at))), " ", e.what)),
      );
    };
    draw();

    const drawCharts = () => {
      const now = Date.now() / 1000;
      const from = Math.max(Math.min(ready[0]?.[0] ?? now, desired[0]?.[0] ?? now, now - 60), now - CHART_WINDOW_S);
      const replicaSeries: Series[] = [
        { name: "ready replicas", points: inWindow(ready, from) },
        { name: "desired replicas", points: inWindow(desired, from) },
      ];
      replace(
        replicaChart,
        lineChart(replicaSeries, { title: "Replicas, sampled every 2 s", xLabel: "time", yLabel: "replicas", xFormat: clock, yDomain: [0, 1], step: true, xDomain: [from, now] }),
      );
      replace(
        rateChart,
        lineChart([{ name: "requests per second", points: rate }], { title: "Requests per second through the gateway", xLabel: "time", yLabel: "requests/s", xFormat: clock, yDomain: [0, 1], xDomain: [from, now] }),
      );
    };

    every(
      APP_POLL_MS,
      async () => {
        const t = Date.now() / 1000;
        try {
          app = await api<App>("GET", path, undefined, { signal: ctx.signal });
          draw();
        } catch (error) {
          if (!ctx.signal.aborted) status.error(error, "The app's state cannot be read");
          return;
        }
        ready.push([t, app.status.ready_replicas]);
        desired.push([t, app.status.desired_replicas]);
        try {
          const n = metricValue(await readMetrics(ctx.signal), "sovai_gateway_requests_total", { app: app.id }) ?? 0;
          if (lastCount && t > lastCount.t) rate.push([t, Math.max(0, n - lastCount.n) / (t - lastCount.t)]);
          lastCount = { t, n };
        } catch {
          /* no metrics: the rate chart stays as it is */
        }
        for (const s of [ready, desired, rate]) while (s.length > MAX_SAMPLES) s.shift();
        drawCharts();
      },
      ctx.signal,
    );
  },
});

function scaleForm(app: App, path: string, status: StatusLine, done: (app: App) => void, signal: AbortSignal): HTMLElement {
  const auto = app.spec.autoscaling;
  const replicas = new Field("replicas", "Replicas", input({ type: "number", min: 0, max: 64, value: app.spec.replicas ?? 1, inputmode: "numeric" }));
  const min = new Field("min_replicas", "Minimum replicas", input({ type: "number", min: 0, max: 64, value: auto?.min_replicas ?? 1, inputmode: "numeric" }));
  const max = new Field("max_replicas", "Maximum replicas", input({ type: "number", min: 1, max: 64, value: auto?.max_replicas ?? 2, inputmode: "numeric" }));
  const button = h("button", { type: "submit" }, "Scale");
  const form = h(
    "form",
    { class: "card", "aria-labelledby": "scale-h", novalidate: true },
    h("h2", { id: "scale-h" }, "Scale"),
    h("div", { class: "grid-2" }, ...(auto ? [min.el, max.el] : [replicas.el])),
    button,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = auto
      ? { autoscaling: { ...auto, min_replicas: Number(min.control.value), max_replicas: Number(max.control.value) } }
      : { replicas: Number(replicas.control.value) };
    button.disabled = true;
    for (const f of [replicas, min, max]) f.setError("");
    try {
      const next = await api<App>("POST", `${path}/scale`, body, { signal });
      status.show(auto ? "Scaling bounds changed." : `Scaling to ${body.replicas} replica(s).`, "ok");
      done(next);
    } catch (error) {
      status.error(error, "The app cannot be scaled");
      (auto ? min : replicas).setError(messageOf(error));
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

/** The token helper: creates a token that reaches this app (its labels as the selector), shows
 * it once with a copy button and the curl / openai code to call the app. */
function tokenHelper(app: App, role: Role, writable: boolean, signal: AbortSignal): HTMLElement {
  const section = h("section", { class: "card token-helper", "aria-labelledby": "token-h" }, h("h2", { id: "token-h" }, "Call it"));
  const base = `${app.url}v1`;
  if (app.spec.unsecure_http) {
    section.append(h("p", {}, "This app is public: no token is needed."), copyBlock("curl command", curlSnippet(base, app.name, ""), { multiline: true }));
    return section;
  }
  const selector = selectorOf(app);
  section.append(
    h("p", { class: "help" },
      selector
        ? `An app token selects the labels ${selector}: it reaches this app (and other apps with these labels), and nothing that carries no such labels.`
        : "This app has no labels, so a token for it is a token of the whole project (it can read the project's other resources too). Give the app labels to make narrower tokens."),
  );
  if (!writable) {
    section.append(h("p", {}, `Your token has role '${role}': use it as the API key, or ask an operator for an app token.`));
    return section;
  }
  const nameId = uid("token-name");
  const name = h("input", { type: "text", id: nameId, value: `app-${app.name}`, maxlength: 128, autocomplete: "off", spellcheck: "false" });
  const result = h("div", { class: "token-result" });
  const status = new StatusLine();
  const button = h("button", { type: "submit", class: "primary" }, "Create an app token");
  const form = h("form", { novalidate: true },
    h("div", { class: "field" }, h("label", { for: nameId }, "Token name"), name),
    button, status.el, result);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    status.clear();
    try {
      const body: Record<string, string> = { role: "read", name: name.value.trim() || `app-${app.name}` };
      if (selector) body.labels = selector;
      const created = await api<{ token: string; id: string }>("POST", "/v1/tokens", body, { signal });
      replace(
        result,
        h("p", { class: "notice ok", role: "status" }, `Token ${created.id} created. This is the only time it is shown: copy it now.`),
        copyBlock("App token", created.token, { secret: true }),
        copyBlock("curl command", curlSnippet(base, app.name, created.token), { multiline: true }),
        copyBlock("Python (openai)", pythonSnippet(base, app.name, created.token), { multiline: true }),
        h("p", {}, h("a", { href: `/playground?app=${encodeURIComponent(app.id)}` }, "Try it in the chat playground"), " (paste the token as its API key)."),
      );
    } catch (error) {
      status.error(error, "The token was not created");
    } finally {
      button.disabled = false;
    }
  });
  section.append(form);
  return section;
}

function curlSnippet(base: string, model: string, token: string): string {
  return [
    `curl ${base}/chat/completions \\`,
    token ? `  -H "Authorization: Bearer ${token}" \\` : "",
    `  -H "Content-Type: application/json" \\`,
    `  -d '{"model": "${model}", "messages": [{"role": "user", "content": "Hello"}]}'`,
  ]
    .filter(Boolean)
    .join("\n");
}

function pythonSnippet(base: string, model: string, token: string): string {
  return [
    "from openai import OpenAI",
    "",
    `client = OpenAI(base_url="${base}", api_key="${token}")`,
    "answer = client.chat.completions.create(",
    `    model="${model}",`,
    `    messages=[{"role": "user", "content": "Hello"}],`,
    ")",
    "print(answer.choices[0].message.content)",
  ].join("\n");
}

/** The newest replica's log (GET /v1/apps/{id}/logs), last lines, refreshed on demand. */
function replicaLog(path: string, signal: AbortSignal): HTMLElement {
  const list = h("div", { class: "log", role: "log", "aria-label": "Replica log", tabindex: "0" });
  const note = h("p", { class: "help" }, "The newest replica's log (the engine's start, requests, errors), reread every 10 s.");
  let last = "";
  const load = async () => {
    try {
      const response = await send("GET", `${path}/logs`, undefined, { signal });
      const text = await response.text();
      if (text === last && list.childElementCount) return;
      last = text;
      const atBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 4;
      const records = text.split("\n").filter(Boolean).slice(-LOG_LINES_SHOWN);
      replace(
        list,
        records.length
          ? records.map((r) => {
              const line = parseRecord(r);
              return h("div", { class: `line ${line.source}` },
                line.time ? h("time", { datetime: line.time.toISOString() }, line.time.toLocaleTimeString(undefined, { hour12: false })) : "",
                h("span", { class: "text" }, line.text));
            })
          : h("div", { class: "line" }, h("span", { class: "text" }, "(nothing yet)")),
      );
      if (atBottom) list.scrollTop = list.scrollHeight;
    } catch (error) {
      if (signal.aborted) return;
      replace(list, h("div", { class: "line stderr" }, h("span", { class: "text" }, `The log cannot be read: ${messageOf(error)}`)));
    }
  };
  every(LOG_REFRESH_MS, load, signal);
  return h("section", { class: "card", "aria-labelledby": "app-log-h" },
    h("h2", { id: "app-log-h" }, "Replica log"), note,
    h("p", {}, h("button", { type: "button", onclick: () => void load() }, "Refresh log")), list);
}
