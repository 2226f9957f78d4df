// The reference side of bench/tokenizer: the same corpus encoded by transformers.js
// (@lenml/tokenizers), one encode() call per document, several rounds.
//
//   node tokenizer_bench.mjs TOKENIZER_JSON TOKENIZER_CONFIG_JSON CORPUS ROUNDS
//
// Prints the same fields as tokenizer_bench.cc. The reference keeps a BPE cache across calls
// (ours lives for one call), so later rounds favour it; both are reported per round.
import fs from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

const [jsonPath, configPath, corpusPath, roundsText] = process.argv.slice(2);
const start = performance.now();
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(jsonPath, "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(configPath, "utf8")),
});
const loadMs = performance.now() - start;
const corpus = fs.readFileSync(corpusPath);
const docs = corpus.toString("utf8").split("\n\x1e\n");
const rounds = Math.max(1, parseInt(roundsText, 10));
const rates = [];
let tokens = 0;
for (let r = 0; r < rounds; ++r) {
  let roundTokens = 0;
  const t0 = performance.now();
  for (const doc of docs) roundTokens += tokenizer.encode(doc, { add_special_tokens: false }).length;
  const s = (performance.now() - t0) / 1000;
  rates.push(corpus.length / 1e6 / s);
  tokens = roundTokens;
}
const sorted = [...rates].sort((a, b) => a - b);
console.log(
  `load_ms=${loadMs.toFixed(0)} tokens=${tokens} mb_per_s=${rates.map((x) => x.toFixed(6)).join(",")} ` +
    `median_mb_per_s=${sorted[Math.floor(sorted.length / 2)].toFixed(3)}`,
);
