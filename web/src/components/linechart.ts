// A small SVG line chart: numeric x and y, several series, axes with round ticks, a legend, and a
// text summary for screen readers (role="img" + aria-label). Each series is one <path> whose
// data-points attribute says how many points it drew.
import { h, svg } from "../dom";

export interface Series {
  name: string;
  points: [number, number][];
}

/** A point or a vertical line worth naming (the TCO break-even): a circle at (x, y) when y is
 * given, else a dashed vertical line at x; both with a text label (and in the text summary). */
export interface Mark {
  x: number;
  y?: number;
  label: string;
  /** data-mark attribute, for tests and styles. */
  id?: string;
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  width?: number;
  height?: number;
  /** Tick and summary labels (default: up to 4 significant digits). */
  xFormat?: (v: number) => string;
  yFormat?: (v: number) => string;
  /** Fixed axis ranges instead of the data's (a cost axis from 0, utilisation 0..100 %). */
  xDomain?: [number, number];
  /** Put the x ticks on whole multiples of this (86 400 for days of seconds), as many as fit
   * side by side: round ticks of a short span would fall inside one unit and name it twice. */
  xTickUnit?: number;
  yDomain?: [number, number];
  marks?: Mark[];
  /** Steps instead of straight lines between points (counters sampled over time). */
  step?: boolean;
  /** A dot on each point (default: when a series has at most 40 points). */
  pointMarkers?: boolean;
}

const MARGIN = { top: 12, right: 16, bottom: 40, left: 56 };
/** About how wide a character of the 12 px tick labels is, to leave room for the widest. */
const CHAR_PX = 7;

/** Ticks on whole multiples of `unit` in [lo, hi], every k-th one so that at most `max` remain
 * (at least one when the span holds a multiple), counted back from the last one: the newest day
 * of a spend chart is always named. Increasing. */
export function unitTicks(lo: number, hi: number, unit: number, max: number): number[] {
  if (!isFinite(lo) || !isFinite(hi) || !(unit > 0) || hi < lo) return [];
  const first = Math.ceil(lo / unit);
  const last = Math.floor(hi / unit);
  const every = Math.max(1, Math.ceil((last - first + 1) / Math.max(1, max)));
  const out: number[] = [];
  for (let i = last; i >= first; i -= every) out.push(i * unit);
  return out.reverse();
}

/** About `count` round tick values covering [lo, hi]. */
export function ticks(lo: number, hi: number, count = 5): number[] {
  if (!isFinite(lo) || !isFinite(hi)) return [];
  if (hi === lo) return [lo];
  const raw = (hi - lo) / count;
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? raw;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

function label(v: number): string {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 10000 || a < 0.001) return v.toExponential(1);
  return String(Number(v.toPrecision(4)));
}

