// The reference side of the tokenizer parity test (tokenizer_parity_test.cc): transformers.js's
// tokenizers as packaged by @lenml/tokenizers, loaded from a tokenizer.json and its
// tokenizer_config.json exactly as a user of the package would.
//
//   node tokenizer_reference.mjs TOKENIZER_JSON TOKENIZER_CONFIG_JSON REQUEST_JSON OUTPUT_JSON
//
// REQUEST_JSON: {"encode": [text, ...], "decode": [[id, ...], ...]}
// OUTPUT_JSON:  {"encode": [[id, ...], ...],          ids without special tokens
//                "encode_special": [[id, ...], ...],  ids with add_special_tokens
//                "roundtrip": [text | null, ...],     decode(encode(text)); null for no ids
//                "decode": [text | null, ...]}        decode(ids); null for an empty list
// Decoding uses {clean_up_tokenization_spaces: false}: the tokenizer.json decoder alone, which is
// what Tokenizer::Decode implements.
import fs from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

const [jsonPath, configPath, requestPath, outputPath] = process.argv.slice(2);
if (!outputPath) {
  console.error("usage: node tokenizer_reference.mjs TOKENIZER_JSON CONFIG_JSON REQUEST OUTPUT");
  process.exit(2);
}
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(jsonPath, "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(configPath, "utf8")),
});
const request = JSON.parse(fs.readFileSync(requestPath, "utf8"));
const decodeOptions = { clean_up_tokenization_spaces: false };
const decode = (ids) => (ids.length === 0 ? null : tokenizer.decode(ids, decodeOptions));

const output = { encode: [], encode_special: [], roundtrip: [], decode: [] };
for (const text of request.encode) {
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  output.encode.push(ids);
  output.encode_special.push(tokenizer.encode(text, { add_special_tokens: true }));
  output.roundtrip.push(decode(ids));
}
for (const ids of request.decode) output.decode.push(decode(ids));
fs.writeFileSync(outputPath, JSON.stringify(output));
