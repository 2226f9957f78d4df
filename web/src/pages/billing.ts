// Billing: the project's spend over time by flavor or project (GET /v1/billing/usage, its lines
// grouped by day), the month's budget as a gauge (GET /v1/billing/budget; admins set it), and the
// comparison of owning GPUs with pay-as-you-go (GET /v1/tco, the numbers of `sovai tco`).
import { api, messageOf, whoami } from "../api";
import { Field, input } from "../components/form";
import { lineChart, type Series } from "../components/linechart";
import { errorNotice, StatusLine } from "../components/notice";
import { dataTable } from "../components/table";
import { debounce, h, replace, uid } from "../dom";
import { amount, eur } from "../format";
import { registerPage } from "../router";
import type { BillingLine, Budget, Tco, Usage, Whoami } from "../types";

const DAY_MS = 86_400_000;

/** The first instant of this UTC month, where budgets start counting. */
function monthStart(now = new Date()): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
}

/** Cents as euros: 1507833 → "15 078.33 €". */
export function euros(cents: number): string {
  return `${(cents / 100).toLocaleString("en", { minimumFractionDigits: 2, maximumFractionDigits: 2 })} €`;
}

function microToEur(micro: number): number {
  return micro / 1e6;
}

/** The lines' amounts per UTC day and per key (the flavor, or "storage"/"tokens", or the project). */
export function dailySeries(lines: BillingLine[], by: "flavor" | "project", from: Date, to: Date): Series[] {
  const [firstDay, lastDay] = dayRange(from, to);
  const sums = new Map<string, Map<number, number>>();
  for (const line of lines) {
    const key = by === "project" ? line.project : line.flavor || line.kind;
    const day = Math.floor(Date.parse(line.start) / DAY_MS);
    if (!sums.has(key)) sums.set(key, new Map());
    const days = sums.get(key)!;
    days.set(day, (days.get(day) ?? 0) + line.amount_micro_eur);
  }
  return [...sums.entries()]
    .sort((a, b) => total(b[1]) - total(a[1]))
    .map(([key, days]) => {
      const points: [number, number][] = [];
      for (let d = firstDay; d <= lastDay; d++) points.push([d * 86_400, microToEur(days.get(d) ?? 0)]);
      return { name: key, points };
    });
}

/** The UTC day numbers (days since 1970-01-01) of the window's first and last instants. */
function dayRange(from: Date, to: Date): [number, number] {
  const first = Math.floor(from.getTime() / DAY_MS);
  return [first, Math.max(first, Math.floor((to.getTime() - 1) / DAY_MS))];
}

/** The chart's x range in seconds: half a day either side of the window's days, so a window of
 * one day (the 1st of the month) still has an axis and each day's point sits under its tick. */
export function dayDomain(from: Date, to: Date): [number, number] {
  const [first, last] = dayRange(from, to);
  return [(first - 0.5) * 86_400, (last + 0.5) * 86_400];
}

function total(days: Map<number, number>): number {
  let t = 0;
  for (const v of days.values()) t += v;
  return t;
}

const day = (s: number) => new Date(s * 1000).toLocaleDateString(undefined, { month: "short", day: "numeric", timeZone: "UTC" });
const euro = (v: number) => `${Number(v.toPrecision(4))} €`;
/** "Dec 1, 2026, 00:00 UTC": the billing's days and months are UTC. */
const utc = (rfc3339: string) =>
  `${new Date(rfc3339).toLocaleString("en", { dateStyle: "medium", timeStyle: "short", hourCycle: "h23", timeZone: "UTC" })} UTC`;

registerPage({
  path: "/billing",
  title: "Billing",
  nav: { label: "Billing", order: 50 },
  async render(ctx) {
    const me = await whoami();
    const usage = h("section", { class: "card", "aria-labelledby": "usage-h" });
    const budget = h("section", { class: "card", "aria-labelledby": "budget-h" });
    const tco = h("section", { class: "card", "aria-labelledby": "tco-h" });
    ctx.root.append(budget, usage, tco);
    await Promise.all([drawBudget(budget, me, ctx.signal), drawUsage(usage, me, ctx.signal), drawTco(tco, ctx.signal)]);
  },
});

