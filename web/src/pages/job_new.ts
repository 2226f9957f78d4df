// Submit a job: flavor, units, image, command (one argument per line), volumes, environment, with
// the price of a dry run (POST /v1/jobs?dry_run=true) shown before submitting, and the server's
// field errors shown next to their fields.
import { api, ApiError, canWrite, messageOf, whoami } from "../api";
import { Field, input, lines, textarea } from "../components/form";
import { StatusLine } from "../components/notice";
import { debounce, h } from "../dom";
import { duration, eur } from "../format";
import { navigate, registerPage } from "../router";
import type { DryRun, Flavor, Job, JobSpec } from "../types";

const IMAGES = ["sovai/shell", "sovai/finetune", "sovai/serve"];

registerPage({
  path: "/jobs/new",
  title: "New job",
  async render(ctx) {
    const me = await whoami();
    if (!canWrite(me)) {
      ctx.root.append(h("p", { class: "notice error", role: "alert" }, `Your token has role '${me.role}': it may look at jobs but not submit them.`));
      return;
    }
    const flavors = (await api<{ items: Flavor[] }>("GET", "/v1/flavors", undefined, { signal: ctx.signal })).items;
    const info = await api<{ region: string }>("GET", "/v1/info", undefined, { signal: ctx.signal });

    const flavorSelect = h(
      "select",
      { required: true },
      flavors.map((f) =>
        h(
          "option",
          { value: f.id, disabled: !f.available },
          `${f.id} — ${f.description || (f.kind === "gpu" ? `${f.gpus_per_unit} × ${f.gpu_model}` : `${f.vcpus_per_unit} vCPU`)} — ${eur(f.price_per_minute_eur)}/min${f.available ? "" : " (not available here)"}`,
        ),
      ),
    );
    const firstAvailable = flavors.find((f) => f.available);
    if (firstAvailable) flavorSelect.value = firstAvailable.id;
    const imageList = h("datalist", { id: "images" }, IMAGES.map((i) => h("option", { value: i })));
    const fields = {
      name: new Field("name", "Name (optional)", input({ maxlength: 128, autocomplete: "off" })),
      image: new Field("image", "Image", input({ list: "images", value: "sovai/shell", required: true, autocomplete: "off", spellcheck: "false" }), "sovai/shell runs the command on the host's tools; sovai/finetune runs sovai-engine train with these arguments; oci:bucket@REGION/path/image.tar for your own image."),
      flavor: new Field("flavor", "Flavor", flavorSelect),
      units: new Field("units", "Units", input({ type: "number", min: 1, value: 1, required: true, inputmode: "numeric" }), "GPUs for a GPU flavor, vCPU units for a CPU flavor."),
      command: new Field("command", "Command", textarea({ rows: 4, placeholder: "sh\n-c\necho hello" }), "One argument per line. No shell unless you call one (sh, -c, then the script on one line)."),
      volumes: new Field("volumes", "Volumes", textarea({ rows: 3, placeholder: `data@${info.region}/dataset:/workspace/data:ro\nout@${info.region}/run1:/workspace/output:rw` }), "One per line: bucket@REGION/prefix:/mount/path:ro|rw|rwd. rw volumes are synced back when the job ends."),
      env: new Field("env", "Environment", textarea({ rows: 2, placeholder: "KEY=value" }), "One KEY=value per line."),
      timeout_s: new Field("timeout_s", "Timeout in seconds (optional)", input({ type: "number", min: 1, inputmode: "numeric" }), "The job stops after this long RUNNING; empty = the server's default."),
    };
    const allFields = Object.values(fields);
    const flavorHelp = h("p", { class: "help", id: "flavor-reason" });
    fields.flavor.el.append(flavorHelp);

    const price = h("div", { class: "price", role: "status", "aria-live": "polite", "aria-label": "Cost preview" }, "Fill in the form to see the price.");
    const status = new StatusLine();
    const submit = h("button", { type: "submit", class: "primary" }, "Submit job");
    const form = h(
      "form",
      { class: "card job-form", novalidate: true },
      imageList,
      h("div", { class: "grid-2" }, fields.name.el, fields.image.el, fields.flavor.el, fields.units.el),
      fields.command.el,
      fields.volumes.el,
      h("div", { class: "grid-2" }, fields.env.el, fields.timeout_s.el),
      h("section", { class: "preview", "aria-labelledby": "price-h" }, h("h2", { id: "price-h" }, "Cost preview"), price),
      h("div", { class: "actions" }, submit, h("a", { href: "/jobs", class: "button" }, "Cancel")),
      status.el,
    );
    ctx.root.append(form);

    // The spec from the form; client-side errors (the environment's syntax) go to their field.
    const specOf = (): { spec: JobSpec; errors: Record<string, string> } => {
      const errors: Record<string, string> = {};
      const env: Record<string, string> = {};
      for (const line of lines((fields.env.control as HTMLTextAreaElement).value)) {
        const eq = line.indexOf("=");
        if (eq <= 0) errors.env = `'${line}' is not KEY=value`;
        else env[line.slice(0, eq).trim()] = line.slice(eq + 1);
      }
      const spec: JobSpec = {
        image: fields.image.control.value.trim(),
        flavor: flavorSelect.value,
        units: Number(fields.units.control.value || 1),
        command: lines((fields.command.control as HTMLTextAreaElement).value),
        volumes: lines((fields.volumes.control as HTMLTextAreaElement).value).map((v) => v.trim()),
      };
      const name = fields.name.control.value.trim();
      if (name) spec.name = name;
      if (Object.keys(env).length) spec.env = env;
      const timeout = fields.timeout_s.control.value.trim();
      if (timeout) spec.timeout_s = Number(timeout);
      return { spec, errors };
    };

    // Server field names ("volumes[1]", "env.PATH", "command[0]") → the form's fields.
    const showErrors = (errors: { field: string; message: string }[]): Field | null => {
      let first: Field | null = null;
      for (const f of allFields) f.setError("");
      const unplaced: string[] = [];
      for (const e of errors) {
        const base = e.field.replace(/[[.].*$/, "");
        const target = allFields.find((f) => f.name === base);
        if (!target) {
          unplaced.push(`${e.field ? `${e.field}: ` : ""}${e.message}`);
          continue;
        }
        const index = /^\w+\[(\d+)\]/.exec(e.field);
        const prefix = index ? `line ${Number(index[1]) + 1}: ` : "";
        const previous = target.el.querySelector(".field-error")?.textContent;
        target.setError((previous ? `${previous} ` : "") + prefix + e.message);
        first ??= target;
      }
      if (unplaced.length) status.show(unplaced.join("; "), "error");
      return first;
    };

    let previewSeq = 0;
    const preview = debounce(350, async () => {
      const seq = ++previewSeq;
      const flavor = flavors.find((f) => f.id === flavorSelect.value);
      flavorHelp.textContent = flavor && !flavor.available ? flavor.reason : "";
      const { spec, errors } = specOf();
      if (Object.keys(errors).length || !spec.image) {
        price.textContent = "Complete the form to see the price.";
        return;
      }
      try {
        const run = await api<DryRun>("POST", "/v1/jobs?dry_run=true", spec, { signal: ctx.signal });
        if (seq !== previewSeq) return;
        const parts = [
          h("strong", {}, `${eur(run.price_per_minute_eur)} per minute`),
          ` · at most ${eur(run.cost_at_timeout_eur)} if it runs to its timeout (${duration(run.timeout_s)})`,
          run.budget_left_eur !== null ? ` · budget left ${eur(run.budget_left_eur)}` : "",
        ];
        price.replaceChildren(...parts);
        price.classList.toggle("warn", run.would_be_refused);
        if (run.would_be_refused) price.append(h("p", {}, `It would be refused: ${run.reason}`));
      } catch (error) {
        if (seq !== previewSeq || ctx.signal.aborted) return;
        price.classList.remove("warn");
        price.textContent = `No price yet: ${messageOf(error)}`;
      }
    });
    form.addEventListener("input", () => preview());
    form.addEventListener("change", () => preview());
    preview();

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      status.clear();
      const { spec, errors } = specOf();
      const local = Object.entries(errors).map(([field, message]) => ({ field, message }));
      if (!spec.image) local.push({ field: "image", message: "an image is required" });
      if (local.length) {
        showErrors(local)?.control.focus();
        return;
      }
      submit.disabled = true;
      try {
        const job = await api<Job>("POST", "/v1/jobs", spec, { signal: ctx.signal });
        navigate(`/jobs/${encodeURIComponent(job.id)}`);
      } catch (error) {
        if (error instanceof ApiError && error.fields.length) {
          status.show(error.message, "error");
          showErrors(error.fields)?.control.focus();
        } else {
          status.error(error, "The job was not submitted");
        }
      } finally {
        submit.disabled = false;
      }
    });
  },
});
