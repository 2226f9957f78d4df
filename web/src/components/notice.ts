// Status messages. Errors use role="alert" (announced at once); progress and results use
// role="status" (announced politely).
import { h } from "../dom";
import { messageOf } from "../api";

export function errorNotice(error: unknown, prefix = ""): HTMLElement {
  return h("p", { class: "notice error", role: "alert" }, prefix ? `${prefix}: ${messageOf(error)}` : messageOf(error));
}

export function infoNotice(text: string): HTMLElement {
  return h("p", { class: "notice", role: "status" }, text);
}

/** A region whose message can change; empty until set. */
export class StatusLine {
  readonly el = h("p", { class: "notice", role: "status", hidden: true });

  show(text: string, kind: "info" | "error" | "ok" = "info"): void {
    this.el.hidden = false;
    this.el.className = `notice ${kind === "info" ? "" : kind}`.trim();
    this.el.setAttribute("role", kind === "error" ? "alert" : "status");
    this.el.textContent = text;
  }

  error(error: unknown, prefix = ""): void {
    this.show(prefix ? `${prefix}: ${messageOf(error)}` : messageOf(error), "error");
  }

  clear(): void {
    this.el.hidden = true;
    this.el.textContent = "";
  }
}
