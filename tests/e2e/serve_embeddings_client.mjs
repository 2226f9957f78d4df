// The official `openai` npm client's embeddings.create against `sovai-engine serve` serving the
// shipped embedding model. Usage: node serve_embeddings_client.mjs BASE_URL MODEL
// Prints "ok <check>" for every check that passed and exits non-zero on the first that fails.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "unused", maxRetries: 0 });
const INPUTS = ["The quick brown fox.", "Sovereign clouds keep data at home.", "A third one."];

function ok(name) {
  console.log("ok " + name);
}

function norm(v) {
  return Math.sqrt(v.reduce((s, x) => s + x * x, 0));
}

// Explicit float: JSON numbers.
const floats = await client.embeddings.create({ model, input: INPUTS, encoding_format: "float" });
assert.equal(floats.object, "list");
assert.equal(floats.model, model);
assert.equal(floats.data.length, 3);
for (const [i, item] of floats.data.entries()) {
  assert.equal(item.object, "embedding");
  assert.equal(item.index, i);
  assert.equal(item.embedding.length, 256);
  assert.ok(Math.abs(norm(item.embedding) - 1) < 1e-5, "unit length");
}
assert.ok(floats.usage.prompt_tokens > 3);
assert.equal(floats.usage.total_tokens, floats.usage.prompt_tokens);
ok("float embeddings: 3 unit vectors of 256 with usage");

// Explicit base64: the client hands back the string; it decodes to the same float32 values.
const b64 = await client.embeddings.create({ model, input: INPUTS, encoding_format: "base64" });
for (const [i, item] of b64.data.entries()) {
  assert.equal(typeof item.embedding, "string");
  const bytes = Buffer.from(item.embedding, "base64");
  const values = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  assert.deepEqual(Array.from(values), floats.data[i].embedding.map(Math.fround));
}
ok("base64 embeddings decode to the float ones");

// No encoding_format: the client asks for base64 and decodes it itself.
const implicit = await client.embeddings.create({ model, input: INPUTS[0] });
assert.equal(implicit.data.length, 1);
assert.deepEqual(Array.from(implicit.data[0].embedding), floats.data[0].embedding.map(Math.fround));
ok("default request (base64 on the wire) decodes to the float embedding");

// Token ids, and dimensions.
const cut = await client.embeddings.create({
  model,
  input: INPUTS[1],
  dimensions: 32,
  encoding_format: "float",
});
assert.equal(cut.data[0].embedding.length, 32);
assert.ok(Math.abs(norm(cut.data[0].embedding) - 1) < 1e-5);
const head = floats.data[1].embedding.slice(0, 32);
const scale = norm(head);
for (let k = 0; k < 32; ++k) {
  assert.ok(Math.abs(cut.data[0].embedding[k] - head[k] / scale) < 1e-6);
}
ok("dimensions 32: the first 32 values, renormalized");
const ids = await client.embeddings.create({ model, input: [[5, 6, 7], [8]], encoding_format: "float" });
assert.equal(ids.data.length, 2);
assert.equal(ids.usage.prompt_tokens, 4);
ok("token-id inputs");

async function expectApiError(promise, status, param) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, "expected an APIError, got " + err);
    assert.equal(err.status, status, err.message);
    if (param !== undefined) assert.equal(err.param, param, err.message);
    return;
  }
  assert.fail("expected HTTP " + status);
}
await expectApiError(client.embeddings.create({ model, input: "" }), 400, "input");
await expectApiError(client.embeddings.create({ model, input: "x", dimensions: 999 }), 400,
                     "dimensions");
await expectApiError(client.embeddings.create({ model: "nope", input: "x" }), 404);
await expectApiError(
    client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }] }), 400,
    "model");
ok("errors: empty input, dimensions, unknown model, chat on an embedding model");
