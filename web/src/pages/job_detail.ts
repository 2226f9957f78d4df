// One job: its facts and state history (refreshed every 2 s until it ends), its live log (follow,
// search, download), its loss curves from metrics.jsonl in its rw volume, and Stop / Delete.
import { api, canWrite, messageOf, whoami } from "../api";
import { stateBadge } from "../components/badge";
import { lineChart } from "../components/linechart";
import { errorNotice, StatusLine } from "../components/notice";
import { every, h, replace, uid } from "../dom";
import { dateTime, duration, fromMicros, liveSync } from "../format";
import { followLog, LineAssembler, readWholeLog, type LogLine } from "../logs";
import { lossSeries, metricsLocations, parseMetrics } from "../metrics";
import { navigate, registerPage } from "../router";
import { getText } from "../s3";
import { TERMINAL_STATES, type Job } from "../types";
import { JOB_POLL_MS, jobLabel, runSeconds } from "./jobs";

/** Lines kept on the page; older ones are dropped (the download has them all). */
const MAX_LOG_LINES = 5000;
const METRICS_POLL_MS = 10000;

registerPage({
  path: "/jobs/:id",
  title: "Job",
  async render(ctx) {
    const id = ctx.params.id;
    const me = await whoami();
    let job: Job;
    try {
      job = await api<Job>("GET", `/v1/jobs/${encodeURIComponent(id)}`, undefined, { signal: ctx.signal });
    } catch (error) {
      ctx.root.append(errorNotice(error, `Job ${id}`));
      return;
    }
    ctx.setTitle(`Job ${jobLabel(job)}`);
    const status = new StatusLine();
    const header = h("div", { class: "job-head" });
    const facts = h("dl", { class: "facts" });
    const history = h("ol", { class: "history" });
    const logView = new LogView(id);
    const metrics = new MetricsView(job, canWrite(me), ctx.signal);
    ctx.root.append(
      header,
      status.el,
      h("div", { class: "grid-2 wide-first" },
        h("section", { "aria-labelledby": "facts-h", class: "card" }, h("h2", { id: "facts-h" }, "Details"), facts),
        h("section", { "aria-labelledby": "history-h", class: "card" }, h("h2", { id: "history-h" }, "State history"), history)),
      metrics.el,
      logView.el,
    );

    const stop = async () => {
      try {
        job = await api<Job>("POST", `/v1/jobs/${encodeURIComponent(id)}/stop`, undefined, { signal: ctx.signal });
        status.show("Stop requested: the job is being stopped (its rw volumes are still synced).", "ok");
        draw();
      } catch (error) {
        status.error(error, "The job cannot be stopped");
      }
    };
    const remove = async () => {
      if (!confirm(`Delete job ${jobLabel(job)}, its record and its log? Its outputs in buckets stay.`)) return;
      try {
        await api("DELETE", `/v1/jobs/${encodeURIComponent(id)}`, undefined, { signal: ctx.signal });
        navigate("/jobs");
      } catch (error) {
        status.error(error, "The job cannot be deleted");
      }
    };

    let drawnKey = "";
    const draw = () => {
      // The header's buttons are redrawn only when the state changes (keyboard focus stays put);
      // the facts every time ("Ran" grows).
      const key = JSON.stringify([job.status, job.spec]);
      const changed = key !== drawnKey;
      drawnKey = key;
      const terminal = TERMINAL_STATES.has(job.status.state);
      if (changed) replace(
        header,
        stateBadge(job.status.state),
        h("span", { class: "job-id" }, job.id),
        canWrite(me)
          ? h("span", { class: "actions" },
              !terminal ? h("button", { type: "button", class: "danger", onclick: () => void stop() }, "Stop") : "",
              terminal ? h("button", { type: "button", class: "danger", onclick: () => void remove() }, "Delete") : "")
          : "",
      );
      const spec = job.spec;
      const rows: [string, Node | string][] = [
        ["Image", h("code", {}, spec.image)],
        ["Flavor", `${spec.flavor} × ${spec.units ?? 1}`],
        ["Command", spec.command?.length ? h("code", { class: "argv" }, spec.command.map((a) => JSON.stringify(a)).join(" ")) : "(the image's)"],
        ["Volumes", spec.volumes?.length ? h("ul", { class: "plain" }, spec.volumes.map((v) => h("li", {}, h("code", {}, v)))) : "none"],
        ["Submitted", dateTime(fromMicros(job.created_unix_micros))],
      ];
      const ran = runSeconds(job);
      if (ran !== null) rows.push(["Ran", duration(ran)]);
      if (job.status.exit_code !== undefined) rows.push(["Exit code", String(job.status.exit_code)]);
      if (job.status.exit_signal !== undefined) rows.push(["Signal", String(job.status.exit_signal)]);
      if (job.status.reason) rows.push(["Reason", job.status.reason]);
      if (job.status.retries) rows.push(["Retries", String(job.status.retries)]);
      // While it runs: what its rw volumes still have to upload, and what went up.
      if (job.status.sync) rows.push(["Live sync", h("span", { "data-live-sync": "" }, liveSync(job.status.sync))]);
      replace(facts, rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
      if (!changed) return;
      replace(
        history,
        job.status.history.map((t, i) => {
          const next = job.status.history[i + 1];
          const took = next ? ` (${duration((next.at_unix_micros - t.at_unix_micros) / 1e6)})` : "";
          // A restart says why the try ended and why the job was queued again.
          return h("li", {}, stateBadge(t.state), h("time", { datetime: fromMicros(t.at_unix_micros).toISOString() }, ` ${dateTime(fromMicros(t.at_unix_micros))}`), took, t.reason ? h("span", { class: "help" }, ` ${t.reason}`) : "");
        }),
      );
      metrics.onJob(job);
    };
    draw();

    // The state until the job ends, then once more (FINALIZING's outputs reach the chart).
    let ended = TERMINAL_STATES.has(job.status.state);
    if (!ended) {
      const polling = new AbortController();
      ctx.signal.addEventListener("abort", () => polling.abort());
      every(
        JOB_POLL_MS,
        async () => {
          try {
            job = await api<Job>("GET", `/v1/jobs/${encodeURIComponent(id)}`, undefined, { signal: ctx.signal });
            draw();
            if (TERMINAL_STATES.has(job.status.state) && !ended) {
              ended = true;
              polling.abort();
            }
          } catch (error) {
            if (!ctx.signal.aborted) status.error(error, "The job's state cannot be read");
          }
        },
        polling.signal,
      );
    }

    // The log: follow it; when the stream ends early (network, server restart), continue from
    // where it stopped unless the job has ended.
    void (async () => {
      let offset = 0;
      const assembler = new LineAssembler();
      for (let attempt = 0; !ctx.signal.aborted; attempt++) {
        try {
          offset = await followLog(
            id,
            offset,
            (record) => {
              const line = assembler.push(record);
              if (line) logView.add(line);
            },
            ctx.signal,
          );
          attempt = 0;
          if (TERMINAL_STATES.has(job.status.state) || ctx.signal.aborted) break;
        } catch (error) {
          if (ctx.signal.aborted) return;
          logView.note(`The log stream was interrupted (${messageOf(error)}); reconnecting…`);
        }
        await new Promise((r) => setTimeout(r, Math.min(1000 * (attempt + 1), 5000)));
        if (!ctx.signal.aborted) {
          try {
            job = await api<Job>("GET", `/v1/jobs/${encodeURIComponent(id)}`, undefined, { signal: ctx.signal });
          } catch {
            /* the poll above reports it */
          }
        }
      }
      logView.ended();
    })();
  },
});

class LogView {
  readonly el: HTMLElement;
  private readonly list: HTMLElement;
  private readonly search: HTMLInputElement;
  private readonly follow: HTMLInputElement;
  private readonly count: HTMLElement;
  private readonly state: HTMLElement;
  private total = 0;
  private dropped = 0;

  constructor(private readonly jobId: string) {
    const searchId = uid("log-search");
    const followId = uid("log-follow");
    this.search = h("input", { type: "search", id: searchId, placeholder: "text in the line", autocomplete: "off", spellcheck: "false" });
    this.follow = h("input", { type: "checkbox", id: followId, checked: true });
    this.count = h("span", { class: "help", "aria-live": "polite" });
    this.state = h("span", { class: "help" }, "Following the log live…");
    this.list = h("div", { class: "log", role: "log", "aria-live": "off", "aria-label": "Job log", tabindex: "0" });
    const download = h("button", { type: "button", onclick: () => void this.download() }, "Download log");
    this.el = h(
      "section",
      { class: "card", "aria-labelledby": "log-h" },
      h("h2", { id: "log-h" }, "Log"),
      h("div", { class: "toolbar" },
        h("span", { class: "inline-field" }, h("label", { for: searchId }, "Search"), this.search),
        h("span", { class: "inline-field" }, this.follow, h("label", { for: followId }, "Follow")),
        download,
        this.count),
      this.state,
      this.list,
    );
    this.search.addEventListener("input", () => this.applyFilter());
    this.follow.addEventListener("change", () => this.scroll());
  }

  add(line: LogLine): void {
    const row = h(
      "div",
      { class: `line ${line.source}` },
      line.time ? h("time", { datetime: line.time.toISOString() }, line.time.toLocaleTimeString(undefined, { hour12: false })) : "",
      line.source !== "stdout" ? h("span", { class: "src" }, line.source) : "",
      h("span", { class: "text" }, line.text),
    );
    row.hidden = !this.matches(row);
    this.list.append(row);
    this.total += 1;
    while (this.list.childElementCount > MAX_LOG_LINES) {
      this.list.firstElementChild?.remove();
      this.dropped += 1;
    }
    this.updateCount();
    this.scroll();
  }

  note(text: string): void {
    this.state.textContent = text;
  }

  ended(): void {
    this.state.textContent = "The job has ended: this is its whole log.";
  }

  private matches(row: Element): boolean {
    const q = this.search.value.trim().toLowerCase();
    return !q || (row.textContent ?? "").toLowerCase().includes(q);
  }

  private applyFilter(): void {
    for (const row of Array.from(this.list.children) as HTMLElement[]) row.hidden = !this.matches(row);
    this.updateCount();
    this.scroll();
  }

  private updateCount(): void {
    const q = this.search.value.trim();
    const shown = q ? Array.from(this.list.children).filter((r) => !(r as HTMLElement).hidden).length : this.list.childElementCount;
    const base = q ? `${shown} of ${this.list.childElementCount} lines match` : `${this.total} lines`;
    this.count.textContent = this.dropped ? `${base} (the first ${this.dropped} are not shown; download the log for all)` : base;
  }

  private scroll(): void {
    if (this.follow.checked) this.list.scrollTop = this.list.scrollHeight;
  }

  private async download(): Promise<void> {
    try {
      const text = await readWholeLog(this.jobId);
      const url = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
      const a = h("a", { href: url, download: `${this.jobId}.log` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (error) {
      this.note(`The log cannot be downloaded: ${messageOf(error)}`);
    }
  }
}

class MetricsView {
  readonly el: HTMLElement;
  private readonly chart = h("div", { class: "chart-holder", id: "loss-chart" });
  private readonly status = new StatusLine();
  private readonly locations: ReturnType<typeof metricsLocations>;
  private readonly choice: HTMLSelectElement | null = null;
  private job: Job;
  private loading = false;
  private lastText: string | null | undefined = undefined;
  private timer: number | undefined;
  private finalLoad = false;
  private pushButton: HTMLButtonElement | null = null;

  constructor(job: Job, writable: boolean, private readonly signal: AbortSignal) {
    this.job = job;
    this.locations = metricsLocations(job.spec.volumes);
    const controls: Node[] = [];
    if (this.locations.length > 1) {
      const id = uid("metrics-source");
      this.choice = h("select", { id }, this.locations.map((l, i) => h("option", { value: String(i) }, `${l.bucket}/${l.key}`)));
      this.choice.addEventListener("change", () => void this.load());
      controls.push(h("span", { class: "inline-field" }, h("label", { for: id }, "From"), this.choice));
    }
    if (writable && this.locations.length) {
      this.pushButton = h("button", { type: "button", onclick: () => void this.push() }, "Sync outputs now");
      this.pushButton.hidden = job.status.state !== "RUNNING";
      controls.push(this.pushButton);
    }
    controls.push(h("button", { type: "button", onclick: () => void this.load() }, "Refresh"));
    this.el = h(
      "section",
      { class: "card", "aria-labelledby": "metrics-h" },
      h("h2", { id: "metrics-h" }, "Training curves"),
      this.locations.length
        ? h("p", { class: "help" }, "From metrics.jsonl in the job's rw volume (rows with step, loss, eval_loss). The bucket gets it when the job ends, or now with Sync outputs.")
        : h("p", { class: "help" }, "This job has no rw volume, so no metrics.jsonl to draw."),
      this.locations.length ? h("div", { class: "toolbar" }, controls) : "",
      this.status.el,
      this.chart,
    );
    if (this.locations.length) {
      void this.load();
      this.schedule();
      signal.addEventListener("abort", () => clearTimeout(this.timer));
    }
  }

  onJob(job: Job): void {
    this.job = job;
    // Only a RUNNING job can sync its outputs on demand.
    if (this.pushButton) this.pushButton.hidden = job.status.state !== "RUNNING";
    // Outputs reach the bucket in FINALIZING: read once more when the job has ended.
    if (TERMINAL_STATES.has(job.status.state) && !this.finalLoad && this.locations.length) {
      this.finalLoad = true;
      void this.load();
    }
  }

  private schedule(): void {
    this.timer = window.setTimeout(() => {
      if (this.signal.aborted || TERMINAL_STATES.has(this.job.status.state)) return;
      if (!document.hidden) void this.load();
      this.schedule();
    }, METRICS_POLL_MS);
  }

  private async push(): Promise<void> {
    this.status.show("Syncing the job's rw volumes to their buckets…");
    try {
      await api("POST", `/v1/jobs/${encodeURIComponent(this.job.id)}/push-data`, undefined, { signal: this.signal });
      this.status.show("Synced.", "ok");
      await this.load();
    } catch (error) {
      this.status.error(error, "The outputs cannot be synced now");
    }
  }

  async load(): Promise<void> {
    if (this.loading || !this.locations.length) return;
    this.loading = true;
    const where = this.locations[this.choice ? Number(this.choice.value) : 0];
    try {
      const text = await getText(where.bucket, where.key, this.signal);
      if (text === this.lastText) return;
      this.lastText = text;
      if (text === null) {
        replace(this.chart, h("p", { class: "empty" }, `No ${where.key} in ${where.bucket} yet.`));
        return;
      }
      const metrics = parseMetrics(text);
      if (!metrics.loss.length && !metrics.evalLoss.length) {
        replace(this.chart, h("p", { class: "empty" }, `${where.key} has no loss rows yet.`));
        return;
      }
      replace(this.chart, lineChart(lossSeries(metrics), { title: `Loss by step (${where.bucket}/${where.key})`, xLabel: "step", yLabel: "loss" }));
    } catch (error) {
      if (!this.signal.aborted) replace(this.chart, errorNotice(error, `${where.bucket}/${where.key} cannot be read`));
    } finally {
      this.loading = false;
    }
  }
}