async function drawUsage(section: HTMLElement, me: Whoami, signal: AbortSignal): Promise<void> {
  const periodId = uid("period");
  const byId = uid("by");
  const period = h("select", { id: periodId },
    h("option", { value: "month" }, "This month"),
    h("option", { value: "30" }, "Last 30 days"),
    h("option", { value: "90" }, "Last 90 days"));
  const by = h("select", { id: byId }, h("option", { value: "flavor" }, "Flavor"), h("option", { value: "project" }, "Project"));
  const body = h("div", { "aria-live": "polite" });
  section.append(
    h("h2", { id: "usage-h" }, "Usage over time"),
    h("div", { class: "toolbar" },
      h("span", { class: "inline-field" }, h("label", { for: periodId }, "Period"), period),
      h("span", { class: "inline-field" }, h("label", { for: byId }, "By"), by)),
    body,
  );
  const load = async () => {
    const now = new Date();
    const from = period.value === "month" ? monthStart(now) : new Date(now.getTime() - Number(period.value) * DAY_MS);
    const query = new URLSearchParams({ from: from.toISOString(), to: now.toISOString(), group_by: by.value });
    // Platform admins see every project's usage; others their own project's.
    if (me.platform_admin) query.set("project", "*");
    body.setAttribute("aria-busy", "true");
    try {
      const answer = await api<Usage>("GET", `/v1/billing/usage?${query}`, undefined, { signal });
      const series = dailySeries(answer.lines, by.value as "flavor" | "project", new Date(answer.from), new Date(answer.to));
      // The token's own project by its name.
      for (const s of series) if (s.name === me.project.id) s.name = `${me.project.name} (${me.project.id})`;
      // Not the budget's figure: that one is the token's project since the 1st (drawBudget).
      const scope = me.platform_admin ? "every project" : `project ${me.project.name}`;
      const count = `${answer.lines.length} line${answer.lines.length === 1 ? "" : "s"}`;
      replace(
        body,
        h("p", { class: "total", id: "usage-total", "data-period": period.value, "data-by": by.value },
          "Total of the lines shown: ", h("strong", { "data-total": answer.total_eur }, eur(answer.total_eur)),
          ` (${count} of ${scope}, ${utc(answer.from)} to ${utc(answer.to)}).`),
        h("div", { class: "chart-holder", id: "usage-chart" },
          lineChart(series.length ? series : [{ name: "spend", points: [] }], {
            title: `Spend per UTC day by ${by.value}`,
            xLabel: "day (UTC)",
            yLabel: "€ per day",
            xFormat: day,
            yFormat: euro,
            xDomain: dayDomain(new Date(answer.from), new Date(answer.to)),
            xTickUnit: 86_400,
            yDomain: [0, 0.01],
          })),
        dataTable(
          [
            { label: by.value === "project" ? "Project" : "Flavor", cell: (g) => (g.key === me.project.id ? `${me.project.name} (${g.key})` : g.key) },
            { label: "Minutes", className: "num", cell: (g) => String(g.minutes) },
            { label: "Quantity", className: "num", cell: (g) => String(g.quantity) },
            { label: "Amount", className: "num", cell: (g) => eur(g.amount_eur) },
          ],
          answer.groups,
          { caption: `Spend by ${by.value}`, empty: "Nothing billed in this period.", rowKey: (g) => g.key },
        ),
      );
    } catch (error) {
      replace(body, errorNotice(error, "The usage cannot be read"));
    }
    body.removeAttribute("aria-busy");
  };
  period.addEventListener("change", () => void load());
  by.addEventListener("change", () => void load());
  await load();
}

