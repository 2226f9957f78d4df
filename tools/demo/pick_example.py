#!/usr/bin/env python3
"""Picks the examples tools/demo.sh shows from `sovai-engine eval --output` rows (JSONL: request,
reference, prediction, exact_match, ...), so that the score reads as answers.

  pick_example.py right EVAL_JSONL   the first row scored right (the first row if none is), as JSON
  pick_example.py wrong EVAL_JSONL   the first row scored wrong, as text: the request, the answer,
                                     the reference and the words where they differ
"""
import json
import sys


def differences(prediction, reference):
    """The words that differ, position by position (a shorter answer's missing words too)."""
    got, want = prediction.split(" "), reference.split(" ")
    out = []
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else "(nothing)"
        w = want[i] if i < len(want) else "(nothing)"
        if g != w:
            out.append("%s where the reference has %s" % (g, w))
    return out


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("right", "wrong"):
        sys.exit(__doc__.strip())
    with open(sys.argv[2]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        sys.exit("pick_example: %s has no rows" % sys.argv[2])
    right = [r for r in rows if r["exact_match"]]
    wrong = [r for r in rows if not r["exact_match"]]
    if sys.argv[1] == "right":
        print(json.dumps((right or rows)[0]))
        return
    if not wrong:
        print("The evaluation scored every test request right (%d of %d)." % (len(rows), len(rows)))
        return
    row = wrong[0]
    print("A test request the evaluation scored wrong (%d of %d are), as the evaluation "
          "answered it:" % (len(wrong), len(rows)))
    print("asked:     " + row["request"])
    print("answered:  " + row["prediction"])
    print("expected:  " + row["reference"])
    diff = differences(row["prediction"], row["reference"])
    # More than a few differing words: the answer's words shifted (a slot left out or added).
    for line in diff[:3]:
        print("wrong:     " + line)
    if len(diff) > 3:
        print("wrong:     ... %d more words" % (len(diff) - 3))


if __name__ == "__main__":
    main()
