// The official `openai` npm client (pinned by package-lock.json) against apps and the endpoints
// catalog of `sovai server`.
// Usage: node apps_openai_client.mjs SCENARIO JSON_ARGS
// Prints "ok <check>" for every check that passed and exits non-zero (with the failure) on the
// first that fails; apps_test.py runs each scenario and asserts the checks it expects. The `load`
// scenario prints one JSON line with its counts instead.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [scenario, argsJson] = process.argv.slice(2);
const args = JSON.parse(argsJson);

function ok(name) {
  console.log("ok " + name);
}

function client(apiKey, baseURL = args.base_url) {
  return new OpenAI({ baseURL, apiKey: apiKey ?? "none", maxRetries: 0, timeout: 120_000 });
}

const QUESTION = [{ role: "user", content: "Which bucket holds the training data?" }];

async function expectApiError(promise, status, check) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, "expected an APIError, got " + err);
    assert.equal(err.status, status, err.message);
    if (check) check(err);
    return err;
  }
  assert.fail("expected HTTP " + status);
}

async function chat(c, model, extra = {}) {
  return c.chat.completions.create({
    model,
    messages: QUESTION,
    max_tokens: 12,
    temperature: 0,
    ...extra,
  });
}

// Streams one answer; returns {text, chunks, usage}.
async function streamChat(c, model, extra = {}) {
  const stream = await c.chat.completions.create({
    model,
    messages: QUESTION,
    max_tokens: 12,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    ...extra,
  });
  let text = "";
  let chunks = 0;
  let usage = null;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) text += choice.delta?.content ?? "";
  }
  return { text, chunks, usage };
}