async function drawBudget(section: HTMLElement, me: Whoami, signal: AbortSignal): Promise<void> {
  section.append(h("h2", { id: "budget-h" }, "This month's budget"));
  const body = h("div");
  const status = new StatusLine();
  section.append(body, status.el);
  const show = (b: Budget) => {
    const spent = Number(b.spent_eur);
    // What the budget counts (docs/billing.md): the token's project, from the 1st of this UTC
    // month to now, running work included; whatever the usage view below is set to show.
    const covers = h("p", { class: "help", id: "budget-covers" },
      `Project ${me.project.name}'s spend since ${utc(monthStart().toISOString())}, running work up to now: the figure the alert and the cap act on.`);
    if (b.monthly_cap_eur === null) {
      replace(body, h("div", { id: "budget-gauge", "data-state": "none" },
        h("p", { class: "gauge-state" }, `Spent this month: ${eur(b.spent_eur)}. This project has no budget.`), covers));
      return;
    }
    const cap = Number(b.monthly_cap_eur);
    const percent = cap > 0 ? Math.round((spent / cap) * 1000) / 10 : 100;
    const state = b.capped ? "capped" : b.alert ? "alert" : "ok";
    const meterId = uid("budget-meter");
    replace(
      body,
      h("div", { class: `gauge ${state}`, id: "budget-gauge", "data-state": state },
        h("label", { for: meterId }, `Spent this month: ${eur(b.spent_eur)} of the ${eur(b.monthly_cap_eur)} cap (${percent} %)`),
        h("meter", { id: meterId, min: 0, max: cap, value: Math.min(spent, cap), low: (cap * (b.alert_percent ?? 80)) / 100, high: cap * 0.999, optimum: 0 }),
        h("p", { class: "gauge-state" },
          b.capped ? "The cap is reached: the project's jobs and apps are being stopped." : b.alert ? `Past the alert threshold (${b.alert_percent} %).` : `Alert at ${b.alert_percent} % of the cap.`),
        covers),
    );
  };
  let current: Budget;
  try {
    current = await api<Budget>("GET", "/v1/billing/budget", undefined, { signal });
    show(current);
  } catch (error) {
    replace(body, errorNotice(error, "The budget cannot be read"));
    return;
  }
  if (me.role !== "admin") return;
  const cap = new Field("monthly_cap_eur", "Monthly cap (€)", input({ inputmode: "decimal", value: current.monthly_cap_eur === null ? "" : amount(current.monthly_cap_eur), placeholder: "50.00" }), "Empty removes the budget.");
  const alert = new Field("alert_percent", "Alert at (%)", input({ type: "number", min: 1, max: 100, value: current.alert_percent ?? 80, inputmode: "numeric" }));
  const button = h("button", { type: "submit" }, "Set budget");
  const form = h("form", { class: "budget-form", novalidate: true }, h("div", { class: "grid-2" }, cap.el, alert.el), button);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    cap.setError("");
    alert.setError("");
    const text = cap.control.value.trim();
    try {
      current = await api<Budget>("PUT", `/v1/projects/${encodeURIComponent(me.project.id)}/budget`, {
        monthly_cap_eur: text === "" ? null : text,
        alert_percent: Number(alert.control.value),
      }, { signal });
      show(current);
      status.show("Budget saved.", "ok");
    } catch (error) {
      status.error(error, "The budget was not saved");
      cap.setError(messageOf(error));
    }
  });
  section.append(form);
}

async function drawTco(section: HTMLElement, signal: AbortSignal): Promise<void> {
  section.append(
    h("h2", { id: "tco-h" }, "Owning GPUs or pay-as-you-go"),
    h("p", { class: "help" }, "What a server of N GPUs costs a month (purchase over its depreciation, power, cooling, rack, maintenance, staff) against the same GPU-hours at this catalog's price. The same numbers as ", h("code", {}, "sovai tco"), " (docs/tco.md)."),
  );
  const fields = {
    gpus: new Field("gpus", "GPUs", input({ type: "number", min: 1, max: 100000, value: 8, inputmode: "numeric" })),
    gpu_model: new Field("gpu_model", "GPU model", input({ value: "H100", autocomplete: "off", spellcheck: "false" })),
    utilisation: new Field("utilisation", "Utilisation (0..1)", input({ inputmode: "decimal", value: "0.6" }), "The fraction of the month's hours the GPUs are busy."),
    purchase_eur: new Field("purchase_eur", "Purchase (€)", input({ inputmode: "decimal", value: "200000" })),
  };
  const more = {
    depreciation_months: new Field("depreciation_months", "Depreciation (months)", input({ type: "number", min: 1, value: 36, inputmode: "numeric" })),
    power_kw: new Field("power_kw", "Power (kW)", input({ inputmode: "decimal", value: "10.2" })),
    eur_per_kwh: new Field("eur_per_kwh", "Energy (€/kWh)", input({ inputmode: "decimal", value: "0.25" })),
    cooling_overhead: new Field("cooling_overhead", "Cooling overhead", input({ inputmode: "decimal", value: "0.4" })),
    rack_eur_per_month: new Field("rack_eur_per_month", "Rack (€/month)", input({ inputmode: "decimal", value: "1500" })),
    maintenance_eur_per_year: new Field("maintenance_eur_per_year", "Maintenance (€/year)", input({ inputmode: "decimal", value: "20000" })),
    staff_eur_per_year: new Field("staff_eur_per_year", "Staff (€/year)", input({ inputmode: "decimal", value: "90000" })),
    staff_fraction: new Field("staff_fraction", "Staff share (0..1)", input({ inputmode: "decimal", value: "0.5" })),
  };
  const all = [...Object.values(fields), ...Object.values(more)];
  const result = h("div", { "aria-live": "polite" });
  const status = new StatusLine();
  const form = h("form", { class: "tco-form", novalidate: true },
    h("div", { class: "grid-4" }, Object.values(fields).map((f) => f.el)),
    h("details", {}, h("summary", {}, "More inputs"), h("div", { class: "grid-4" }, Object.values(more).map((f) => f.el))),
    status.el);
  section.append(form, result);
  let seq = 0;
  const load = async () => {
    const mine = ++seq;
    const query = new URLSearchParams();
    for (const f of all) if (f.control.value.trim() !== "") query.set(f.name, f.control.value.trim());
    try {
      const t = await api<Tco>("GET", `/v1/tco?${query}`, undefined, { signal });
      if (mine !== seq) return;
      for (const f of all) f.setError("");
      status.clear();
      replace(result, tcoView(t));
    } catch (error) {
      if (mine !== seq || signal.aborted) return;
      const fieldsOf = (error as { fields?: { field: string; message: string }[] }).fields ?? [];
      for (const f of all) f.setError(fieldsOf.find((e) => e.field === f.name)?.message ?? "");
      status.error(error, "No comparison");
    }
  };
  const later = debounce(400, () => void load());
  form.addEventListener("input", later);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void load();
  });
  await load();
}