export function lineChart(series: Series[], options: ChartOptions): HTMLElement {
  const width = options.width ?? 640;
  const height = options.height ?? 280;
  const fx = options.xFormat ?? label;
  const fy = options.yFormat ?? label;
  const all = series.flatMap((s) => s.points).filter(([x, y]) => isFinite(x) && isFinite(y));
  let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  if (all.length === 0) [x0, x1, y0, y1] = [0, 1, 0, 1];
  if (options.xDomain) [x0, x1] = options.xDomain;
  if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
  if (options.yDomain) {
    [y0, y1] = [Math.min(options.yDomain[0], y0), Math.max(options.yDomain[1], y1)];
    if (y0 === y1) y1 = y0 + 1;
  } else {
    if (y0 === y1) [y0, y1] = [y0 - 1, y1 + 1];
    const pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
  }
  // The left margin fits the widest y tick label ("0.008 €") and the rotated axis label.
  const yTicks = ticks(y0, y1);
  const M = { ...MARGIN, left: Math.max(MARGIN.left, 28 + CHAR_PX * Math.max(0, ...yTicks.map((t) => fy(t).length))) };
  const plotW = width - M.left - M.right;
  const plotH = height - M.top - M.bottom;
  const sx = (x: number) => M.left + ((x - x0) / (x1 - x0)) * plotW;
  const sy = (y: number) => M.top + (1 - (y - y0) / (y1 - y0)) * plotH;

  const summary = series
    .filter((s) => s.points.length > 0)
    .map((s) => {
      const first = s.points[0];
      const last = s.points[s.points.length - 1];
      return `${s.name} from ${fy(first[1])} at ${options.xLabel} ${fx(first[0])} to ${fy(last[1])} at ${fx(last[0])}`;
    })
    .concat((options.marks ?? []).map((m) => m.label))
    .join("; ");
  const root = svg("svg", {
    class: "chart",
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": `${options.title}: ${summary || "no data yet"}`,
    preserveAspectRatio: "xMidYMid meet",
  });
  const grid = svg("g", { class: "grid" });
  for (const t of yTicks) {
    grid.append(
      svg("line", { x1: M.left, x2: width - M.right, y1: sy(t), y2: sy(t) }),
      svg("text", { x: M.left - 6, y: sy(t), "text-anchor": "end", "dominant-baseline": "middle" }, fy(t)),
    );
  }
  let xTicks = ticks(x0, x1, 6);
  if (options.xTickUnit) {
    // As many as fit side by side: each label's width plus a gap.
    const widest = Math.max(1, ...unitTicks(x0, x1, options.xTickUnit, 1000).map((t) => fx(t).length));
    xTicks = unitTicks(x0, x1, options.xTickUnit, Math.floor(plotW / (CHAR_PX * widest + 12)));
  }
  for (const t of xTicks) {
    grid.append(
      svg("line", { class: "tick", x1: sx(t), x2: sx(t), y1: height - M.bottom, y2: height - M.bottom + 4 }),
      svg("text", { class: "x-tick", "data-x": t, x: sx(t), y: height - M.bottom + 16, "text-anchor": "middle" }, fx(t)),
    );
  }
  grid.append(
    svg("line", { class: "axis", x1: M.left, x2: width - M.right, y1: height - M.bottom, y2: height - M.bottom }),
    svg("text", { class: "axis-label", x: M.left + plotW / 2, y: height - 4, "text-anchor": "middle" }, options.xLabel),
    svg("text", { class: "axis-label", x: 12, y: M.top + plotH / 2, "text-anchor": "middle", transform: `rotate(-90 12 ${M.top + plotH / 2})` }, options.yLabel),
  );
  root.append(grid);
  series.forEach((s, i) => {
    const points = s.points.filter(([x, y]) => isFinite(x) && isFinite(y));
    const d = points
      .map(([x, y], j) => {
        const to = `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`;
        if (j === 0) return `M${to}`;
        // A step holds the previous value until the new x, then jumps.
        return options.step ? `L${sx(x).toFixed(1)},${sy(points[j - 1][1]).toFixed(1)} L${to}` : `L${to}`;
      })
      .join(" ");
    const max = points.length ? Math.max(...points.map((p) => p[1])) : 0;
    root.append(svg("path", { class: `series series-${i}`, d, "data-series": s.name, "data-points": points.length, "data-max": max }));
    // Markers when a series is sparse (validation losses), so single points show.
    if (options.pointMarkers ?? points.length <= 40) {
      for (const [x, y] of points) root.append(svg("circle", { class: `marker series-${i}`, cx: sx(x), cy: sy(y), r: 3 }));
    }
  });
  for (const m of options.marks ?? []) {
    const x = sx(m.x);
    if (m.y === undefined) {
      root.append(
        svg("line", { class: "mark-line", x1: x, x2: x, y1: M.top, y2: height - M.bottom, "data-mark": m.id }),
        // Labelled at the bottom, clear of the lines near the top.
        svg("text", { class: "mark-label", ...(x > width - 120 ? { x: x - 4, "text-anchor": "end" } : { x: x + 4 }), y: height - M.bottom - 8 }, m.label),
      );
    } else {
      const y = sy(m.y);
      root.append(
        svg("circle", { class: "mark", cx: x, cy: y, r: 7, "data-mark": m.id }),
        svg("text", { class: "mark-label", x, y: y - 14, "text-anchor": x > width - 120 ? "end" : "middle" }, m.label),
      );
    }
  }
  const legend = h(
    "ul",
    { class: "legend" },
    series.map((s, i) => h("li", {}, h("span", { class: `swatch series-${i}`, "aria-hidden": "true" }), `${s.name} (${s.points.length} point${s.points.length === 1 ? "" : "s"})`)),
  );
  return h("figure", { class: "chart-figure" }, root, h("figcaption", {}, options.title), legend);
}
