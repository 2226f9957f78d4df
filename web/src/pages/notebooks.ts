// Notebooks (docs/api/notebooks.md): start one (flavor, editor, image, volumes), see them with
// their state (refreshed every 2 s), open, sync now, stop, start again, delete. The page is /lab: /notebooks is
// the gateway's. Opening goes through the gateway's one-time ?sovai_token= exchange, which sets a
// cookie for that notebook's path and redirects without the token.
import { api, ApiError, canWrite, currentToken, messageOf, whoami } from "../api";
import { stateBadge } from "../components/badge";
import { Field, input, lines, textarea } from "../components/form";
import { errorNotice, StatusLine } from "../components/notice";
import { dataTable } from "../components/table";
import { debounce, every, h, replace } from "../dom";
import { ago, duration, eur } from "../format";
import { registerPage } from "../router";
import type { DryRun, Flavor, Notebook, NotebookSpec, Page } from "../types";

const POLL_MS = 2000;

registerPage({
  path: "/lab",
  title: "Notebooks",
  nav: { label: "Notebooks", order: 40 },
  async render(ctx) {
    const me = await whoami();
    // A notebook runs code: read tokens may look, not open (the gateway refuses them).
    const writable = canWrite(me);
    const status = new StatusLine();
    const holder = h("div", { "aria-busy": "true" }, "Loading notebooks…");
    ctx.root.append(status.el);
    if (writable) ctx.root.append(await startForm(ctx.signal, () => refresh()));
    ctx.root.append(h("section", { "aria-labelledby": "nb-list-h" }, h("h2", { id: "nb-list-h" }, "Your project's notebooks"), holder));

    const done = { stop: "Stopping", start: "Starting", delete: "Deleting", "push-data": "Synced the rw volumes of" };
    const act = async (nb: Notebook, what: "stop" | "start" | "delete" | "push-data") => {
      if (what === "delete" && !confirm(`Delete notebook ${nb.name || nb.id}? Its rw volumes are synced first; files elsewhere are lost.`)) return;
      try {
        if (what === "delete") await api("DELETE", `/v1/notebooks/${encodeURIComponent(nb.id)}`, undefined, { signal: ctx.signal });
        else await api("POST", `/v1/notebooks/${encodeURIComponent(nb.id)}/${what}`, undefined, { signal: ctx.signal });
        status.show(`${done[what]} ${nb.name || nb.id}.`, "ok");
        await refresh();
      } catch (error) {
        status.error(error, `The notebook cannot ${what}`);
      }
    };
    const open = (nb: Notebook) => {
      const token = currentToken();
      if (!token) return;
      // The gateway trades the token for a cookie scoped to /notebooks/<id>/ and redirects to the
      // same URL without it; noopener keeps this page out of the notebook's reach.
      const url = `/notebooks/${encodeURIComponent(nb.id)}/?sovai_token=${encodeURIComponent(token)}`;
      window.open(url, "_blank", "noopener,noreferrer");
    };

    let last = "";
    const refresh = async () => {
      try {
        const page = await api<Page<Notebook>>("GET", "/v1/notebooks", undefined, { signal: ctx.signal });
        const key = JSON.stringify(page.items.map((n) => [n.id, n.state, n.reason]));
        if (key === last) return;
        last = key;
        const notebooks = [...page.items].sort((a, b) => b.created_at.localeCompare(a.created_at));
        replace(
          holder,
          dataTable(
            [
              { label: "Notebook", cell: (n) => [h("strong", {}, n.name || n.id), n.name ? h("div", { class: "help" }, n.id) : ""] },
              { label: "State", cell: (n) => [stateBadge(n.state), n.reason ? h("div", { class: "help" }, n.reason) : ""] },
              { label: "Flavor", cell: (n) => [`${n.spec.flavor} × ${n.spec.units ?? 1}`, n.spec.image ? h("div", { class: "help" }, h("code", {}, n.spec.image)) : ""] },
              { label: "Volumes", cell: (n) => (n.spec.volumes?.length ? h("ul", { class: "plain" }, n.spec.volumes.map((v) => h("li", {}, h("code", {}, v)))) : "none") },
              { label: "Last activity", cell: (n) => (n.last_activity_at ? ago(new Date(n.last_activity_at)) : "") },
              {
                label: "Actions",
                cell: (n) => {
                  const label = n.name || n.id;
                  if (!writable) return "";
                  const out: Node[] = [];
                  if (n.state === "RUNNING") out.push(h("button", { type: "button", class: "link", "aria-label": `Open ${label}`, onclick: () => open(n) }, "Open"));
                  // Sync now: the rw volumes' changes go up at once (checkpoints, a notebook's outputs).
                  if (n.state === "RUNNING") out.push(h("button", { type: "button", class: "link", "aria-label": `Sync now ${label}`, onclick: () => void act(n, "push-data") }, "Sync now"));
                  if (n.state === "STARTING" || n.state === "RUNNING") out.push(h("button", { type: "button", class: "link danger", "aria-label": `Stop ${label}`, onclick: () => void act(n, "stop") }, "Stop"));
                  if (["STOPPED", "FAILED", "ERROR"].includes(n.state)) out.push(h("button", { type: "button", class: "link", "aria-label": `Start ${label}`, onclick: () => void act(n, "start") }, "Start"));
                  if (n.state !== "DELETING") out.push(h("button", { type: "button", class: "link danger", "aria-label": `Delete ${label}`, onclick: () => void act(n, "delete") }, "Delete"));
                  return out;
                },
              },
            ],
            notebooks,
            { caption: "Notebooks, newest first", hideCaption: true, empty: "No notebook yet.", rowKey: (n) => n.id },
          ),
        );
      } catch (error) {
        last = "";
        replace(holder, errorNotice(error, "The notebooks cannot be listed"));
      }
      holder.removeAttribute("aria-busy");
    };
    every(POLL_MS, refresh, ctx.signal);
  },
});

