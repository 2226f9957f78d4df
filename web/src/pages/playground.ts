// The chat playground: a conversation with one of the project's apps (through its gateway,
// /apps/<id>/v1/chat/completions) or a catalog model (/v1/chat/completions), the answer streamed
// as it is generated. The API key is the session's token unless another one is pasted (an app
// token made on the app's page): a refused key shows the refusal and no text.
import { api, messageOf } from "../api";
import { ChatError, streamChat, type ChatMessage } from "../chat";
import { Field, input, textarea } from "../components/form";
import { StatusLine } from "../components/notice";
import { h, replace } from "../dom";
import { registerPage } from "../router";
import type { App, Endpoint, Page } from "../types";

interface Target {
  value: string; // "app:<id>" or "model:<name>"
  label: string;
  url: string;
  model: string;
}

registerPage({
  path: "/playground",
  title: "Chat playground",
  nav: { label: "Playground", order: 35 },
  async render(ctx) {
    const [apps, endpoints] = await Promise.all([
      api<Page<App>>("GET", "/v1/apps", undefined, { signal: ctx.signal }).then((p) => p.items).catch(() => [] as App[]),
      api<Page<Endpoint>>("GET", "/v1/endpoints", undefined, { signal: ctx.signal }).then((p) => p.items).catch(() => [] as Endpoint[]),
    ]);
    const targets: Target[] = [
      ...apps.map((a) => ({ value: `app:${a.id}`, label: `${a.name} (app, ${a.state})`, url: `/apps/${encodeURIComponent(a.id)}/v1/chat/completions`, model: a.name })),
      ...endpoints.map((e) => ({ value: `model:${e.name}`, label: `${e.name} (catalog)`, url: "/v1/chat/completions", model: e.name })),
    ];
    if (targets.length === 0) {
      ctx.root.append(
        h("p", { class: "notice" }, "There is nothing to chat with yet: ", h("a", { href: "/deployments/new" }, "deploy a model"), " first, or ask an operator to publish one in the catalog."),
      );
      return;
    }
    const select = h(
      "select",
      {},
      apps.length ? h("optgroup", { label: "Apps of this project" }, targets.filter((t) => t.value.startsWith("app:")).map((t) => h("option", { value: t.value }, t.label))) : "",
      endpoints.length ? h("optgroup", { label: "Catalog" }, targets.filter((t) => t.value.startsWith("model:")).map((t) => h("option", { value: t.value }, t.label))) : "",
    );
    const wanted = ctx.query.get("app") ? `app:${ctx.query.get("app")}` : ctx.query.get("model") ? `model:${ctx.query.get("model")}` : "";
    const byName = apps.find((a) => a.name === ctx.query.get("app"));
    if (targets.some((t) => t.value === wanted)) select.value = wanted;
    else if (byName) select.value = `app:${byName.id}`;

    const fields = {
      target: new Field("target", "Talk to", select),
      key: new Field("api_key", "API key (optional)", input({ type: "password", autocomplete: "off", spellcheck: "false" }), "Empty: your signed-in token. Paste an app token to try what its users will see."),
      system: new Field("system", "System prompt (optional)", textarea({ rows: 2, spellcheck: "true" })),
      message: new Field("message", "Message", textarea({ rows: 3, spellcheck: "true", required: true, placeholder: "Ask something" }), "Ctrl+Enter sends."),
      max_tokens: new Field("max_tokens", "Max tokens", input({ type: "number", min: 1, max: 4096, value: 128, inputmode: "numeric" })),
      temperature: new Field("temperature", "Temperature", input({ type: "number", min: 0, max: 2, step: 0.1, value: 0.7, inputmode: "decimal" })),
    };
    const conversation = h("ol", { class: "chat", "aria-label": "Conversation", "aria-live": "off" });
    const status = new StatusLine();
    const sendButton = h("button", { type: "submit", class: "primary" }, "Send");
    const stopButton = h("button", { type: "button", class: "danger", disabled: true }, "Stop");
    const clearButton = h("button", { type: "button" }, "Clear conversation");
    const form = h(
      "form",
      { class: "card chat-form", novalidate: true },
      h("div", { class: "grid-2" }, fields.target.el, fields.key.el),
      fields.system.el,
      h("div", { class: "grid-2" }, fields.max_tokens.el, fields.temperature.el),
      fields.message.el,
      h("div", { class: "actions" }, sendButton, stopButton, clearButton),
      status.el,
    );
    ctx.root.append(form, h("section", { class: "card", "aria-labelledby": "chat-h" }, h("h2", { id: "chat-h" }, "Conversation"), conversation));

    let history: ChatMessage[] = [];
    let running: AbortController | null = null;
    ctx.signal.addEventListener("abort", () => running?.abort());
    stopButton.addEventListener("click", () => running?.abort());
    clearButton.addEventListener("click", () => {
      history = [];
      replace(conversation);
      status.clear();
    });
    select.addEventListener("change", () => {
      history = [];
      replace(conversation);
    });
    (fields.message.control as HTMLTextAreaElement).addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        form.requestSubmit();
      }
    });

    const bubble = (role: "user" | "assistant", text: string) => {
      const body = h("div", { class: "chat-text" }, text);
      const item = h("li", { class: `chat-msg ${role}` }, h("span", { class: "chat-who" }, role === "user" ? "You" : "Model"), body);
      conversation.append(item);
      return { item, body };
    };

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (running) return;
      const text = fields.message.control.value.trim();
      fields.message.setError("");
      if (!text) {
        fields.message.setError("Write a message first.");
        fields.message.control.focus();
        return;
      }
      const target = targets.find((t) => t.value === select.value)!;
      const messages: ChatMessage[] = [];
      const system = fields.system.control.value.trim();
      if (system) messages.push({ role: "system", content: system });
      messages.push(...history, { role: "user", content: text });
      const asked = bubble("user", text);
      const answer = bubble("assistant", "");
      answer.item.setAttribute("aria-busy", "true");
      answer.body.setAttribute("data-streaming", "true");
      status.show(`Waiting for ${target.model}…`);
      running = new AbortController();
      sendButton.disabled = true;
      stopButton.disabled = false;
      try {
        const maxTokens = Number(fields.max_tokens.control.value);
        const temperature = Number(fields.temperature.control.value);
        const result = await streamChat(
          {
            url: target.url,
            model: target.model,
            messages,
            max_tokens: isFinite(maxTokens) && maxTokens > 0 ? maxTokens : undefined,
            temperature: isFinite(temperature) ? temperature : undefined,
            token: fields.key.control.value.trim() || undefined,
          },
          (delta) => {
            answer.body.append(delta);
            answer.item.scrollIntoView({ block: "nearest" });
          },
          running.signal,
        );
        history.push({ role: "user", content: text }, { role: "assistant", content: result.text });
        status.show(`Answer complete${result.finishReason ? ` (${result.finishReason})` : ""}.`, "ok");
        fields.message.control.value = "";
      } catch (error) {
        if (error instanceof DOMException && error.name === "AbortError") {
          status.show("Stopped.");
          if (!answer.body.textContent) answer.item.remove();
        } else {
          // A refusal shows nothing of an answer: only why.
          answer.item.remove();
          asked.item.remove();
          status.show(error instanceof ChatError ? `Refused: ${error.message}` : `The request failed: ${messageOf(error)}`, "error");
        }
      } finally {
        answer.item.removeAttribute("aria-busy");
        answer.body.removeAttribute("data-streaming");
        answer.body.setAttribute("data-done", "true");
        running = null;
        sendButton.disabled = false;
        stopButton.disabled = true;
      }
    });
    fields.message.control.focus();
  },
});
