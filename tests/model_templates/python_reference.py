"""Second reference renderer for the chat-template parity test (parity_test.cc): Python's Jinja2
set up as transformers' apply_chat_template sets it up (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loop controls, the generation tag, raise_exception, strftime_now and
a json.dumps-based tojson). Same protocol as render_reference.mjs:

stdin:  {"jobs": [{"id", "template", "context"}, ...], "now_ms": ...}
stdout: {"results": [{"id", "ok": true, "text", "generation": [[begin, end], ...]} |
                     {"id", "ok": false, "error"}]}

Generation spans are in UTF-8 bytes, as the C++ side reports them. Exits 3 when jinja2 is not
installed, so the caller can skip this reference.
"""

import datetime
import json
import sys

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(3)


class GenerationTracker(Extension):
    """{% generation %}...{% endgeneration %} as in transformers: renders the body and records
    where it lands in the output."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_generation", [])
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        # A marker pair the caller replaces by offsets after rendering.
        return "\x00GEN_BEGIN\x00" + caller() + "\x00GEN_END\x00"


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[GenerationTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def strip_markers(text):
    spans = []
    out = b""
    rest = text.encode("utf-8")
    begin_marker = "\x00GEN_BEGIN\x00".encode()
    end_marker = "\x00GEN_END\x00".encode()
    while True:
        b = rest.find(begin_marker)
        if b < 0:
            return (out + rest).decode("utf-8"), spans
        out += rest[:b]
        rest = rest[b + len(begin_marker):]
        e = rest.find(end_marker)
        start = len(out)
        out += rest[:e]
        spans.append([start, len(out)])
        rest = rest[e + len(end_marker):]


def main():
    request = json.load(sys.stdin)
    now = datetime.datetime.fromtimestamp(request["now_ms"] / 1000, tz=datetime.timezone.utc)
    env = make_environment(now)
    results = []
    for job in request["jobs"]:
        try:
            text = env.from_string(job["template"]).render(**job["context"])
            text, spans = strip_markers(text)
            results.append({"id": job["id"], "ok": True, "text": text, "generation": spans})
        except Exception as e:  # every template failure is a result, not a crash
            results.append({"id": job["id"], "ok": False, "error": str(e)})
    json.dump({"results": results}, sys.stdout, ensure_ascii=False)


main()
