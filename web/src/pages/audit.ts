// The audit log (docs/audit.md): who did what, filtered by time, actor and action, oldest first,
// page by page; and the hash chain's verification (GET /v1/audit/verify, platform admins).
import { api, messageOf, whoami } from "../api";
import { Field, input } from "../components/form";
import { errorNotice, StatusLine } from "../components/notice";
import { dataTable } from "../components/table";
import { h, replace } from "../dom";
import { dateTime, shortDateTime } from "../format";
import { registerPage } from "../router";
import type { AuditEntry, Page } from "../types";

const PAGE = 500;

/** "2025-01-31T12:00" (a datetime-local value, local time) → RFC 3339, or "" when empty. */
function rfc3339(local: string): string {
  if (!local) return "";
  const d = new Date(local);
  return isNaN(d.getTime()) ? "" : d.toISOString();
}

function localValue(d: Date): string {
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

registerPage({
  path: "/audit",
  title: "Audit log",
  nav: { label: "Audit", order: 60 },
  async render(ctx) {
    const me = await whoami();
    if (me.role !== "admin") {
      ctx.root.append(h("p", { class: "notice" }, `The audit log is for admin tokens; yours has role '${me.role}'.`));
      return;
    }
    const fields = {
      from: new Field("from", "From", input({ type: "datetime-local", value: localValue(new Date(Date.now() - 24 * 3600 * 1000)) })),
      to: new Field("to", "Until", input({ type: "datetime-local" })),
      actor: new Field("actor", "Actor", input({ autocomplete: "off", spellcheck: "false", placeholder: "usr_… or tok_… or an access key" })),
      action: new Field("action", "Action starts with", input({ autocomplete: "off", spellcheck: "false", placeholder: "POST /v1/apps" })),
    };
    const status = new StatusLine();
    const verifyStatus = new StatusLine();
    const list = h("div", { "aria-live": "polite" });
    const more = h("button", { type: "button", hidden: true }, "Load more");
    const count = h("p", { class: "help", id: "audit-count" });
    const form = h("form", { class: "card", novalidate: true, role: "search", "aria-label": "Filter the audit log" },
      h("div", { class: "grid-4" }, Object.values(fields).map((f) => f.el)),
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Show"),
        me.platform_admin ? h("button", { type: "button", id: "audit-verify", onclick: () => void verify() }, "Verify the chain") : ""),
      status.el, verifyStatus.el);
    ctx.root.append(form, count, list, more);

    let entries: AuditEntry[] = [];
    let cursor: string | null = null;
    const draw = () => {
      replace(
        list,
        dataTable(
          [
            { label: "#", className: "num", cell: (e) => String(e.seq) },
            { label: "When", className: "nowrap", cell: (e) => h("time", { datetime: e.at, title: dateTime(new Date(e.at)) }, shortDateTime(new Date(e.at))) },
            { label: "Action", cell: (e) => h("code", { class: "clip", title: e.action }, e.action) },
            // Ids and paths stay on one line (a broken id reads as two); a long one is cut with
            // an ellipsis, whole in its tooltip and to screen readers. The detail (why a call
            // was refused, an S3 call's subresources) is prose under it.
            {
              label: "Resource",
              cell: (e) => [h("code", { class: "id clip", title: e.resource }, e.resource), e.detail ? h("div", { class: "help detail" }, e.detail) : ""],
            },
            { label: "Result", className: "num", cell: (e) => h("span", { class: e.result >= 400 ? "error" : "" }, String(e.result)) },
            // Who, with which token or access key, from where: one line each, so that the
            // table fits a 1024 px window.
            {
              label: "Actor",
              cell: (e) => [
                e.actor_user ? h("div", { class: "id" }, e.actor_user) : "",
                e.actor_token ? h("div", { class: "id help" }, e.actor_token) : "",
                e.source ? h("div", { class: "help clip source", title: `from ${e.source}` }, `from ${e.source}`) : "",
              ],
            },
          ],
          entries,
          { caption: "Audit entries, oldest first", empty: "No entry matches.", rowKey: (e) => String(e.seq), className: "audit" },
        ),
      );
      count.textContent = `${entries.length} entr${entries.length === 1 ? "y" : "ies"}${cursor ? " so far" : ""}.`;
      more.hidden = cursor === null;
    };
    const load = async (next: boolean) => {
      const query = new URLSearchParams({ limit: String(PAGE) });
      const from = rfc3339(fields.from.control.value);
      const to = rfc3339(fields.to.control.value);
      if (from) query.set("from", from);
      if (to) query.set("to", to);
      if (fields.actor.control.value.trim()) query.set("actor", fields.actor.control.value.trim());
      if (fields.action.control.value.trim()) query.set("action", fields.action.control.value.trim());
      if (next && cursor) query.set("cursor", cursor);
      list.setAttribute("aria-busy", "true");
      try {
        const page = await api<Page<AuditEntry>>("GET", `/v1/audit?${query}`, undefined, { signal: ctx.signal });
        entries = next ? [...entries, ...page.items] : page.items;
        cursor = page.next_cursor;
        status.clear();
        draw();
      } catch (error) {
        status.error(error, "The audit log cannot be read");
        if (!next) replace(list, errorNotice(error));
      }
      list.removeAttribute("aria-busy");
    };
    const verify = async () => {
      verifyStatus.show("Verifying every entry's hash and link…");
      try {
        const r = await api<{ ok: boolean; entries: number; first_bad_seq: number | null; problem: string }>("GET", "/v1/audit/verify", undefined, { signal: ctx.signal });
        if (r.ok) verifyStatus.show(`Verified: ok, ${r.entries} entries, every hash and link holds.`, "ok");
        else verifyStatus.show(`Verification failed at entry ${r.first_bad_seq}: ${r.problem}`, "error");
      } catch (error) {
        verifyStatus.show(`The chain cannot be verified: ${messageOf(error)}`, "error");
      }
    };
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      void load(false);
    });
    more.addEventListener("click", () => void load(true));
    await load(false);
  },
});
