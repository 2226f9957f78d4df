// OpenAI chat completions, streamed (Server-Sent Events), for the chat playground: an app's gateway
// (<api>/apps/<id>/v1/chat/completions) or the catalog (/v1/chat/completions on the API port).
// Both are same-origin for the panel, so no CORS is involved; the token goes in the Authorization
// header, never in a URL.
import { currentToken } from "./api";

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface ChatRequest {
  /** The full URL of chat/completions. */
  url: string;
  /** The "model" member: the app's name or the catalog endpoint's. */
  model: string;
  messages: ChatMessage[];
  max_tokens?: number;
  temperature?: number;
  /** A token other than the session's (an app token made with the token helper). */
  token?: string;
}

/** A refused or failed completion: the HTTP status and the OpenAI error message. */
export class ChatError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Streams a completion: `onDelta` gets each piece of text as it arrives. Resolves with the whole
 * text and the finish reason when the stream ends ([DONE]); rejects with ChatError for an HTTP
 * error (401 wrong token, 403, 404, 429, 503) or an error event, and with an AbortError when
 * `signal` aborts. */
export async function streamChat(
  request: ChatRequest,
  onDelta: (text: string) => void,
  signal: AbortSignal,
): Promise<{ text: string; finishReason: string }> {
  const token = request.token || currentToken();
  const headers: Record<string, string> = { "Content-Type": "application/json", Accept: "text/event-stream" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const body: Record<string, unknown> = { model: request.model, messages: request.messages, stream: true };
  if (request.max_tokens !== undefined) body.max_tokens = request.max_tokens;
  if (request.temperature !== undefined) body.temperature = request.temperature;
  const response = await fetch(request.url, { method: "POST", headers, body: JSON.stringify(body), signal, cache: "no-store" });
  if (!response.ok) throw new ChatError(response.status, await errorMessage(response));
  if (!response.body) throw new ChatError(response.status, "the answer has no body");
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let text = "";
  let finishReason = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    // Events are separated by a blank line; each "data: " line is one JSON chunk.
    for (let end = buffer.search(/\r?\n\r?\n/); end !== -1; end = buffer.search(/\r?\n\r?\n/)) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = event
        .split(/\r?\n/)
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, ""))
        .join("\n");
      if (!data) continue;
      if (data === "[DONE]") return { text, finishReason };
      const chunk = parseChunk(data);
      if (chunk.error) throw new ChatError(response.status, chunk.error);
      if (chunk.delta) {
        text += chunk.delta;
        onDelta(chunk.delta);
      }
      if (chunk.finishReason) finishReason = chunk.finishReason;
    }
  }
  return { text, finishReason };
}

interface Chunk {
  delta: string;
  finishReason: string;
  error: string;
}

function parseChunk(data: string): Chunk {
  try {
    const json = JSON.parse(data) as {
      choices?: { delta?: { content?: string | null }; finish_reason?: string | null }[];
      error?: { message?: string };
    };
    const choice = json.choices?.[0];
    return {
      delta: choice?.delta?.content ?? "",
      finishReason: choice?.finish_reason ?? "",
      error: json.error ? json.error.message || "the model failed" : "",
    };
  } catch {
    return { delta: "", finishReason: "", error: `an event that is not JSON: ${data.slice(0, 100)}` };
  }
}

async function errorMessage(response: Response): Promise<string> {
  const text = await response.text().catch(() => "");
  try {
    const json = JSON.parse(text) as { error?: { message?: string }; detail?: string };
    const message = json.error?.message || json.detail;
    if (message) return `${response.status}: ${message}`;
  } catch {
    /* not JSON */
  }
  return `${response.status} ${response.statusText}${text ? `: ${text.slice(0, 200)}` : ""}`;
}
