// Formatting for tables and facts.

import type { LiveSync } from "./types";

export function bytes(n: number): string {
  if (!isFinite(n)) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

export function dateTime(date: Date): string {
  return date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

/** The same instant in fewer characters ("12/1/26, 20:42:20"), for table cells. */
export function shortDateTime(date: Date): string {
  return date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium", hourCycle: "h23" });
}

export function fromMicros(us: number): Date {
  return new Date(us / 1000);
}

/** "45 s", "3 min 20 s", "2 h 5 min", "3 d 4 h". */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** "just now", "5 min ago", or the date. */
export function ago(date: Date, now = Date.now()): string {
  const s = (now - date.getTime()) / 1000;
  if (s < 10) return "just now";
  if (s < 3600 * 24) return `${duration(s).split(" ").slice(0, 2).join(" ")} ago`;
  return date.toLocaleDateString();
}

/** An API amount ("%d.%06d": "50.000000", "0.007000") as "50.00", "0.007": the zeros past the
 * cents say nothing, and six decimals everywhere hide which digits do. */
export function amount(text: string): string {
  const m = /^(-?\d+)\.(\d*?)0*$/.exec(text);
  return m ? `${m[1]}.${m[2].padEnd(2, "0")}` : text;
}

/** An API amount in euros: "€50.00", "€0.007". */
export function eur(text: string): string {
  return `€${amount(text)}`;
}

// A live sync as one line: "2 files (48.0 MiB) pending, oldest 12 s; last round 3 s ago; 7 files,
// 1.2 GiB, 2 units up" (the CLI's "Live sync" row).
export function liveSync(sync: LiveSync): string {
  let text = `${sync.pending_files} files (${bytes(sync.pending_bytes)}) pending`;
  if (typeof sync.oldest_pending_age_s === "number") text += `, oldest ${Math.floor(sync.oldest_pending_age_s)} s`;
  if (typeof sync.last_sync_age_s === "number") text += `; last round ${Math.floor(sync.last_sync_age_s)} s ago`;
  text += `; ${sync.uploaded_files} files, ${bytes(sync.uploaded_bytes)}, ${sync.units} units up`;
  if (sync.last_error) text += `; last error: ${sync.last_error}`;
  return text;
}
