#!/usr/bin/env python3
"""Verifies an exported audit log offline (docs/audit.md, "Export to a bucket").

    sovai bucket cp -r s3://BUCKET/audit/ DIR
    python3 tools/audit_verify_export.py DIR

Walks the files in name order from the genesis hash, recomputing each entry's SHA-256 over the
previous hash and the entry's canonical bytes; each file's name must give its first and last
sequence numbers. Prints `ok: N entries, last hash H` and exits 0, or names the first broken
entry and file and exits 1. Python's standard library only, so an auditor can run it anywhere.
"""
import base64
import glob
import hashlib
import json
import os
import sys

FIELDS = ("seq", "at_us", "actor_user", "actor_token", "project", "action", "resource",
          "source", "result", "detail")
GENESIS = "0" * 64


def field_bytes(entry, name):
    """The bytes the hash covers for one field (base64 when they were not valid UTF-8)."""
    if name + "_base64" in entry:
        return base64.b64decode(entry[name + "_base64"])
    return str(entry[name]).encode()


def entry_hash(prev_hash, entry):
    canonical = b"".join(b"%d:%s" % (len(v), v) for v in (field_bytes(entry, k) for k in FIELDS))
    return hashlib.sha256(bytes.fromhex(prev_hash) + canonical).hexdigest()


def verify(directory):
    """(entries, last hash); raises ValueError naming the first problem."""
    prev, expected_seq = GENESIS, 1
    paths = sorted(glob.glob(os.path.join(directory, "*.jsonl")))
    if not paths:
        raise ValueError("no .jsonl files in " + directory)
    for path in paths:
        name = os.path.basename(path)[:-len(".jsonl")]
        try:
            first, last = map(int, name.split("-"))
        except ValueError:
            raise ValueError(path + ": the name is not <first seq>-<last seq>.jsonl")
        if first != expected_seq:
            raise ValueError("%s starts at %d, expected %d: entries %d..%d are missing"
                             % (path, first, expected_seq, expected_seq, first - 1))
        with open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                try:
                    entry = json.loads(line)
                except ValueError:
                    raise ValueError("%s line %d is not JSON (truncated?)" % (path, number))
                if entry.get("seq") != expected_seq:
                    raise ValueError("%s line %d: seq %s where %d was expected (removed or reordered)"
                                     % (path, number, entry.get("seq"), expected_seq))
                if entry.get("prev_hash") != prev:
                    raise ValueError("%s line %d: entry %d does not link to the one before"
                                     % (path, number, expected_seq))
                if entry_hash(prev, entry) != entry.get("hash"):
                    raise ValueError("%s line %d: entry %d was modified" % (path, number, expected_seq))
                prev, expected_seq = entry["hash"], expected_seq + 1
        if expected_seq - 1 != last:
            raise ValueError("%s is named up to %d but ends at %d" % (path, last, expected_seq - 1))
    return expected_seq - 1, prev


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        entries, last = verify(argv[1])
    except (OSError, ValueError) as e:
        print("broken: %s" % e)
        return 1
    print("ok: %d entries, last hash %s" % (entries, last))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
