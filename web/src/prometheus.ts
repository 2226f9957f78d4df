// The server's /metrics (Prometheus text format 0.0.4) as far as the panel reads it: the value of
// one metric for one app (the gateway's sovai_gateway_* families carry app="<id>").
// /metrics is on the API port (same origin) and needs no token.

/** Every sample of `metric` whose labels include all of `labels`, summed; null when none. */
export function metricValue(text: string, metric: string, labels: Record<string, string>): number | null {
  let total: number | null = null;
  for (const line of text.split("\n")) {
    if (!line.startsWith(metric)) continue;
    const rest = line.slice(metric.length);
    if (rest[0] !== "{" && rest[0] !== " ") continue; // another metric with this prefix
    let labelText = "";
    let valueText = rest.trim();
    if (rest[0] === "{") {
      const close = rest.indexOf("}");
      if (close < 0) continue;
      labelText = rest.slice(1, close);
      valueText = rest.slice(close + 1).trim();
    }
    const found = parseLabels(labelText);
    if (!Object.entries(labels).every(([k, v]) => found[k] === v)) continue;
    const value = Number(valueText.split(" ")[0]);
    if (!isFinite(value)) continue;
    total = (total ?? 0) + value;
  }
  return total;
}

function parseLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  const re = /(\w+)="((?:[^"\\]|\\.)*)"/g;
  for (let m = re.exec(text); m; m = re.exec(text)) out[m[1]] = m[2].replace(/\\(.)/g, "$1");
  return out;
}

/** The server's metrics text. */
export async function readMetrics(signal?: AbortSignal): Promise<string> {
  const response = await fetch("/metrics", { signal, cache: "no-store" });
  if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
  return response.text();
}
