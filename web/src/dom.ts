// Tiny DOM helpers: the panel builds its pages with plain elements (no framework, no innerHTML of
// data, so nothing a job or an object key contains is ever parsed as HTML).

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

/** An element: h("a", {href: "/jobs", class: "btn"}, "Jobs"). `on*` attributes add listeners;
 * boolean true sets an empty attribute, false/null/undefined leaves it out. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, ...children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** An SVG element, same conventions as h(). */
export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, ...children);
  return el;
}

function setAttrs(el: Element, attrs: Attrs): void {
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (value === true) {
      el.setAttribute(name, "");
    } else {
      el.setAttribute(name, String(value));
    }
  }
}

export function append(parent: Node, ...children: (Child | Child[])[]): void {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces every child of `el`. */
export function replace(el: Element, ...children: (Child | Child[])[]): void {
  el.replaceChildren();
  append(el, ...children);
}

let ids = 0;
/** A document-unique id for label/aria wiring. */
export function uid(prefix: string): string {
  ids += 1;
  return `${prefix}-${ids}`;
}

/** Runs `fn` now and then every `interval_ms` until `signal` aborts; while the tab is hidden it
 * waits, and it runs at once when the tab shows again. A run never overlaps the previous one. */
export function every(interval_ms: number, fn: () => Promise<void> | void, signal: AbortSignal): void {
  let timer: number | undefined;
  let running = false;
  const tick = async () => {
    timer = undefined;
    if (signal.aborted || running) return;
    if (document.hidden) return;
    running = true;
    try {
      await fn();
    } catch (e) {
      console.warn("poll failed", e);
    } finally {
      running = false;
    }
    if (!signal.aborted) timer = window.setTimeout(tick, interval_ms);
  };
  const onVisible = () => {
    if (!document.hidden && timer === undefined && !running) void tick();
  };
  document.addEventListener("visibilitychange", onVisible);
  signal.addEventListener("abort", () => {
    if (timer !== undefined) clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisible);
  });
  void tick();
}

/** Calls `fn` `delay_ms` after the last call of the returned function. */
export function debounce<A extends unknown[]>(delay_ms: number, fn: (...args: A) => void): (...args: A) => void {
  let timer: number | undefined;
  return (...args: A) => {
    if (timer !== undefined) clearTimeout(timer);
    timer = window.setTimeout(() => fn(...args), delay_ms);
  };
}