function tcoView(t: Tco): HTMLElement {
  const pct = (ppm: number) => ppm / 10_000;
  const owning: [number, number][] = t.curves.map((p) => [pct(p.utilisation_ppm), p.owning_cents / 100]);
  const payg: [number, number][] = t.curves.map((p) => [pct(p.utilisation_ppm), p.pay_as_you_go_cents / 100]);
  const breakEven = t.break_even_utilisation_ppm <= 1_000_000;
  const marks = [
    ...(breakEven ? [{ x: pct(t.break_even_utilisation_ppm), y: t.owning.total_cents / 100, label: `break-even at ${t.break_even_utilisation_percent}`, id: "break-even" }] : []),
    { x: pct(t.assumed.utilisation_ppm), label: `assumed ${t.assumed.utilisation_percent}`, id: "assumed" },
    ...(t.actual && t.actual.utilisation_ppm <= 1_000_000 ? [{ x: pct(t.actual.utilisation_ppm), label: `actual ${t.actual.utilisation_percent}`, id: "actual" }] : []),
  ];
  const chart = lineChart(
    [
      { name: "owning", points: owning },
      { name: "pay-as-you-go", points: payg },
    ],
    {
      title: `${t.gpus} × ${t.gpu_model}: cost per month against utilisation`,
      xLabel: "GPU utilisation (%)",
      yLabel: "€ per month",
      xFormat: (v) => `${Number(v.toPrecision(3))} %`,
      yFormat: euro,
      xDomain: [0, 100],
      // Head room above the lines for the break-even's label.
      yDomain: [0, Math.max(t.owning.total_cents, t.pay_as_you_go_full_cents) * 0.0115],
      pointMarkers: false,
      marks,
    },
  );
  const scenario = (label: string, get: (s: Tco["assumed"]) => string) => {
    const cells = [h("th", { scope: "row" }, label), h("td", { class: "num" }, get(t.assumed))];
    if (t.actual) cells.push(h("td", { class: "num" }, get(t.actual)));
    return h("tr", {}, cells);
  };
  const compare = h("div", { class: "table-scroll", role: "region", "aria-label": "Comparison", tabindex: "0" },
    h("table", { class: "data" },
      h("caption", {}, "Per month"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, ""), h("th", { scope: "col", class: "num" }, "Assumed"), t.actual ? h("th", { scope: "col", class: "num" }, `Actual (last ${t.history_days} days)`) : "")),
      h("tbody", {},
        scenario("Utilisation", (s) => s.utilisation_percent),
        scenario("Pay-as-you-go", (s) => euros(s.pay_as_you_go_cents)),
        scenario("Owning", (s) => euros(s.owning_cents)),
        scenario("Cheaper", (s) => s.cheaper),
        scenario("Months to break even", (s) => (s.months_to_break_even === null ? "never" : String(s.months_to_break_even))))));
  const o = t.owning;
  const parts: [string, number][] = [
    ["Depreciation", o.depreciation_cents],
    ["Power", o.power_cents],
    ["Cooling", o.cooling_cents],
    ["Rack", o.rack_cents],
    ["Maintenance", o.maintenance_cents],
    ["Staff", o.staff_cents],
  ];
  return h("div", { id: "tco" },
    h("p", { class: "tco-summary", "data-break-even": t.break_even_utilisation_percent },
      breakEven
        ? `Owning pays off above ${t.break_even_utilisation_percent} utilisation; below, pay-as-you-go is cheaper.`
        : "Owning never pays off: pay-as-you-go is cheaper even with every GPU busy all month.",
      ` Price: ${(t.price_per_gpu_minute_micro_eur / 1e6).toFixed(4)} € per GPU-minute (${t.price_source === "catalog" ? `catalog: ${t.flavor}` : "given"}).`),
    h("div", { class: "chart-holder", id: "tco-chart" }, chart),
    h("div", { class: "tco-numbers" },
      compare,
      h("dl", { class: "facts" },
        parts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, euros(v))]),
        h("dt", {}, "Owning, total"), h("dd", {}, h("strong", {}, euros(o.total_cents))))),
    t.history_note ? h("p", { class: "help" }, t.history_note) : "",
  );
}
