// The REST client every page uses: the API token (kept in sessionStorage, so it goes away with the
// tab), JSON calls with problem+json errors, and presigned S3 URLs (POST /v1/presign).
import type { Whoami } from "./types";

const TOKEN_KEY = "sovai.token";
let signOutReason = "";

/** Why the session ended (a refused token), once; "" after a plain sign-out. */
export function takeSignOutReason(): string {
  const reason = signOutReason;
  signOutReason = "";
  return reason;
}

export function currentToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function storeToken(token: string): void {
  sessionStorage.setItem(TOKEN_KEY, token);
  whoamiCache = null;
}

/** Forgets the token; listeners of "sovai:signed-out" (the router) show the sign-in page. */
export function signOut(reason = ""): void {
  sessionStorage.removeItem(TOKEN_KEY);
  whoamiCache = null;
  signOutReason = reason;
  window.dispatchEvent(new CustomEvent("sovai:signed-out", { detail: reason }));
}

export interface FieldError {
  field: string;
  message: string;
}

/** A failed call: the HTTP status and the problem+json members (RFC 9457). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    readonly detail: string,
    readonly fields: FieldError[] = [],
  ) {
    super(detail || title || `HTTP ${status}`);
  }
}

export async function errorFrom(response: Response): Promise<ApiError> {
  const text = await response.text().catch(() => "");
  try {
    const problem = JSON.parse(text) as { title?: string; detail?: string; errors?: FieldError[] };
    return new ApiError(response.status, problem.title ?? "", problem.detail ?? "", problem.errors ?? []);
  } catch {
    return new ApiError(response.status, response.statusText, text.slice(0, 300));
  }
}

export interface CallOptions {
  signal?: AbortSignal;
  /** Another token than the session's (the sign-in page tries one before keeping it). */
  token?: string;
}

/** Sends an authenticated request to the API; a 401 signs out (the token expired or was revoked). */
export async function send(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<Response> {
  const token = options.token ?? currentToken();
  if (!token) throw new ApiError(401, "Unauthenticated", "sign in with an API token first");
  const headers: Record<string, string> = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: options.signal,
    cache: "no-store",
  });
  if (!response.ok) {
    const error = await errorFrom(response);
    if (response.status === 401 && options.token === undefined) signOut(error.message);
    throw error;
  }
  return response;
}

/** A JSON call: GET/POST/... `path` ("/v1/jobs"); resolves to the parsed body (undefined for 204). */
export async function api<T>(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<T> {
  const response = await send(method, path, body, options);
  if (response.status === 204) return undefined as T;
  return (await response.json()) as T;
}

let whoamiCache: Promise<Whoami> | null = null;

/** Who the session's token is (cached until sign-out). */
export function whoami(): Promise<Whoami> {
  if (!whoamiCache) {
    whoamiCache = api<Whoami>("GET", "/v1/whoami");
    whoamiCache.catch(() => (whoamiCache = null));
  }
  return whoamiCache;
}

/** Whether the token may change things (operator or admin); read tokens only look. */
export function canWrite(me: Whoami): boolean {
  return me.role !== "read";
}

export interface PresignRequest {
  method: "GET" | "HEAD" | "PUT" | "DELETE";
  bucket?: string;
  key?: string;
  query?: Record<string, string>;
  expires_s?: number;
}

/** A presigned S3 URL for one request, valid for this page's origin (CORS). */
export async function presign(request: PresignRequest, signal?: AbortSignal): Promise<string> {
  const answer = await api<{ url: string }>("POST", "/v1/presign", { ...request, origin: location.origin }, { signal });
  return answer.url;
}

/** A message for any error a call can throw. */
export function messageOf(error: unknown): string {
  if (error instanceof ApiError) return error.message;
  if (error instanceof DOMException && error.name === "AbortError") return "cancelled";
  if (error instanceof TypeError) return `the server cannot be reached (${error.message})`;
  return error instanceof Error ? error.message : String(error);
}
