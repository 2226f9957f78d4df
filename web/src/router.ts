// The page registry and the client-side router. A page module registers itself:
//
//   registerPage({
//     path: "/jobs/:id",                 // literal segments and :params
//     title: "Job",
//     nav: { label: "Jobs", order: 20 },  // optional: a link in the top bar
//     render: async (ctx) => { ctx.root.append(...) },
//   });
//
// and is imported once from pages/index.ts. On each navigation the router aborts the previous
// page's ctx.signal (stop polling and streams there), clears <main>, and calls render. Paths match
// segment by segment; a literal beats a :param ("/jobs/new" before "/jobs/:id"). Pages need a
// signed-in session unless `public` is set; without a token the router shows /signin?next=...
import { currentToken } from "./api";
import { h, replace } from "./dom";

export interface PageContext {
  params: Record<string, string>;
  query: URLSearchParams;
  /** The page's container (<main>); empty when render is called. */
  root: HTMLElement;
  /** Aborted when the user leaves the page. */
  signal: AbortSignal;
  /** Sets the document title and the page's <h1> text. */
  setTitle(title: string): void;
}

export interface Page {
  path: string;
  title: string;
  nav?: { label: string; order: number };
  public?: boolean;
  render(ctx: PageContext): void | Promise<void>;
}

interface Compiled {
  page: Page;
  segments: string[];
  score: number[];
}

const pages: Compiled[] = [];
const navListeners: (() => void)[] = [];

function split(path: string): string[] {
  return path.split("/").filter((s) => s !== "");
}

export function registerPage(page: Page): void {
  const segments = split(page.path);
  pages.push({ page, segments, score: segments.map((s) => (s.startsWith(":") ? 1 : 2)) });
}

/** The pages that appear in the navigation bar, in order. */
export function navPages(): Page[] {
  return pages
    .map((p) => p.page)
    .filter((p) => p.nav)
    .sort((a, b) => a.nav!.order - b.nav!.order);
}

function match(pathname: string): { page: Page; params: Record<string, string> } | null {
  const parts = split(pathname).map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  let best: { page: Page; params: Record<string, string>; score: number[] } | null = null;
  for (const candidate of pages) {
    if (candidate.segments.length !== parts.length) continue;
    const params: Record<string, string> = {};
    let ok = true;
    candidate.segments.forEach((segment, i) => {
      if (segment.startsWith(":")) params[segment.slice(1)] = parts[i];
      else if (segment !== parts[i]) ok = false;
    });
    if (!ok) continue;
    if (!best || compare(candidate.score, best.score) > 0) best = { page: candidate.page, params, score: candidate.score };
  }
  return best;
}

function compare(a: number[], b: number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

let outlet: HTMLElement;
let current: AbortController | null = null;
let firstRender = true;

/** Goes to `url` ("/jobs/abc?x=1") without reloading. */
export function navigate(url: string, options: { replace?: boolean } = {}): void {
  if (options.replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  void render();
}

/** Calls `fn` after every navigation (the top bar marks the current link). */
export function onNavigate(fn: () => void): void {
  navListeners.push(fn);
}

async function render(): Promise<void> {
  current?.abort();
  const controller = new AbortController();
  current = controller;
  const { pathname, search } = location;
  if (pathname === "/" || pathname === "/index.html") {
    history.replaceState(null, "", currentToken() ? "/jobs" : "/signin");
    return render();
  }
  const found = match(pathname);
  if (found && !found.page.public && !currentToken()) {
    history.replaceState(null, "", `/signin?next=${encodeURIComponent(pathname + search)}`);
    return render();
  }
  const heading = h("h1", { tabindex: "-1" });
  const ctx: PageContext = {
    params: found?.params ?? {},
    query: new URLSearchParams(search),
    root: outlet,
    signal: controller.signal,
    setTitle(title: string) {
      document.title = `${title} · Sovai`;
      heading.textContent = title;
    },
  };
  replace(outlet, heading);
  ctx.setTitle(found?.page.title ?? "Page not found");
  for (const fn of navListeners) fn();
  // Screen readers and keyboards start at the new page's heading (not on the first load).
  if (!firstRender) heading.focus();
  firstRender = false;
  if (!found) {
    outlet.append(h("p", {}, "There is no page at ", h("code", {}, pathname), ". ", h("a", { href: "/jobs" }, "Go to the jobs"), "."));
    return;
  }
  try {
    await found.page.render(ctx);
  } catch (error) {
    if (controller.signal.aborted) return;
    console.error(error);
    outlet.append(h("p", { class: "notice error", role: "alert" }, `This page failed: ${error instanceof Error ? error.message : String(error)}`));
  }
}

/** Starts routing: renders the current URL, follows same-origin links and the back button. */
export function startRouter(main: HTMLElement): void {
  outlet = main;
  document.addEventListener("click", (event) => {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const link = (event.target as Element | null)?.closest?.("a");
    if (!link || link.target || link.hasAttribute("download") || link.origin !== location.origin) return;
    if (link.pathname.startsWith("/v1/")) return;
    // In-page anchors (the skip link) are the browser's.
    if (link.hash && link.pathname === location.pathname && link.search === location.search) return;
    event.preventDefault();
    if (link.pathname + link.search !== location.pathname + location.search) navigate(link.pathname + link.search);
  });
  window.addEventListener("popstate", () => void render());
  // A refused token (expired, revoked) comes back to this page after signing in again; a plain
  // sign-out starts afresh (the next token may be another project's).
  window.addEventListener("sovai:signed-out", (event) => {
    const refused = (event as CustomEvent<string>).detail !== "";
    if (location.pathname !== "/signin") {
      const next = refused ? `?next=${encodeURIComponent(location.pathname + location.search)}` : "";
      history.replaceState(null, "", `/signin${next}`);
    }
    void render();
  });
  void render();
}
