// Asks a deployed app one question through the official `openai` npm client, streamed, the way
// an existing integration would after changing its base URL.
// Usage: node tools/demo/ask.mjs BASE_URL TOKEN MODEL QUESTION
// Prints the answer as it streams, then one line `usage: {...}`; exits 1 on any API error.
import OpenAI from "openai";

const [baseURL, apiKey, model, question] = process.argv.slice(2);
if (!question) {
  console.error("usage: node tools/demo/ask.mjs BASE_URL TOKEN MODEL QUESTION");
  process.exit(2);
}

const client = new OpenAI({ baseURL, apiKey, maxRetries: 2, timeout: 120_000 });
try {
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: question }],
    max_tokens: 128,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let usage = null;
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta?.content;
    if (delta) process.stdout.write(delta);
    if (chunk.usage) usage = chunk.usage;
  }
  process.stdout.write("\n");
  console.log("usage: " + JSON.stringify(usage));
} catch (err) {
  console.error("ask.mjs: " + (err instanceof OpenAI.APIError ? `HTTP ${err.status}: ` : "") + err.message);
  process.exit(1);
}