const scenarios = {
  // An app behind the gateway: args {base_url, model, token, wrong_label_token, other_token}.
  async app() {
    const c = client(args.token);
    const answer = await chat(c, args.model);
    assert.equal(answer.object, "chat.completion");
    assert.equal(answer.choices[0].finish_reason.length > 0, true);
    assert.ok(answer.usage.completion_tokens > 0);
    ok("chat through the gateway");
    const streamed = await streamChat(c, args.model);
    assert.ok(streamed.chunks >= 2, "chunks " + streamed.chunks);
    assert.equal(streamed.text, answer.choices[0].message.content);
    assert.equal(streamed.usage.completion_tokens, answer.usage.completion_tokens);
    ok("streaming passes through token by token");
    const models = await c.models.list();
    assert.ok(models.data.some((m) => m.id === args.model));
    ok("models of the app");
    await expectApiError(chat(client(null), args.model), 401, (e) => {
      assert.equal(e.code, "invalid_api_key");
    });
    ok("401 without a token");
    await expectApiError(chat(client(args.wrong_label_token), args.model), 403, (e) => {
      assert.equal(e.code, "label_selector_mismatch");
    });
    ok("403 for a token whose selector the app does not match");
    await expectApiError(chat(client(args.other_token), args.model), 404);
    ok("404 for a token of another project");
    await expectApiError(chat(c, "no-such-model"), 404, (e) => {
      assert.equal(e.code, "model_not_found");
    });
    ok("404 for an unknown model");
    const first = await chat(c, args.model, { seed: 7 });
    const again = await c.chat.completions
      .create({ model: args.model, messages: QUESTION, max_tokens: 12, temperature: 0, seed: 7 })
      .withResponse();
    assert.equal(again.response.headers.get("x-sovai-cache"), "hit");
    assert.deepEqual(again.data.choices, first.choices);
    ok("the gateway's response cache answers a repeated deterministic request");
    // Cache-Control (docs/api/openai.md), the same request again: no-store is answered afresh
    // (a new id) and stored nowhere; no-cache is answered afresh and stored, so the next plain
    // request is that answer.
    const cached = (headers) =>
      c.chat.completions
        .create(
          { model: args.model, messages: QUESTION, max_tokens: 12, temperature: 0, seed: 7 },
          { headers },
        )
        .withResponse();
    for (let i = 0; i < 2; i++) {
      const optOut = await cached({ "Cache-Control": "no-store" });
      assert.equal(optOut.response.headers.get("x-sovai-cache"), "bypass");
      assert.notEqual(optOut.data.id, first.id);
    }
    const stillFirst = await cached({});
    assert.equal(stillFirst.response.headers.get("x-sovai-cache"), "hit");
    assert.equal(stillFirst.data.id, first.id);
    ok("no-store neither reads nor writes the gateway's cache");
    const fresh = await cached({ "Cache-Control": "no-cache" });
    assert.equal(fresh.response.headers.get("x-sovai-cache"), "miss");
    assert.notEqual(fresh.data.id, first.id);
    const after = await cached({});
    assert.equal(after.response.headers.get("x-sovai-cache"), "hit");
    assert.equal(after.data.id, fresh.data.id);
    ok("no-cache refreshes the gateway's cached answer");
  },

  // The catalog: args {base_url (…/v1 of the API port), model, token, limit}.
  async catalog() {
    const c = client(args.token);
    const models = await c.models.list();
    assert.ok(models.data.some((m) => m.id === args.model), JSON.stringify(models.data));
    ok("the catalog lists the endpoint");
    const answer = await chat(c, args.model);
    assert.ok(answer.choices[0].message.content.length > 0);
    ok("chat through the catalog");
    const streamed = await streamChat(c, args.model);
    assert.equal(streamed.text, answer.choices[0].message.content);
    ok("streaming through the catalog");
    await expectApiError(chat(c, "not-published"), 404, (e) => {
      assert.equal(e.code, "model_not_found");
    });
    ok("404 for a model the catalog does not have");
    await expectApiError(chat(client(null), args.model), 401);
    ok("401 without an API key");
    // Refused before the model is known, so not counted by the limit below.
    const truncated = await fetch(args.base_url + "/chat/completions", {
      method: "POST",
      headers: { authorization: "Bearer " + args.token, "content-type": "application/json" },
      body: '{"model": "' + args.model + '", "messages": [',
    });
    assert.equal(truncated.status, 400);
    const parseError = (await truncated.json()).error;
    assert.equal(parseError.type, "invalid_request_error");
    assert.match(parseError.message, /^The request body is not valid JSON: invalid JSON at byte \d+: /);
    ok("truncated JSON is an OpenAI 400 saying where");
    const huge = [{ role: "user", content: "x".repeat(16 << 20) }];
    await expectApiError(chat(c, args.model, { messages: huge }), 413, (e) => {
      assert.equal(e.type, "invalid_request_error");
      assert.equal(e.code, "request_too_large");
      assert.match(e.message, /exceeds the limit of 16777216 bytes/);
    });
    ok("a body over 16 MiB is an OpenAI 413");
    // The limit counts every request of the project on this model, the three above included.
    let limited = null;
    for (let i = 0; i < args.limit + 1 && !limited; i++) {
      try {
        await chat(c, args.model, { max_tokens: 1 });
      } catch (err) {
        limited = err;
      }
    }
    assert.ok(limited, "no 429 within the limit + 1 requests");
    assert.equal(limited.status, 429, limited.message);
    const headers = limited.headers;
    const retryAfter =
      typeof headers?.get === "function" ? headers.get("retry-after") : headers?.["retry-after"];
    assert.ok(Number(retryAfter) >= 1, "Retry-After " + retryAfter);
    ok("429 with Retry-After over the per-project limit");
  },

  // A bounded load: args {base_url, model, token, concurrency, duration_ms, max_tokens, stream}.
  // Prints {"requests", "failed_before_first_byte", "failed_after_first_byte", "errors"}.
  async load() {
    const c = client(args.token);
    const deadline = Date.now() + args.duration_ms;
    const counts = { requests: 0, failed_before_first_byte: 0, failed_after_first_byte: 0 };
    const errors = [];
    async function worker() {
      while (Date.now() < deadline) {
        counts.requests += 1;
        let started = false;
        try {
          if (args.stream) {
            const stream = await c.chat.completions.create({
              model: args.model,
              messages: QUESTION,
              max_tokens: args.max_tokens,
              temperature: 0.8,
              stream: true,
            });
            for await (const chunk of stream) {
              started = true;
              void chunk;
            }
          } else {
            const answer = await chat(c, args.model, {
              max_tokens: args.max_tokens,
              temperature: 0.8,
            });
            assert.ok(answer.choices.length === 1);
          }
        } catch (err) {
          if (started) {
            counts.failed_after_first_byte += 1;
          } else {
            counts.failed_before_first_byte += 1;
          }
          if (errors.length < 5) errors.push(String(err.status ?? "") + " " + err.message);
        }
      }
    }
    await Promise.all(Array.from({ length: args.concurrency }, worker));
    console.log(JSON.stringify({ ...counts, errors }));
  },

  // One request that may have to wait for a replica (scale from zero).
  async one() {
    const answer = await chat(client(args.token), args.model);
    assert.ok(answer.choices[0].message.content !== undefined);
    ok("answered");
  },
};

try {
  await scenarios[scenario]();
} catch (err) {
  console.error(err.stack ?? String(err));
  process.exit(1);
}
