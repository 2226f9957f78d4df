// Labeled form fields with help text and an error slot, wired for assistive technology: the label
// names the control, aria-describedby reads the help and the error, aria-invalid marks it.
import { h, uid } from "../dom";

type Control = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

export class Field<C extends Control = Control> {
  readonly el: HTMLElement;
  private readonly errorEl: HTMLElement;

  constructor(
    readonly name: string,
    label: string,
    readonly control: C,
    help = "",
  ) {
    control.id ||= uid(`f-${name}`);
    control.name = name;
    const helpEl = help ? h("p", { class: "help", id: `${control.id}-help` }, help) : null;
    this.errorEl = h("p", { class: "field-error", id: `${control.id}-error`, hidden: true });
    control.setAttribute("aria-describedby", [helpEl?.id, this.errorEl.id].filter(Boolean).join(" "));
    this.el = h("div", { class: "field", "data-field": name }, h("label", { for: control.id }, label), control, helpEl, this.errorEl);
  }

  setError(message: string): void {
    this.errorEl.textContent = message;
    this.errorEl.hidden = message === "";
    if (message) this.control.setAttribute("aria-invalid", "true");
    else this.control.removeAttribute("aria-invalid");
  }
}

export function input(attrs: Record<string, string | number | boolean | undefined> = {}): HTMLInputElement {
  return h("input", { type: "text", ...attrs });
}

export function textarea(attrs: Record<string, string | number | boolean | undefined> = {}): HTMLTextAreaElement {
  return h("textarea", { rows: 3, spellcheck: "false", autocapitalize: "off", ...attrs });
}

/** Non-empty trimmed lines of a textarea. */
export function lines(value: string): string[] {
  return value
    .split("\n")
    .map((l) => l.replace(/\r$/, ""))
    .filter((l) => l.trim() !== "");
}
