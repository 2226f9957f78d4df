// Layout checks of the panel's pages at desktop sizes, for panel_apps_browser.mjs: measured in the
// page (Chromium's own layout), not eyeballed. Each returns the offenders, so that a failed check
// names them:
//  * wrappedText: labels, headings, buttons, table headers, ids... whose text takes more than one
//    line (a label squeezed into "Peri / od", an id over four lines);
//  * xTickProblems: a chart's x tick labels that repeat, go backwards, overlap, or sit off the
//    unit they name (a "Dec 1" tick at 04:00);
//  * pageOverflow: how far the document is wider than the window.

/** Viewports the desktop checks run at: a large laptop and the smallest common desktop. */
export const DESKTOP_VIEWPORTS = [
  { width: 1400, height: 900 },
  { width: 1024, height: 768 },
];

/** Elements matched by `selector` (inside <main>) whose text is laid out on more than one line.
 * Lines are counted from the text nodes' boxes: each fragment of text on another line box has
 * another vertical position, whatever the element's padding or display. */
export async function wrappedText(page, selector) {
  return page.evaluate((sel) => {
    const lineCount = (el) => {
      const centers = [];
      const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (node.textContent.trim() === "") continue;
        const range = document.createRange();
        range.selectNodeContents(node);
        for (const r of range.getClientRects()) {
          if (r.width === 0 || r.height === 0) continue;
          const center = (r.top + r.bottom) / 2;
          if (!centers.some((c) => Math.abs(c - center) < r.height / 2)) centers.push(center);
        }
      }
      return centers.length;
    };
    return Array.from(document.querySelectorAll(sel))
      .filter((el) => el.getClientRects().length > 0 && !el.closest("[hidden]"))
      .map((el) => ({ el, lines: lineCount(el) }))
      .filter(({ lines }) => lines > 1)
      .map(({ el, lines }) => `${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""} "${el.textContent.trim().slice(0, 40)}" on ${lines} lines`);
  }, selector);
}

/** What is wrong with the x tick labels of the chart in `holder` (a selector): fewer than
 * `minTicks`, a label equal to another, positions not increasing, two labels' boxes overlapping,
 * or (with `unit`) a tick whose value (data-x) is not a whole multiple of it. */
export async function xTickProblems(page, holder, { minTicks = 1, unit } = {}) {
  return page.evaluate(([sel, min, unitValue]) => {
    const labels = Array.from(document.querySelectorAll(`${sel} svg text.x-tick`)).map((t) => {
      const box = t.getBoundingClientRect();
      return { text: t.textContent, x: Number(t.getAttribute("data-x")), left: box.left, right: box.right };
    });
    const problems = [];
    if (labels.length < min) problems.push(`${labels.length} ticks, wanted at least ${min}`);
    const texts = labels.map((l) => l.text);
    if (new Set(texts).size !== texts.length) problems.push(`repeated labels: ${texts.join(", ")}`);
    for (let i = 1; i < labels.length; i++) {
      if (!(labels[i].x > labels[i - 1].x)) problems.push(`tick ${i} (${texts[i]}) is not after tick ${i - 1}`);
      if (labels[i].left < labels[i - 1].right) problems.push(`"${texts[i - 1]}" and "${texts[i]}" overlap`);
    }
    if (unitValue) {
      for (const l of labels) if (!Number.isInteger(l.x / unitValue)) problems.push(`"${l.text}" is at ${l.x}, not on a whole ${unitValue}`);
    }
    return problems;
  }, [holder, minTicks, unit ?? 0]);
}

/** Pixels the document is wider than the window (0 when nothing scrolls sideways). */
export async function pageOverflow(page) {
  return page.evaluate(() => Math.max(0, document.documentElement.scrollWidth - window.innerWidth));
}
