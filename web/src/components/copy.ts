// A block of text to copy (a token shown once, a curl command): read-only, selectable, with a
// Copy button that says whether it worked.
import { h, uid } from "../dom";

export function copyBlock(label: string, text: string, options: { secret?: boolean; multiline?: boolean } = {}): HTMLElement {
  const id = uid("copy");
  const field = options.multiline
    ? h("textarea", { id, readonly: true, rows: Math.min(12, text.split("\n").length + 1), spellcheck: "false", class: "copy-text" })
    : h("input", { id, type: "text", readonly: true, spellcheck: "false", autocomplete: "off", class: "copy-text" });
  field.value = text;
  if (options.secret) field.setAttribute("data-secret", "true");
  const said = h("span", { class: "help", role: "status", "aria-live": "polite" });
  const button = h(
    "button",
    {
      type: "button",
      "aria-label": `Copy ${label}`,
      onclick: async () => {
        try {
          await navigator.clipboard.writeText(text);
          said.textContent = "Copied.";
        } catch {
          // Without clipboard access (http, a denied permission): select it for Ctrl+C.
          field.focus();
          field.select();
          said.textContent = "Selected: press Ctrl+C (⌘C) to copy.";
        }
      },
    },
    "Copy",
  );
  field.addEventListener("focus", () => field.select());
  return h("div", { class: "field copy" }, h("label", { for: id }, label), h("div", { class: "copy-row" }, field, button), said);
}
