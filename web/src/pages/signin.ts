// Sign in with an API token: checked with GET /v1/whoami before it is kept (in sessionStorage).
import { api, messageOf, storeToken, takeSignOutReason } from "../api";
import { Field, input } from "../components/form";
import { StatusLine } from "../components/notice";
import { h } from "../dom";
import { navigate, registerPage } from "../router";
import type { Whoami } from "../types";

registerPage({
  path: "/signin",
  title: "Sign in",
  public: true,
  render(ctx) {
    const token = input({ type: "password", autocomplete: "off", required: true, spellcheck: "false" });
    const field = new Field(
      "token",
      "API token",
      token,
      "An API token of your project: the admin token is in <data-dir>/admin.json; others come from `sovai token create`. It is kept only in this tab.",
    );
    const status = new StatusLine();
    const reason = takeSignOutReason();
    if (reason) status.show(`You were signed out: ${reason}`, "error");
    const submit = h("button", { type: "submit", class: "primary" }, "Sign in");
    const form = h("form", { class: "card narrow", novalidate: true }, field.el, submit, status.el);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const value = token.value.trim();
      field.setError("");
      if (!value) {
        field.setError("Enter a token.");
        token.focus();
        return;
      }
      submit.disabled = true;
      status.show("Checking the token…");
      try {
        const me = await api<Whoami>("GET", "/v1/whoami", undefined, { token: value, signal: ctx.signal });
        storeToken(value);
        status.show(`Signed in as ${me.user.name} in project ${me.project.name}.`, "ok");
        const next = ctx.query.get("next");
        navigate(next && next.startsWith("/") && !next.startsWith("//") ? next : "/jobs", { replace: true });
      } catch (error) {
        status.show(`This token was refused: ${messageOf(error)}`, "error");
        field.setError("The server did not accept this token.");
        token.focus();
      } finally {
        submit.disabled = false;
      }
    });
    ctx.root.append(form);
    token.focus();
  },
});
