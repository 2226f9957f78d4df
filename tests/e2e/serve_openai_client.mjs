// The official `openai` npm client (pinned by package-lock.json) against `sovai-engine serve`.
// Usage: node serve_openai_client.mjs BASE_URL SCENARIO MODEL [ADAPTER1 ADAPTER2]
// Prints "ok <check>" for every check that passed and exits non-zero (with the failure) on the
// first that fails; serve_openai_test.py runs each scenario and asserts the checks it expects.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, scenario, model, adapter1, adapter2] = process.argv.slice(2);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "unused", maxRetries: 0 });

function ok(name) {
  console.log("ok " + name);
}

const HELLO = [{ role: "user", content: "Tell me a short fortune about the sea." }];

async function greedyChat(modelName, messages = HELLO, extra = {}) {
  return client.chat.completions.create({
    model: modelName,
    messages,
    max_tokens: 24,
    temperature: 0,
    ...extra,
  });
}

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

// A raw POST, for bodies the client would refuse to send.
async function rawPost(path, body, headers = {}) {
  const response = await fetch(baseURL + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text };
}

const scenarios = {
  async basics() {
    const models = await client.models.list();
    const ids = models.data.map((m) => m.id);
    assert.ok(ids.includes(model), ids.join(","));
    ok("models list has the base model");
    if (adapter1) {
      const a = models.data.find((m) => m.id === adapter1);
      assert.ok(a, "adapter listed");
      assert.equal(a.parent, model);
      assert.equal(models.data.find((m) => m.id === model).parent, null);
      ok("models list has adapters with parent");
    }

    const chat = await greedyChat(model);
    assert.equal(chat.object, "chat.completion");
    assert.equal(chat.model, model);
    assert.equal(chat.choices.length, 1);
    assert.equal(chat.choices[0].message.role, "assistant");
    assert.equal(typeof chat.choices[0].message.content, "string");
    assert.ok(chat.choices[0].message.content.length > 0, "non-empty answer");
    assert.ok(["stop", "length"].includes(chat.choices[0].finish_reason));
    const u = chat.usage;
    assert.ok(u.prompt_tokens > 10, JSON.stringify(u));
    assert.ok(u.completion_tokens >= 1 && u.completion_tokens <= 24, JSON.stringify(u));
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
    assert.equal(typeof u.prompt_tokens_details.cached_tokens, "number");
    ok("chat completion with usage");

    // The same greedy request again: all of its prompt but the last token comes from the prefix
    // cache (whole blocks, then the leading slots of the block the prompt ends in).
    const again = await greedyChat(model, HELLO, { max_tokens: 23 });
    assert.equal(again.usage.prompt_tokens_details.cached_tokens, u.prompt_tokens - 1,
                 JSON.stringify(again.usage));
    assert.ok(chat.choices[0].message.content.startsWith(again.choices[0].message.content) ||
              again.choices[0].message.content.startsWith(chat.choices[0].message.content));
    ok("prefix cache reports cached_tokens");

    // Streaming reassembles to the non-streamed greedy answer.
    const stream = await client.chat.completions.create({
      model, messages: HELLO, max_tokens: 24, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let finish = null;
    let usage = null;
    let chunks = 0;
    let sawRole = false;
    for await (const chunk of stream) {
      chunks++;
      assert.equal(chunk.object, "chat.completion.chunk");
      assert.equal(chunk.id, chunk.id);
      if (chunk.usage) usage = chunk.usage;
      if (chunk.choices.length === 0) continue;
      const c = chunk.choices[0];
      if (c.delta.role) sawRole = true;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
    assert.ok(sawRole, "a role chunk");
    assert.equal(text, chat.choices[0].message.content);
    assert.equal(finish, chat.choices[0].finish_reason);
    assert.ok(chunks >= 3);
    assert.ok(usage && usage.completion_tokens === chat.usage.completion_tokens,
              JSON.stringify(usage));
    ok("streamed chat equals the non-streamed answer");

    // Completions, plain and streamed.
    const completion = await client.completions.create({
      model, prompt: "The sea is", max_tokens: 12, temperature: 0,
    });
    assert.equal(completion.object, "text_completion");
    assert.ok(completion.choices[0].text.length > 0);
    assert.ok(completion.usage.completion_tokens <= 12);
    const cstream = await client.completions.create({
      model, prompt: "The sea is", max_tokens: 12, temperature: 0, stream: true,
    });
    let ctext = "";
    for await (const chunk of cstream) ctext += chunk.choices[0]?.text ?? "";
    assert.equal(ctext, completion.choices[0].text);
    ok("completions plain and streamed");
    const echoed = await client.completions.create({
      model, prompt: "The sea is", max_tokens: 5, temperature: 0, echo: true,
    });
    assert.ok(echoed.choices[0].text.startsWith("The sea is"), echoed.choices[0].text);
    ok("completions echo");

    // Batched completions: choice p * n + i is choice i of prompt p, and each prompt gets what it
    // gets alone (greedy; seeded with n = 2), plain, echoed and streamed.
    const prompts = ["The sea is", "A ship sails", "Rain falls on"];
    const alone = [];
    for (const prompt of prompts) {
      alone.push(await client.completions.create({
        model, prompt, max_tokens: 6, temperature: 0.8, seed: 11, n: 2,
      }));
    }
    const batch = await client.completions.create({
      model, prompt: prompts, max_tokens: 6, temperature: 0.8, seed: 11, n: 2, echo: true,
    });
    assert.equal(batch.choices.length, 6);
    let promptTokens = 0;
    for (let p = 0; p < prompts.length; ++p) {
      promptTokens += alone[p].usage.prompt_tokens;
      for (let i = 0; i < 2; ++i) {
        const choice = batch.choices[p * 2 + i];
        assert.equal(choice.index, p * 2 + i);
        assert.equal(choice.text, prompts[p] + alone[p].choices[i].text, "prompt " + p);
      }
    }
    assert.equal(batch.usage.prompt_tokens, promptTokens);
    const bstream = await client.completions.create({
      model, prompt: [[5, 6, 7], [8, 9]], max_tokens: 5, temperature: 0, stream: true,
    });
    const streamed = ["", ""];
    for await (const chunk of bstream) {
      for (const c of chunk.choices) streamed[c.index] += c.text;
    }
    for (const [i, ids] of [[5, 6, 7], [8, 9]].entries()) {
      const one = await client.completions.create({ model, prompt: ids, max_tokens: 5, temperature: 0 });
      assert.equal(streamed[i], one.choices[0].text, "streamed prompt " + i);
    }
    ok("batched completions");

    // vLLM's /tokenize and /detokenize count what the generation endpoints count.
    const tokenize = async (body) => {
      const r = await rawPost("/tokenize", JSON.stringify({ model, ...body }));
      assert.equal(r.status, 200, r.text);
      return JSON.parse(r.text);
    };
    const counted = await tokenize({ prompt: "The sea is" });
    assert.equal(counted.count, completion.usage.prompt_tokens);
    assert.equal(counted.tokens.length, counted.count);
    assert.equal(counted.max_model_len, 1024);
    const chatCount = await tokenize({ messages: HELLO });
    assert.equal(chatCount.count, chat.usage.prompt_tokens);
    const plain = await tokenize({ prompt: "Fair winds, 12 knots.", add_special_tokens: false });
    const back = await rawPost("/detokenize", JSON.stringify({ model, tokens: plain.tokens }));
    assert.equal(back.status, 200, back.text);
    assert.equal(JSON.parse(back.text).prompt, "Fair winds, 12 knots.");
    const outside = await rawPost("/detokenize", JSON.stringify({ model, tokens: [1, 1 << 30] }));
    assert.equal(outside.status, 400, outside.text);
    assert.equal(JSON.parse(outside.text).error.param, "tokens");
    assert.match(JSON.parse(outside.text).error.message, /at position 1/);
    const nobody = await rawPost("/tokenize", JSON.stringify({ model: "nope", prompt: "x" }));
    assert.equal(nobody.status, 404, nobody.text);
    ok("tokenize and detokenize");

    // A stop string cut from the greedy answer ends the text just before it.
    const answer = completion.choices[0].text;
    const cut = answer.trimEnd().length > 6 ? answer.slice(3, 6) : null;
    if (cut && cut.trim().length > 0) {
      const stopped = await client.completions.create({
        model, prompt: "The sea is", max_tokens: 12, temperature: 0, stop: [cut, "zzzz"],
      });
      assert.equal(stopped.choices[0].text, answer.slice(0, answer.indexOf(cut)));
      assert.equal(stopped.choices[0].finish_reason, "stop");
      ok("stop sequence");
    } else {
      assert.fail("answer too short to test stop: " + JSON.stringify(answer));
    }

    // n choices with a seed are reproducible, and differ from each other.
    const sampled = () => client.chat.completions.create({
      model, messages: HELLO, max_tokens: 16, temperature: 1.0, seed: 1234, n: 3,
    });
    const s1 = await sampled();
    const s2 = await sampled();
    assert.equal(s1.choices.length, 3);
    assert.deepEqual(s1.choices.map((c) => c.message.content),
                     s2.choices.map((c) => c.message.content));
    assert.ok(new Set(s1.choices.map((c) => c.message.content)).size > 1, "choices differ");
    ok("n with seed is reproducible");

    // Logprobs: one entry per token, each with sorted alternatives.
    const lp = await greedyChat(model, HELLO, { logprobs: true, top_logprobs: 3 });
    const content = lp.choices[0].logprobs.content;
    assert.equal(content.length, lp.usage.completion_tokens -
                 (lp.choices[0].finish_reason === "stop" ? 1 : 0));
    for (const t of content) {
      assert.ok(t.logprob <= 0);
      assert.equal(t.top_logprobs.length, 3);
      assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
      // Greedy: the chosen token is the most likely one.
      assert.equal(t.top_logprobs[0].token, t.token);
      assert.ok(Array.isArray(t.bytes));
    }
    assert.equal(content.map((t) => t.token).join(""), lp.choices[0].message.content);
    ok("logprobs");

    // logit_bias: +100 on one token makes it every greedy token (and, as logprobs are taken after
    // the bias, a near-certain one); -100 bans the baseline's first token.
    const smallCompletion = (extra) => client.completions.create({
      model, prompt: [5, 6, 7], max_tokens: 4, temperature: 0, logprobs: 1, ...extra,
    });
    const baseline = (await smallCompletion({})).choices[0].logprobs;
    const forced = (await smallCompletion({ logit_bias: { "42": 100 } })).choices[0].logprobs;
    assert.equal(new Set(forced.tokens).size, 1, JSON.stringify(forced.tokens));
    assert.notEqual(forced.tokens[0], baseline.tokens[0]);
    for (const p of forced.token_logprobs) assert.ok(p > -0.01, String(p));
    assert.ok(baseline.token_logprobs[0] < -0.01, String(baseline.token_logprobs[0]));
    ok("logit_bias forces a token");
    // vLLM's min_p and repetition_penalty pass through the client as extra body fields.
    const penalized = await smallCompletion({ repetition_penalty: 1.5, min_p: 0.1 });
    assert.equal(penalized.choices[0].logprobs.tokens.length, 4);
    ok("min_p and repetition_penalty accepted");
    // min_tokens: a stop token the bias makes certain ends the answer at once, unless the first
    // min_tokens tokens may not be it.
    const stopAt42 = { logit_bias: { "42": 100 }, stop_token_ids: [42], max_tokens: 12 };
    const early = await smallCompletion(stopAt42);
    assert.equal(early.choices[0].finish_reason, "stop");
    assert.equal(early.usage.completion_tokens, 1);
    const late = await smallCompletion({ ...stopAt42, min_tokens: 4 });
    assert.equal(late.choices[0].finish_reason, "stop");
    assert.equal(late.usage.completion_tokens, 5);
    ok("min_tokens holds the end back");

    // json_schema: the output parses and validates.
    const schema = {
      type: "object",
      properties: {
        name: { type: "string", maxLength: 12 },
        age: { type: "integer" },
        sailor: { type: "boolean" },
        mood: { enum: ["calm", "stormy"] },
      },
      required: ["name", "age", "sailor", "mood"],
      additionalProperties: false,
    };
    for (const seed of [1, 2, 3]) {
      const js = await client.chat.completions.create({
        model, messages: [{ role: "user", content: "Describe a sailor as JSON." }],
        max_tokens: 80, temperature: 1.0, seed,
        response_format: { type: "json_schema", json_schema: { name: "sailor", schema, strict: true } },
      });
      const value = JSON.parse(js.choices[0].message.content);
      assert.deepEqual(Object.keys(value).sort(), ["age", "mood", "name", "sailor"]);
      assert.equal(typeof value.name, "string");
      assert.ok(value.name.length <= 12);
      assert.ok(Number.isInteger(value.age));
      assert.equal(typeof value.sailor, "boolean");
      assert.ok(["calm", "stormy"].includes(value.mood));
    }
    ok("json_schema output validates");
  },

  async errors() {
    await expectApiError(greedyChat("no-such-model"), 404, (e) => {
      assert.equal(e.code, "model_not_found");
    });
    ok("unknown model is 404");
    await expectApiError(greedyChat(model, HELLO, { temperature: 5 }), 400, (e) => {
      assert.equal(e.param, "temperature");
    });
    ok("bad temperature is 400 naming it");
    const long = "sea ".repeat(3000);
    await expectApiError(greedyChat(model, [{ role: "user", content: long }]), 400, (e) => {
      assert.match(e.message, /maximum context length is 1024 tokens/);
    });
    ok("prompt over the context is 400 with the numbers");
    await expectApiError(greedyChat(model, HELLO, { max_tokens: 100000 }), 400, (e) => {
      assert.match(e.message, /maximum context length/);
    });
    ok("huge max_tokens is 400");
    await expectApiError(greedyChat(model, []), 400, (e) => assert.equal(e.param, "messages"));
    ok("empty messages is 400");
    await expectApiError(greedyChat(model, [{ role: "wizard", content: "hi" }]), 400, (e) => {
      assert.match(e.param, /messages\[0\]\.role/);
    });
    ok("unknown role is 400");
    const malformed = await rawPost("/v1/chat/completions", "{\"model\": ");
    assert.equal(malformed.status, 400);
    assert.equal(JSON.parse(malformed.text).error.type, "invalid_request_error");
    // Where it broke off: after the 10 bytes sent (nlohmann counts from 1).
    assert.match(JSON.parse(malformed.text).error.message, /invalid JSON at byte 11: /);
    ok("malformed JSON is 400 saying where");
    // Over the 16 MiB body limit, which the HTTP layer enforces before the API sees the body.
    const huge = [{ role: "user", content: "x".repeat(16 << 20) }];
    await expectApiError(greedyChat(model, huge), 413, (e) => {
      assert.equal(e.type, "invalid_request_error");
      assert.equal(e.code, "request_too_large");
      assert.match(e.message, /exceeds the limit of 16777216 bytes/);
    });
    ok("a body over 16 MiB is an OpenAI 413");
    const unknown = await rawPost("/v1/audio/speech", JSON.stringify({ model, input: "hi" }));
    assert.equal(unknown.status, 404);
    assert.equal(JSON.parse(unknown.text).error.type, "invalid_request_error");
    ok("an unknown route is an OpenAI 404");
    const wrongType = await rawPost("/v1/chat/completions",
                                    JSON.stringify({ model, messages: "hello" }));
    assert.equal(wrongType.status, 400);
    assert.equal(JSON.parse(wrongType.text).error.param, "messages");
    ok("wrong type is 400");
  },

  async concurrency() {
    const prompts = [];
    for (let i = 0; i < 32; i++) {
      prompts.push([{ role: "user", content: "Fortune number " + i + ": tell me about " +
                      ["ships", "rain", "bread", "stars"][i % 4] + "." }]);
    }
    const one = [];
    for (const p of prompts) one.push((await greedyChat(model, p)).choices[0].message.content);
    const together = await Promise.all(prompts.map((p) => greedyChat(model, p)));
    for (let i = 0; i < prompts.length; i++) {
      assert.equal(together[i].choices[0].message.content, one[i], "request " + i);
    }
    ok("32 concurrent greedy requests equal the sequential ones");

    // Mixed adapters in one batch: each gets its own adapter's answer.
    const names = [model, adapter1, adapter2];
    const single = {};
    for (const name of names) single[name] = (await greedyChat(name)).choices[0].message.content;
    assert.notEqual(single[adapter1], single[model], "adapter 1 changes the answer");
    assert.notEqual(single[adapter2], single[adapter1], "the adapters differ");
    const mixed = await Promise.all(
      Array.from({ length: 12 }, (_, i) => greedyChat(names[i % 3])));
    mixed.forEach((r, i) => assert.equal(r.choices[0].message.content, single[names[i % 3]]));
    ok("mixed adapters in one batch");
  },

  async disconnects() {
    const controllers = [];
    const runs = [];
    for (let i = 0; i < 16; i++) {
      const controller = new AbortController();
      controllers.push(controller);
      runs.push((async () => {
        const stream = await client.chat.completions.create({
          model, messages: [{ role: "user", content: "Long story " + i }], max_tokens: 400,
          temperature: 1.0, seed: i, stream: true, ignore_eos: true,
        }, { signal: controller.signal });
        let n = 0;
        for await (const chunk of stream) {
          if (++n === 3 && i % 2 === 0) {
            controller.abort();  // the connection closes mid-stream
            return "aborted";
          }
        }
        return "finished";
      })());
    }
    // Two non-streamed requests whose clients give up early, long before their ~240 tokens are
    // generated: the server (started with --heartbeat-ms 100) notices at its next heartbeat
    // write. (Given up at 1.5 s, with 1 s heartbeats, a fast run finished some before the write.)
    for (let i = 0; i < 2; i++) {
      const controller = new AbortController();
      controllers.push(controller);
      runs.push(client.chat.completions.create({
        model, messages: [{ role: "user", content: "Very long story " + i }], max_tokens: 900,
        temperature: 1.0, seed: 100 + i, ignore_eos: true,
      }, { signal: controller.signal }).then(() => "finished", () => "aborted"));
      setTimeout(() => controller.abort(), 300);
    }
    const outcomes = await Promise.all(runs);
    assert.equal(outcomes.filter((o) => o === "aborted").length, 10, outcomes.join(","));
    ok("half the clients went away");
    const after = await greedyChat(model);
    assert.ok(after.choices[0].message.content.length > 0);
    ok("server still answers");
  },

  async adapters() {
    // adapter1 is a directory to load at run time as "runtime-a"; it answers like the adapter it is.
    const path = adapter1;
    const loaded = await rawPost("/v1/adapters", JSON.stringify({ name: "runtime-a", path }));
    assert.equal(loaded.status, 200, loaded.text);
    assert.equal(JSON.parse(loaded.text).parent, model);
    const ids = (await client.models.list()).data.map((m) => m.id);
    assert.ok(ids.includes("runtime-a"), ids.join(","));
    const viaRuntime = await greedyChat("runtime-a");
    const viaStart = await greedyChat(adapter2);
    assert.equal(viaRuntime.choices[0].message.content, viaStart.choices[0].message.content);
    ok("an adapter loaded at run time answers like the same adapter loaded at start");
    const bad = await rawPost("/v1/adapters", JSON.stringify({ name: "x", path: "/nonexistent" }));
    assert.equal(bad.status, 404, bad.text);
    assert.equal(JSON.parse(bad.text).error.param, "path");
    const noName = await rawPost("/v1/adapters", JSON.stringify({ path }));
    assert.equal(noName.status, 400);
    ok("a bad adapter load is refused");
    const removed = await fetch(baseURL + "/v1/adapters/runtime-a", { method: "DELETE" });
    assert.equal(removed.status, 200);
    await expectApiError(greedyChat("runtime-a"), 404);
    const again = await fetch(baseURL + "/v1/adapters/runtime-a", { method: "DELETE" });
    assert.equal(again.status, 404);
    ok("an unloaded adapter is gone");
  },

  async cache() {
    const body = JSON.stringify({ model, messages: HELLO, max_tokens: 16, temperature: 0 });
    const first = await rawPost("/v1/chat/completions", body);
    assert.equal(first.status, 200);
    assert.equal(first.headers.get("x-sovai-cache"), "miss");
    const second = await rawPost("/v1/chat/completions", body);
    assert.equal(second.headers.get("x-sovai-cache"), "hit");
    assert.equal(second.text, first.text.trimStart());
    ok("response cache hit returns the identical body");
    const idOf = (r) => JSON.parse(r.text).id;
    // no-store: generated afresh (a new id) and not stored, however often.
    for (let i = 0; i < 2; i++) {
      const optOut = await rawPost("/v1/chat/completions", body, { "cache-control": "no-store" });
      assert.equal(optOut.headers.get("x-sovai-cache"), "bypass");
      assert.notEqual(idOf(optOut), idOf(first));
    }
    const stillFirst = await rawPost("/v1/chat/completions", body);
    assert.equal(stillFirst.headers.get("x-sovai-cache"), "hit");
    assert.equal(idOf(stillFirst), idOf(first));
    ok("cache-control no-store bypasses the cache");
    // no-cache: generated afresh and stored, so the next plain request gets that answer.
    const fresh = await rawPost("/v1/chat/completions", body, { "cache-control": "no-cache" });
    assert.equal(fresh.headers.get("x-sovai-cache"), "miss");
    assert.notEqual(idOf(fresh), idOf(first));
    const after = await rawPost("/v1/chat/completions", body);
    assert.equal(after.headers.get("x-sovai-cache"), "hit");
    assert.equal(after.text, fresh.text.trimStart());
    ok("cache-control no-cache refreshes the cached answer");
    const sampledBody = JSON.stringify({ model, messages: HELLO, max_tokens: 16, temperature: 1 });
    for (let i = 0; i < 2; i++) {
      const r = await rawPost("/v1/chat/completions", sampledBody);
      assert.equal(r.headers.get("x-sovai-cache"), "bypass");
    }
    ok("sampled requests never come from the cache");
  },

  async queue_full() {
    // The server runs with one sequence at a time and one waiting, and every request generates
    // its 200 tokens (ignore_eos): a burst gets 429s.
    const burst = Array.from({ length: 6 }, () =>
      client.chat.completions.create({ model, messages: HELLO, max_tokens: 200, temperature: 1,
                                       ignore_eos: true })
        .then(() => 200, (e) => e.status));
    const statuses = await Promise.all(burst);
    assert.ok(statuses.includes(429), statuses.join(","));
    assert.ok(statuses.includes(200), statuses.join(","));
    const raw = await Promise.all(Array.from({ length: 4 }, () => rawPost("/v1/chat/completions",
      JSON.stringify({ model, messages: HELLO, max_tokens: 200, temperature: 1, ignore_eos: true }))));
    const refused = raw.find((r) => r.status === 429);
    assert.ok(refused, raw.map((r) => r.status).join(","));
    assert.equal(refused.headers.get("retry-after"), "1");
    ok("queue full is 429 with Retry-After");
  },
};

try {
  await scenarios[scenario]();
} catch (err) {
  console.error("FAILED in " + scenario + ": " + (err.stack || err));
  process.exit(1);
}
