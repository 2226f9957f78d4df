// Training metrics: sovai-engine train (and any job that likes) appends JSON lines to
// <output>/metrics.jsonl: {"step": 10, "loss": 2.1, ...} and {"step": 10, "eval_loss": 2.3}.
import type { Series } from "./components/linechart";

export interface Metrics {
  loss: [number, number][];
  evalLoss: [number, number][];
  rows: number;
}

export function parseMetrics(text: string): Metrics {
  const out: Metrics = { loss: [], evalLoss: [], rows: 0 };
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    let row: Record<string, unknown>;
    try {
      row = JSON.parse(line) as Record<string, unknown>;
    } catch {
      continue; // a line being written, or not ours
    }
    const step = row.step;
    if (typeof step !== "number") continue;
    out.rows += 1;
    if (typeof row.loss === "number") out.loss.push([step, row.loss]);
    if (typeof row.eval_loss === "number") out.evalLoss.push([step, row.eval_loss]);
  }
  return out;
}

export function lossSeries(m: Metrics): Series[] {
  return [
    { name: "training loss", points: m.loss },
    { name: "validation loss", points: m.evalLoss },
  ];
}

/** Where a job's metrics.jsonl would be: <prefix>/metrics.jsonl of each rw/rwd volume
 * ("bucket@REGION/prefix:/mount:rw"). */
export function metricsLocations(volumes: string[] | undefined): { bucket: string; key: string; volume: string }[] {
  const out: { bucket: string; key: string; volume: string }[] = [];
  for (const volume of volumes ?? []) {
    const parts = volume.split(":");
    if (parts.length < 2 || !parts.slice(2).some((p) => p === "rw" || p === "rwd")) continue;
    const source = parts[0];
    const at = source.indexOf("@");
    if (at < 0) continue;
    const bucket = source.slice(0, at);
    const slash = source.indexOf("/", at);
    const prefix = slash < 0 ? "" : source.slice(slash + 1).replace(/\/+$/, "");
    out.push({ bucket, key: prefix ? `${prefix}/metrics.jsonl` : "metrics.jsonl", volume });
  }
  return out;
}
