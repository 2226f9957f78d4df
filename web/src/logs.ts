// Job logs (docs/formats/job-log.md): one record per line, "<RFC 3339 time> <source>[+] <text>",
// where source is stdout, stderr or sovai and '+' means the next record of that source continues
// the line. GET /v1/jobs/{id}/logs?follow=true streams records as the job writes them and ends
// when the job has ended and its log is read.
import { send } from "./api";

export interface LogLine {
  time: Date | null;
  source: string;
  text: string;
}

/** Parses one record (without its '\n'); a malformed one is kept whole as text. */
export function parseRecord(record: string): LogLine & { continued: boolean } {
  const m = /^(\S+) (stdout|stderr|sovai)(\+?) ?(.*)$/s.exec(record);
  if (!m) return { time: null, source: "stdout", text: record, continued: false };
  const time = new Date(m[1]);
  return { time: isNaN(time.getTime()) ? null : time, source: m[2], continued: m[3] === "+", text: m[4] };
}

/** Joins continued records into whole lines, per source. */
export class LineAssembler {
  private pending = new Map<string, LogLine>();

  push(record: string): LogLine | null {
    const r = parseRecord(record);
    const before = this.pending.get(r.source);
    const line: LogLine = before ? { ...before, text: before.text + r.text } : { time: r.time, source: r.source, text: r.text };
    if (r.continued) {
      this.pending.set(r.source, line);
      return null;
    }
    this.pending.delete(r.source);
    return line;
  }
}

/** Reads the log from byte `offset`, following it while the job runs; calls `onRecord` with each
 * whole record and the offset after it. Resolves with the offset where it stopped (the stream ended
 * or `signal` aborted). Errors: the API's (ApiError) or the network's. */
export async function followLog(
  jobId: string,
  offset: number,
  onRecord: (record: string, nextOffset: number) => void,
  signal: AbortSignal,
): Promise<number> {
  const response = await send("GET", `/v1/jobs/${encodeURIComponent(jobId)}/logs?follow=true&offset=${offset}`, undefined, { signal });
  if (!response.body) return offset;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let pending = new Uint8Array(0);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const bytes = pending.length ? concat(pending, value) : value;
      let start = 0;
      for (let i = bytes.indexOf(10); i !== -1; i = bytes.indexOf(10, start)) {
        const record = decoder.decode(bytes.subarray(start, i));
        offset += i - start + 1;
        start = i + 1;
        onRecord(record, offset);
      }
      pending = bytes.slice(start);
    }
  } catch (error) {
    if (signal.aborted) return offset;
    throw error;
  }
  return offset;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** The whole log as text (for "Download log"), page by page. */
export async function readWholeLog(jobId: string, signal?: AbortSignal): Promise<string> {
  const parts: string[] = [];
  let offset = 0;
  for (;;) {
    const response = await send("GET", `/v1/jobs/${encodeURIComponent(jobId)}/logs?offset=${offset}`, undefined, { signal });
    const text = await response.text();
    const next = Number(response.headers.get("X-Sovai-Log-Offset") ?? NaN);
    parts.push(text);
    if (!text || !isFinite(next) || next <= offset) break;
    offset = next;
  }
  return parts.join("");
}
