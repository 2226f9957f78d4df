// The panel's entry point: the top bar (navigation from the page registry, who is signed in,
// sign out) and the router.
import "./style.css";
import "./pages/index";
import { currentToken, signOut, whoami } from "./api";
import { h, replace } from "./dom";
import { navPages, onNavigate, startRouter } from "./router";

const topbar = document.getElementById("topbar")!;
const main = document.getElementById("main")!;

function drawTopbar(): void {
  const signedIn = currentToken() !== null;
  const links = navPages().map((page) => {
    const path = page.path;
    const current = location.pathname === path || location.pathname.startsWith(`${path}/`);
    return h("li", {}, h("a", { href: path, "aria-current": current ? "page" : undefined }, page.nav!.label));
  });
  const who = h("span", { class: "who" });
  replace(
    topbar,
    h("a", { href: "/", class: "brand" }, h("img", { src: "/favicon.svg", alt: "", width: 24, height: 24 }), "Sovai"),
    signedIn ? h("nav", { "aria-label": "Main" }, h("ul", {}, links)) : "",
    signedIn ? h("div", { class: "session" }, who, h("button", { type: "button", class: "link", onclick: () => signOut() }, "Sign out")) : "",
  );
  if (signedIn) {
    whoami()
      .then((me) => {
        who.textContent = `${me.user.name} · ${me.project.name} (${me.role})`;
      })
      .catch(() => {
        who.textContent = "";
      });
  }
}

onNavigate(drawTopbar);
startRouter(main);
