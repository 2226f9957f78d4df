// Object storage from the browser: every S3 request goes to the S3 endpoint on a URL presigned by
// the API (api.presign), so the page never holds an S3 secret. Listings are S3's XML.
import { presign } from "./api";

export interface Bucket {
  name: string;
  created: Date | null;
}

export interface S3Object {
  key: string;
  size: number;
  modified: Date | null;
  etag: string;
}

export interface Listing {
  prefixes: string[];
  objects: S3Object[];
  nextToken: string | null;
}

/** An S3 error answer: its code (NoSuchKey, AccessDenied, ...) and message. */
export class S3Error extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message ? `${message} (${code || status})` : `S3 answered ${status} ${code}`);
  }
}

async function s3Error(response: Response): Promise<S3Error> {
  const text = await response.text().catch(() => "");
  const doc = new DOMParser().parseFromString(text, "application/xml");
  return new S3Error(
    response.status,
    doc.querySelector("Error > Code")?.textContent ?? "",
    doc.querySelector("Error > Message")?.textContent ?? "",
  );
}

async function xml(url: string, signal?: AbortSignal): Promise<Document> {
  const response = await fetch(url, { signal, cache: "no-store" });
  if (!response.ok) throw await s3Error(response);
  return new DOMParser().parseFromString(await response.text(), "application/xml");
}

function text(el: Element, name: string): string {
  // Direct children only: a <Contents> has one <Key>, an <Owner> has its own <ID>.
  for (const child of Array.from(el.children)) if (child.localName === name) return child.textContent ?? "";
  return "";
}

function children(el: Element, name: string): Element[] {
  return Array.from(el.children).filter((c) => c.localName === name);
}

function date(value: string): Date | null {
  const d = new Date(value);
  return isNaN(d.getTime()) ? null : d;
}

export async function listBuckets(signal?: AbortSignal): Promise<Bucket[]> {
  const doc = await xml(await presign({ method: "GET" }, signal), signal);
  const buckets = doc.documentElement.getElementsByTagNameNS("*", "Bucket");
  return Array.from(buckets).map((b) => ({ name: text(b, "Name"), created: date(text(b, "CreationDate")) }));
}

/** One page of the "folders" and objects directly under `prefix` ("" or ending in "/"). */
export async function listObjects(bucket: string, prefix: string, token: string | null, signal?: AbortSignal): Promise<Listing> {
  const query: Record<string, string> = { "list-type": "2", delimiter: "/", prefix, "max-keys": "1000" };
  if (token) query["continuation-token"] = token;
  const doc = await xml(await presign({ method: "GET", bucket, query }, signal), signal);
  const root = doc.documentElement;
  return {
    prefixes: children(root, "CommonPrefixes").map((p) => text(p, "Prefix")),
    objects: children(root, "Contents").map((c) => ({
      key: text(c, "Key"),
      size: Number(text(c, "Size")),
      modified: date(text(c, "LastModified")),
      etag: text(c, "ETag"),
    })),
    nextToken: text(root, "IsTruncated") === "true" ? text(root, "NextContinuationToken") || null : null,
  };
}

/** Uploads `file` as `key`, reporting progress (0..1); XMLHttpRequest, because fetch has no upload
 * progress. Resolves when S3 stored the object. */
export async function upload(bucket: string, key: string, file: Blob, onProgress: (fraction: number) => void, signal?: AbortSignal): Promise<void> {
  const url = await presign({ method: "PUT", bucket, key }, signal);
  await new Promise<void>((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    if (file.type) xhr.setRequestHeader("Content-Type", file.type);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable && e.total > 0) onProgress(e.loaded / e.total);
    };
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        onProgress(1);
        resolve();
        return;
      }
      const doc = new DOMParser().parseFromString(xhr.responseText, "application/xml");
      reject(new S3Error(xhr.status, doc.querySelector("Error > Code")?.textContent ?? "", doc.querySelector("Error > Message")?.textContent ?? ""));
    };
    xhr.onerror = () => reject(new Error("the upload failed: the S3 endpoint cannot be reached or refused the browser (CORS)"));
    xhr.onabort = () => reject(new DOMException("upload cancelled", "AbortError"));
    signal?.addEventListener("abort", () => xhr.abort());
    xhr.send(file);
  });
}

export async function deleteObject(bucket: string, key: string): Promise<void> {
  const response = await fetch(await presign({ method: "DELETE", bucket, key }), { method: "DELETE" });
  if (!response.ok) throw await s3Error(response);
}

/** A short-lived URL that downloads `key` as a file named after its last segment. */
export async function downloadUrl(bucket: string, key: string): Promise<string> {
  const name = key.split("/").pop() || "download";
  return presign({
    method: "GET",
    bucket,
    key,
    expires_s: 300,
    query: { "response-content-disposition": `attachment; filename*=UTF-8''${encodeURIComponent(name)}` },
  });
}

/** The object's text, or null when it does not exist. */
export async function getText(bucket: string, key: string, signal?: AbortSignal): Promise<string | null> {
  const response = await fetch(await presign({ method: "GET", bucket, key }, signal), { signal, cache: "no-store" });
  if (response.status === 404) return null;
  if (!response.ok) throw await s3Error(response);
  return response.text();
}

/** Creates a bucket of the token's project (CreateBucket on a presigned URL, in the server's
 * region). S3's errors: InvalidBucketName, BucketAlreadyExists, BucketAlreadyOwnedByYou. */
export async function createBucket(bucket: string): Promise<void> {
  const response = await fetch(await presign({ method: "PUT", bucket }), { method: "PUT" });
  if (!response.ok) throw await s3Error(response);
}

/** Deletes an empty bucket (BucketNotEmpty otherwise, as on S3). */
export async function deleteBucket(bucket: string): Promise<void> {
  const response = await fetch(await presign({ method: "DELETE", bucket }), { method: "DELETE" });
  if (!response.ok) throw await s3Error(response);
}