async function startForm(signal: AbortSignal, done: () => Promise<void>): Promise<HTMLElement> {
  const [flavors, info] = await Promise.all([
    api<{ items: Flavor[] }>("GET", "/v1/flavors", undefined, { signal }).then((f) => f.items),
    api<{ region: string }>("GET", "/v1/info", undefined, { signal }),
  ]);
  const flavorSelect = h(
    "select",
    {},
    flavors.map((f) => h("option", { value: f.id, disabled: !f.available }, `${f.id} — ${eur(f.price_per_minute_eur)}/min${f.available ? "" : " (not available here)"}`)),
  );
  const firstAvailable = flavors.find((f) => f.available);
  if (firstAvailable) flavorSelect.value = firstAvailable.id;
  const editor = h("select", {}, h("option", { value: "jupyter" }, "Jupyter"), h("option", { value: "vscode" }, "VS Code"));
  const fields = {
    name: new Field("name", "Name (optional)", input({ maxlength: 63, autocomplete: "off", spellcheck: "false", placeholder: "explore" })),
    editor: new Field("editor", "Editor", editor),
    image: new Field("image", "Image (optional)", input({ autocomplete: "off", spellcheck: "false", placeholder: "team/torch-notebook:2.4" }), "A registry image (HOST:PORT/project/name:tag, name:tag, …@sha256:…) or oci:bucket@REGION/image.tar with Jupyter (or code-server) on its PATH. Empty: the host's."),
    flavor: new Field("flavor", "Flavor", flavorSelect),
    units: new Field("units", "Units", input({ type: "number", min: 1, value: 1, inputmode: "numeric" })),
    volumes: new Field("volumes", "Volumes", textarea({ rows: 2, placeholder: `data@${info.region}/work:/workspace/work:rw` }), "One per line: bucket@REGION/prefix:/workspace/path:ro|rw. Jupyter opens in /workspace; rw volumes are synced back when it stops."),
    idle_timeout_s: new Field("idle_timeout_s", "Stop when idle for (seconds)", input({ type: "number", min: 0, max: 604800, value: 3600, inputmode: "numeric" }), "0 = never. An idle notebook still holds (and bills) its flavor."),
  };
  const all = Object.values(fields);
  const price = h("div", { class: "price", role: "status", "aria-live": "polite", "aria-label": "Notebook price" }, "");
  const status = new StatusLine();
  const submit = h("button", { type: "submit", class: "primary" }, "Start notebook");
  const form = h(
    "form",
    { class: "card", "aria-labelledby": "nb-new-h", novalidate: true },
    h("h2", { id: "nb-new-h" }, "Start a notebook"),
    h("div", { class: "grid-2" }, fields.name.el, fields.editor.el, fields.flavor.el, fields.units.el),
    fields.image.el,
    fields.volumes.el,
    fields.idle_timeout_s.el,
    price,
    h("div", { class: "actions" }, submit),
    status.el,
  );
  const specOf = (): NotebookSpec => {
    const spec: NotebookSpec = {
      editor: editor.value,
      flavor: flavorSelect.value,
      units: Number(fields.units.control.value || 1),
      volumes: lines((fields.volumes.control as HTMLTextAreaElement).value).map((v) => v.trim()),
      idle_timeout_s: Number(fields.idle_timeout_s.control.value || 0),
    };
    const name = fields.name.control.value.trim();
    if (name) spec.name = name;
    const image = fields.image.control.value.trim();
    if (image) spec.image = image;
    return spec;
  };
  let seq = 0;
  const preview = debounce(350, async () => {
    const mine = ++seq;
    try {
      const run = await api<DryRun>("POST", "/v1/notebooks?dry_run=true", specOf(), { signal });
      if (mine !== seq) return;
      price.replaceChildren(h("strong", {}, `${eur(run.price_per_minute_eur)} per minute`), ` while it runs (${eur(run.cost_at_timeout_eur)} for ${duration(run.timeout_s)})`);
      price.classList.toggle("warn", run.would_be_refused);
      if (run.would_be_refused) price.append(h("p", {}, `It would be refused: ${run.reason}`));
    } catch (error) {
      if (mine !== seq || signal.aborted) return;
      price.textContent = `No price yet: ${messageOf(error)}`;
    }
  });
  form.addEventListener("input", () => preview());
  form.addEventListener("change", () => preview());
  preview();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.clear();
    for (const f of all) f.setError("");
    submit.disabled = true;
    try {
      const nb = await api<Notebook>("POST", "/v1/notebooks", specOf(), { signal });
      status.show(`Notebook ${nb.name || nb.id} is starting; Open appears when Jupyter answers.`, "ok");
      await done();
    } catch (error) {
      if (error instanceof ApiError && error.fields.length) {
        status.show(error.message, "error");
        let first: Field | null = null;
        for (const e of error.fields) {
          const target = all.find((f) => f.name === e.field.replace(/[[.].*$/, ""));
          if (!target) continue;
          const index = /^\w+\[(\d+)\]/.exec(e.field);
          target.setError(`${index ? `line ${Number(index[1]) + 1}: ` : ""}${e.message}`);
          first ??= target;
        }
        first?.control.focus();
      } else {
        status.error(error, "The notebook was not started");
      }
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}
