// Reference renderer for the chat-template parity test (parity_test.cc): renders each job with
// @huggingface/jinja, the JavaScript Jinja implementation Hugging Face uses for chat templates
// (transformers.js), configured by its Template class as transformers configures Jinja
// (trim_blocks, lstrip_blocks).
//
// stdin:  {"jobs": [{"id": "...", "template": "...", "context": {...}}, ...], "now_ms": 1741530600000}
// stdout: {"results": [{"id": "...", "ok": true, "text": "..."} | {"id": "...", "ok": false, "error": "..."}]}
//
// strftime_now() reads the clock through `new Date()`; it is pinned to now_ms so that both
// renderers see the same time (run with TZ=UTC, as the C++ side formats in UTC).
import { Template } from "@huggingface/jinja";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));

const RealDate = Date;
const pinned = input.now_ms;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(pinned);
    else super(...args);
  }
  static now() {
    return pinned;
  }
};

const results = [];
for (const job of input.jobs) {
  try {
    const text = new Template(job.template).render(job.context);
    results.push({ id: job.id, ok: true, text });
  } catch (e) {
    results.push({ id: job.id, ok: false, error: String(e && e.message ? e.message : e) });
  }
}
process.stdout.write(JSON.stringify({ results }));
