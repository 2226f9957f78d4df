// Apps: the project's apps with their state and replicas (refreshed every 2 s), the catalog's
// endpoints, and the form that deploys a model as an app (POST /v1/apps, priced by a dry run).
// The pages live under /deployments: /apps is the gateway's (docs/api/apps.md).
import { api, ApiError, canWrite, messageOf, whoami } from "../api";
import { stateBadge } from "../components/badge";
import { Field, input, lines, textarea } from "../components/form";
import { errorNotice, StatusLine } from "../components/notice";
import { dataTable } from "../components/table";
import { debounce, every, h, replace } from "../dom";
import { ago, duration, eur } from "../format";
import { navigate, registerPage } from "../router";
import { listBuckets } from "../s3";
import type { App, AppSpec, DryRun, Endpoint, Flavor, Page } from "../types";

export const APP_POLL_MS = 2000;

export function appHref(app: { id: string }): string {
  return `/deployments/${encodeURIComponent(app.id)}`;
}

export function scalingText(spec: AppSpec): string {
  const a = spec.autoscaling;
  if (a) return `autoscaled ${a.min_replicas}..${a.max_replicas} on ${a.resource_type ?? "REQUESTS"}`;
  return `${spec.replicas ?? 1} fixed`;
}

/** "k=v,k2=v2" lines → object; errors name the bad line. */
export function parsePairs(text: string, what: string): { pairs: Record<string, string>; error: string } {
  const pairs: Record<string, string> = {};
  for (const line of lines(text)) {
    const eq = line.indexOf("=");
    if (eq <= 0) return { pairs, error: `'${line}' is not ${what}` };
    pairs[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
  }
  return { pairs, error: "" };
}

registerPage({
  path: "/deployments",
  title: "Apps",
  nav: { label: "Apps", order: 30 },
  async render(ctx) {
    const me = await whoami();
    ctx.root.append(
      h(
        "p",
        { class: "actions" },
        canWrite(me) ? h("a", { href: "/deployments/new", class: "button primary" }, "Deploy a model") : "",
        h("a", { href: "/playground", class: "button" }, "Chat playground"),
      ),
    );
    const holder = h("div", { "aria-busy": "true" }, "Loading apps…");
    const endpoints = h("section", { "aria-labelledby": "endpoints-h" }, h("h2", { id: "endpoints-h" }, "Catalog endpoints"));
    ctx.root.append(holder, endpoints);
    let last = "";
    every(
      APP_POLL_MS,
      async () => {
        try {
          const page = await api<Page<App>>("GET", "/v1/apps", undefined, { signal: ctx.signal });
          const key = JSON.stringify(page.items.map((a) => [a.id, a.state, a.status.ready_replicas, a.status.desired_replicas]));
          if (key === last) return;
          last = key;
          const apps = [...page.items].sort((a, b) => b.created_at.localeCompare(a.created_at));
          replace(
            holder,
            dataTable(
              [
                { label: "App", cell: (a) => h("a", { href: appHref(a) }, a.name) },
                { label: "State", cell: (a) => stateBadge(a.state) },
                { label: "Replicas", className: "num", cell: (a) => `${a.status.ready_replicas} of ${a.status.desired_replicas} ready` },
                { label: "Model", cell: (a) => h("code", {}, a.spec.model ?? a.spec.image ?? "") },
                { label: "Flavor", cell: (a) => `${a.spec.flavor} × ${a.spec.units ?? 1}` },
                { label: "Created", cell: (a) => ago(new Date(a.created_at)) },
              ],
              apps,
              { caption: "Apps of this project, newest first", empty: "No app yet: deploy a model from a bucket.", rowKey: (a) => a.id },
            ),
          );
        } catch (error) {
          last = "";
          replace(holder, errorNotice(error, "The apps cannot be listed"));
        }
        holder.removeAttribute("aria-busy");
      },
      ctx.signal,
    );
    try {
      const list = await api<Page<Endpoint>>("GET", "/v1/endpoints", undefined, { signal: ctx.signal });
      endpoints.append(
        h("p", { class: "help" }, "Models the operators publish for every project under one OpenAI-compatible base URL, billed per token."),
        dataTable(
          [
            { label: "Model", cell: (e) => h("a", { href: `/playground?model=${encodeURIComponent(e.name)}` }, e.name) },
            { label: "State", cell: (e) => (e.state ? stateBadge(e.state) : "") },
            { label: "Base URL", cell: (e) => h("code", {}, e.url) },
            { label: "Rate limit", cell: (e) => e.rate_limit },
          ],
          list.items,
          { caption: "Catalog endpoints", hideCaption: true, empty: "The catalog publishes no model.", rowKey: (e) => e.name },
        ),
      );
    } catch (error) {
      endpoints.append(errorNotice(error, "The catalog cannot be listed"));
    }
  },
});

registerPage({
  path: "/deployments/new",
  title: "Deploy a model",
  async render(ctx) {
    const me = await whoami();
    if (!canWrite(me)) {
      ctx.root.append(h("p", { class: "notice error", role: "alert" }, `Your token has role '${me.role}': it may look at apps but not deploy them.`));
      return;
    }
    const [flavors, info] = await Promise.all([
      api<{ items: Flavor[] }>("GET", "/v1/flavors", undefined, { signal: ctx.signal }).then((f) => f.items),
      api<{ region: string }>("GET", "/v1/info", undefined, { signal: ctx.signal }),
    ]);
    const buckets = await listBuckets(ctx.signal).catch(() => []);
    const modelList = h("datalist", { id: "model-locations" }, buckets.map((b) => h("option", { value: `${b.name}@${info.region}/` })));
    const flavorSelect = h(
      "select",
      { required: true },
      flavors.map((f) =>
        h("option", { value: f.id, disabled: !f.available }, `${f.id} — ${eur(f.price_per_minute_eur)}/min per replica${f.available ? "" : " (not available here)"}`),
      ),
    );
    const firstAvailable = flavors.find((f) => f.available);
    if (firstAvailable) flavorSelect.value = firstAvailable.id;
    const autoscale = h("input", { type: "checkbox", id: "app-autoscale" });
    const fields = {
      name: new Field("name", "Name", input({ required: true, maxlength: 63, autocomplete: "off", spellcheck: "false", placeholder: "support-bot" }), "a-z, 0-9 and '-', starting with a letter. Clients send it as \"model\"."),
      model: new Field("model", "Model", input({ list: "model-locations", required: true, autocomplete: "off", spellcheck: "false", placeholder: `models@${info.region}/my-model` }), "bucket@REGION/prefix of a model directory (config.json, safetensors, tokenizer) or of a LoRA adapter."),
      base_model: new Field("base_model", "Base model (adapters only)", input({ list: "model-locations", autocomplete: "off", spellcheck: "false" }), "For an adapter: where its base model is."),
      flavor: new Field("flavor", "Flavor", flavorSelect),
      units: new Field("units", "Units per replica", input({ type: "number", min: 1, value: 1, inputmode: "numeric" })),
      replicas: new Field("replicas", "Replicas", input({ type: "number", min: 0, max: 64, value: 1, inputmode: "numeric" }), "A fixed number of replicas."),
      min_replicas: new Field("min_replicas", "Minimum replicas", input({ type: "number", min: 0, max: 64, value: 1, inputmode: "numeric" }), "0 scales to zero when idle."),
      max_replicas: new Field("max_replicas", "Maximum replicas", input({ type: "number", min: 1, max: 64, value: 2, inputmode: "numeric" })),
      labels: new Field("labels", "Labels", textarea({ rows: 2, placeholder: "team=support" }), "One key=value per line. App tokens made for this app select these labels."),
      env: new Field("env", "Environment", textarea({ rows: 2, placeholder: "KEY=value" }), "One KEY=value per line."),
    };
    const allFields = Object.values(fields);
    const unsecure = h("input", { type: "checkbox", id: "app-unsecure" });
    const autoscaleBox = h("div", { class: "grid-2" }, fields.min_replicas.el, fields.max_replicas.el);
    const fixedBox = h("div", {}, fields.replicas.el);
    const syncScaling = () => {
      autoscaleBox.hidden = !autoscale.checked;
      fixedBox.hidden = autoscale.checked;
    };
    autoscale.addEventListener("change", syncScaling);
    syncScaling();

    const price = h("div", { class: "price", role: "status", "aria-live": "polite", "aria-label": "Cost preview" }, "Fill in the form to see the price.");
    const status = new StatusLine();
    const submit = h("button", { type: "submit", class: "primary" }, "Deploy");
    const form = h(
      "form",
      { class: "card app-form", novalidate: true },
      modelList,
      h("div", { class: "grid-2" }, fields.name.el, fields.flavor.el),
      fields.model.el,
      fields.base_model.el,
      h("div", { class: "grid-2" }, fields.units.el, h("div", { class: "field checkbox" }, h("span", { class: "inline-field" }, autoscale, h("label", { for: "app-autoscale" }, "Autoscale on requests")))),
      fixedBox,
      autoscaleBox,
      h("div", { class: "grid-2" }, fields.labels.el, fields.env.el),
      h("div", { class: "field checkbox" }, h("span", { class: "inline-field" }, unsecure, h("label", { for: "app-unsecure" }, "Public: anyone may call it without a token"))),
      h("section", { class: "preview", "aria-labelledby": "app-price-h" }, h("h2", { id: "app-price-h" }, "Cost preview"), price),
      h("div", { class: "actions" }, submit, h("a", { href: "/deployments", class: "button" }, "Cancel")),
      status.el,
    );
    ctx.root.append(form);

    const specOf = (): { spec: AppSpec; errors: { field: string; message: string }[] } => {
      const errors: { field: string; message: string }[] = [];
      const labels = parsePairs((fields.labels.control as HTMLTextAreaElement).value, "key=value");
      if (labels.error) errors.push({ field: "labels", message: labels.error });
      const env = parsePairs((fields.env.control as HTMLTextAreaElement).value, "KEY=value");
      if (env.error) errors.push({ field: "env", message: env.error });
      const spec: AppSpec = {
        name: fields.name.control.value.trim(),
        model: fields.model.control.value.trim(),
        flavor: flavorSelect.value,
        units: Number(fields.units.control.value || 1),
      };
      const base = fields.base_model.control.value.trim();
      if (base) spec.base_model = base;
      if (autoscale.checked) {
        spec.autoscaling = { min_replicas: Number(fields.min_replicas.control.value || 0), max_replicas: Number(fields.max_replicas.control.value || 1) };
      } else {
        spec.replicas = Number(fields.replicas.control.value || 0);
      }
      if (Object.keys(labels.pairs).length) spec.labels = labels.pairs;
      if (Object.keys(env.pairs).length) spec.env = env.pairs;
      if (unsecure.checked) spec.unsecure_http = true;
      if (!spec.name) errors.push({ field: "name", message: "a name is required" });
      if (!spec.model) errors.push({ field: "model", message: "where the model is (bucket@REGION/prefix) is required" });
      return { spec, errors };
    };

    const showErrors = (errors: { field: string; message: string }[]): Field | null => {
      for (const f of allFields) f.setError("");
      let first: Field | null = null;
      const unplaced: string[] = [];
      for (const e of errors) {
        const base = e.field.replace(/^autoscaling\./, "").replace(/[[.].*$/, "");
        const target = allFields.find((f) => f.name === base);
        if (!target) {
          unplaced.push(`${e.field ? `${e.field}: ` : ""}${e.message}`);
          continue;
        }
        target.setError(e.message);
        first ??= target;
      }
      if (unplaced.length) status.show(unplaced.join("; "), "error");
      return first;
    };

    let seq = 0;
    const preview = debounce(350, async () => {
      const mine = ++seq;
      const { spec, errors } = specOf();
      if (errors.length) {
        price.textContent = "Complete the form to see the price.";
        return;
      }
      try {
        const run = await api<DryRun>("POST", "/v1/apps?dry_run=true", spec, { signal: ctx.signal });
        if (mine !== seq) return;
        price.replaceChildren(
          h("strong", {}, `${eur(run.price_per_minute_eur)} per minute`),
          ` while ${spec.autoscaling ? `up to ${spec.autoscaling.max_replicas}` : spec.replicas} replica(s) run · ${eur(run.cost_at_timeout_eur)} for ${duration(run.timeout_s)}`,
          run.budget_left_eur !== null ? ` · budget left ${eur(run.budget_left_eur)}` : "",
        );
        price.classList.toggle("warn", run.would_be_refused);
        if (run.would_be_refused) price.append(h("p", {}, `It would be refused: ${run.reason}`));
      } catch (error) {
        if (mine !== seq || ctx.signal.aborted) return;
        price.classList.remove("warn");
        price.textContent = `No price yet: ${messageOf(error)}`;
      }
    });
    form.addEventListener("input", () => preview());
    form.addEventListener("change", () => preview());

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      status.clear();
      const { spec, errors } = specOf();
      if (errors.length) {
        showErrors(errors)?.control.focus();
        return;
      }
      showErrors([]);
      submit.disabled = true;
      try {
        const app = await api<App>("POST", "/v1/apps", spec, { signal: ctx.signal });
        navigate(appHref(app));
      } catch (error) {
        if (error instanceof ApiError && error.fields.length) {
          status.show(error.message, "error");
          showErrors(error.fields)?.control.focus();
        } else {
          status.error(error, "The app was not deployed");
        }
      } finally {
        submit.disabled = false;
      }
    });
    fields.name.control.focus();
  },
});
