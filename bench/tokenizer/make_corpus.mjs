// Builds the benchmark corpus from the parity corpus (tests/model/tokenizer_corpus): documents of
// a few KB made of its lines, with words shuffled and numbers redrawn by a seeded PRNG, so that
// the text is mostly new to both encoders' caches yet keeps the corpus's mix of languages, code,
// numbers, emoji and whitespace. Documents are separated by "\n\x1e\n".
//
//   node make_corpus.mjs CORPUS_DIR OUTPUT MEGABYTES
import fs from "node:fs";
import path from "node:path";

const [dir, output, megabytesText] = process.argv.slice(2);
const targetBytes = Math.round(parseFloat(megabytesText) * 1e6);
const lines = [];
for (const name of fs.readdirSync(dir).sort()) {
  for (const line of fs.readFileSync(path.join(dir, name), "utf8").split("\n")) {
    if (line.length > 0) lines.push(line);
  }
}
let state = 0x9e3779b9;
const rand = (n) => {
  state ^= state << 13;
  state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5;
  state >>>= 0;
  return state % n;
};
const docs = [];
let bytes = 0;
while (bytes < targetBytes) {
  const out = [];
  const count = 20 + rand(60);
  for (let i = 0; i < count; ++i) {
    let words = lines[rand(lines.length)].split(" ");
    if (rand(2) === 0) words = words.map((w, k) => words[(k + rand(3)) % words.length]);
    out.push(words.map((w) => w.replace(/[0-9]+/g, () => String(rand(1e6)))).join(" "));
  }
  const doc = out.join("\n");
  docs.push(doc);
  bytes += Buffer.byteLength(doc) + 3;
}
fs.writeFileSync(output, docs.join("\n\x1e\n"));
