// The job list, refreshed every 2 s while the tab is visible.
import { api, canWrite, whoami } from "../api";
import { stateBadge } from "../components/badge";
import { errorNotice } from "../components/notice";
import { dataTable } from "../components/table";
import { every, h, replace } from "../dom";
import { ago, duration, fromMicros } from "../format";
import { registerPage } from "../router";
import { TERMINAL_STATES, type Job, type Page } from "../types";

export const JOB_POLL_MS = 2000;

/** Seconds a job has run (RUNNING until it ended), from its history; null if it never ran. */
export function runSeconds(job: Job, now_ms = Date.now()): number | null {
  const history = job.status.history;
  const start = history.find((t) => t.state === "RUNNING");
  if (!start) return null;
  const end = history.find((t) => t.at_unix_micros > start.at_unix_micros && t.state !== "RUNNING");
  const end_ms = end ? end.at_unix_micros / 1000 : TERMINAL_STATES.has(job.status.state) ? start.at_unix_micros / 1000 : now_ms;
  return (end_ms - start.at_unix_micros / 1000) / 1000;
}

export function jobLabel(job: Job): string {
  return job.spec.name || job.id;
}

registerPage({
  path: "/jobs",
  title: "Jobs",
  nav: { label: "Jobs", order: 20 },
  async render(ctx) {
    const me = await whoami();
    if (canWrite(me)) ctx.root.append(h("p", { class: "actions" }, h("a", { href: "/jobs/new", class: "button primary" }, "New job")));
    const holder = h("div", { "aria-busy": "true" }, "Loading jobs…");
    ctx.root.append(holder);
    let last = "";
    every(
      JOB_POLL_MS,
      async () => {
        try {
          const page = await api<Page<Job>>("GET", "/v1/jobs?limit=200", undefined, { signal: ctx.signal });
          const key = JSON.stringify(page.items.map((j) => [j.id, j.status.state, j.status.history.length]));
          if (key === last) return; // unchanged: keep focus and scroll where they are
          last = key;
          const jobs = [...page.items].sort((a, b) => b.created_unix_micros - a.created_unix_micros);
          replace(
            holder,
            dataTable(
              [
                { label: "Job", cell: (j) => h("a", { href: `/jobs/${encodeURIComponent(j.id)}` }, jobLabel(j)) },
                { label: "State", cell: (j) => stateBadge(j.status.state) },
                { label: "Image", cell: (j) => h("code", {}, j.spec.image) },
                { label: "Flavor", cell: (j) => `${j.spec.flavor} × ${j.spec.units ?? 1}` },
                { label: "Submitted", cell: (j) => ago(fromMicros(j.created_unix_micros)) },
                { label: "Ran", className: "num", cell: (j) => { const s = runSeconds(j); return s === null ? "" : duration(s); } },
              ],
              jobs,
              { caption: "Jobs of this project, newest first", empty: "No job yet.", rowKey: (j) => j.id },
            ),
          );
          if (page.next_cursor) holder.append(h("p", { class: "help" }, "Showing the first 200 jobs."));
        } catch (error) {
          last = "";
          replace(holder, errorNotice(error, "The jobs cannot be listed"));
        }
        holder.removeAttribute("aria-busy");
      },
      ctx.signal,
    );
  },
});
