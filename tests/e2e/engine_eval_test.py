"""`sovai-engine eval` end to end: exact match scored right on a tiny model made on the spot.

* A LoRA adapter trained on conversations whose answer is always the same answers every held-out
  question right; the base model answers none of them right.
* Scoring is exact: references set to what the model itself answers score N/N, and changing one
  of them (or only its surrounding whitespace) scores N-1/N (respectively N/N).
* Bad data and bad flags are refused with exit 1 (naming file and line) and 2.
"""
import json
import os
import re
import tempfile
import unittest

from tiny_model import WORDS, make_tiny_model, write_chat_data
from tiny_model import engine as run_engine

ENGINE = os.environ.get("SOVAI_ENGINE", "")
ANSWER = "sure, done"  # the answer of every conversation of write_chat_data


def engine(*args, check=True):
    return run_engine(ENGINE, *args, check=check)


def score(stdout):
    match = re.search(r"^exact match (\d+)/(\d+) = (\d+\.\d)%$", stdout, re.M)
    if match is None:
        raise AssertionError("no 'exact match' line in:\n" + stdout)
    return int(match.group(1)), int(match.group(2))


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


class EngineEvalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not ENGINE:
            raise unittest.SkipTest("SOVAI_ENGINE is not set")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        _, pretrained, _ = make_tiny_model(ENGINE, cls.dir)
        cls.model = os.path.join(pretrained, "model")
        train = os.path.join(cls.dir, "train.jsonl")
        write_chat_data(train)
        cls.lora = os.path.join(cls.dir, "lora")
        engine("train", "--model", cls.model, "--data", train, "--output", cls.lora,
               "--method", "lora", "--rank", "8", "--alpha", "16", "--max-steps", "80",
               "--seq-len", "64", "--batch-rows", "4", "--learning-rate", "1e-2",
               "--eval-fraction", "0", "--log-interval", "40")
        # Held-out questions: word pairs the training data never asked about.
        cls.test = os.path.join(cls.dir, "test.jsonl")
        write_jsonl(cls.test, [{"messages": [
            {"role": "user", "content": "Repeat: %s %s" % (WORDS[i % len(WORDS)],
                                                          WORDS[(i * 3 + 2) % len(WORDS)])},
            {"role": "assistant", "content": ANSWER}]} for i in range(12)])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_adapter_answers_right_and_the_base_does_not(self):
        results = os.path.join(self.dir, "adapter-results.jsonl")
        out = engine("eval", "--model", self.model, "--lora", os.path.join(self.lora, "adapter"),
                     "--data", self.test, "--max-tokens", "16", "--threads", "2",
                     "--output", results)
        correct, total = score(out.stdout)
        self.assertEqual(total, 12)
        # Observed 12/12 (40 steps gave 7/12, 60 steps 12/12): a margin for other BLAS builds.
        self.assertGreaterEqual(correct, 10, out.stdout)
        self.assertIn("exact match %d/12 = %.1f%%" % (correct, 100 * correct / 12), out.stdout)
        rows = read_jsonl(results)
        self.assertEqual(len(rows), 12)
        self.assertEqual([r["line"] for r in rows], list(range(1, 13)))
        self.assertEqual(sum(r["exact_match"] for r in rows), correct)
        for row in rows:
            self.assertEqual(row["reference"], ANSWER)
            self.assertEqual(row["exact_match"], row["prediction"] == ANSWER, row)
            self.assertTrue(row["request"].startswith("Repeat: "))
            self.assertGreater(row["prompt_tokens"], 0)
            if row["exact_match"]:
                # The end of the assistant's turn (<|eot_id|>) ended the answer: the model would
                # go on past it (this tokenizer's EOS is <|end_of_text|>) up to --max-tokens.
                self.assertEqual(row["finish_reason"], "stop")

        out = engine("eval", "--model", self.model, "--data", self.test, "--max-tokens", "16",
                     "--threads", "2")
        self.assertEqual(score(out.stdout), (0, 12), out.stdout)

    def test_scores_are_exact(self):
        # The base model's own greedy answers as references: every one matches...
        first = os.path.join(self.dir, "base-results.jsonl")
        engine("eval", "--model", self.model, "--data", self.test, "--max-tokens", "12",
               "--dtype", "f32", "--output", first)
        predictions = [r["prediction"] for r in read_jsonl(first)]
        self.assertEqual(len(predictions), 12)
        rows = []
        for i, prediction in enumerate(predictions):
            question = "Repeat: %s %s" % (WORDS[i % len(WORDS)], WORDS[(i * 3 + 2) % len(WORDS)])
            # ...whitespace around a reference does not count (the chat template trims)...
            reference = " %s\n" % prediction if i == 3 else prediction
            rows.append({"messages": [{"role": "user", "content": question},
                                      {"role": "assistant", "content": reference}]})
        # ...and one changed reference is one miss.
        rows[7]["messages"][1]["content"] += " and more"
        own = os.path.join(self.dir, "own.jsonl")
        write_jsonl(own, rows)
        results = os.path.join(self.dir, "own-results.jsonl")
        out = engine("eval", "--model", self.model, "--data", own, "--max-tokens", "12",
                     "--dtype", "f32", "--output", results)
        self.assertEqual(score(out.stdout), (11, 12), out.stdout)
        self.assertEqual([r["exact_match"] for r in read_jsonl(results)],
                         [i != 7 for i in range(12)])

    def test_prompt_completion_data(self):
        data = os.path.join(self.dir, "completion.jsonl")
        write_jsonl(data, [{"prompt": "the quick brown", "completion": " fox"},
                           {"prompt": "seven sovereign", "completion": " clouds"}])
        out = engine("eval", "--model", self.model, "--data", data, "--max-tokens", "4")
        self.assertEqual(score(out.stdout)[1], 2, out.stdout)

    def test_bad_data_and_flags(self):
        bad = os.path.join(self.dir, "bad.jsonl")
        with open(bad, "w") as f:
            f.write(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "yo"}]}) + "\n\n")
            f.write(json.dumps({"messages": [{"role": "user", "content": "no answer"}]}) + "\n")
        result = engine("eval", "--model", self.model, "--data", bad, check=False)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("bad.jsonl:3:", result.stderr)
        self.assertEqual(result.stdout, "")

        with open(bad, "w") as f:
            f.write("{not json\n")
        result = engine("eval", "--model", self.model, "--data", bad, check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("bad.jsonl:1:", result.stderr)

        with open(bad, "w") as f:
            f.write(json.dumps({"messages": [{"role": "assistant", "content": "first"},
                                             {"role": "user", "content": "last"}]}) + "\n")
        result = engine("eval", "--model", self.model, "--data", bad, check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("assistant's reference", result.stderr)

        empty = os.path.join(self.dir, "empty.jsonl")
        open(empty, "w").close()
        result = engine("eval", "--model", self.model, "--data", empty, check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("no examples", result.stderr)

        result = engine("eval", "--model", self.model, "--data",
                        os.path.join(self.dir, "missing.jsonl"), check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("missing.jsonl", result.stderr)

        result = engine("eval", "--model", self.model, "--data", self.test, "--lora",
                        os.path.join(self.dir, "no-adapter"), check=False)
        self.assertEqual(result.returncode, 1)

        result = engine("eval", "--model", self.model, check=False)
        self.assertEqual(result.returncode, 2)
        self.assertIn("--data is required", result.stderr)
        result = engine("eval", "--data", self.test, check=False)
        self.assertEqual(result.returncode, 2)
        result = engine("eval", "--model", self.model, "--data", self.test, "--max-tokens", "0",
                        check=False)
        self.assertEqual(result.returncode, 2)
        result = engine("eval", "--model", self.model, "--data", self.test, "--dtype", "f64",
                        check=False)
        self.assertEqual(result.returncode, 2)
        result = engine("eval", "--help")
        self.assertIn("--lora", result.stdout)


if __name__ == "__main__":
    unittest.main()
