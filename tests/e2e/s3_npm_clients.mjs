// Drives the npm S3 clients against a running `sovai server`, for tests/e2e/s3_npm_test.py.
//
//   node s3_npm_clients.mjs aws-sdk|minio
//
// Environment: S3_ENDPOINT (http[s]://127.0.0.1:PORT), S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION,
// S3_BUCKET (created here; the caller deletes it), and NODE_EXTRA_CA_CERTS for a self-signed
// HTTPS certificate. Prints "ok - <check>" for every check that holds and "done: <suite>, N checks"
// at the end; on the first check that fails it prints "FAIL: <check>: <why>" to stderr and exits 1.
// It leaves keep/* objects in the bucket, whose content the Python test verifies with boto3:
// keep/<suite>-multipart.bin is deterministicBytes(12 MiB, "<suite>-multipart").

import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

const MIB = 1024 * 1024;

let checks = 0;
let step = "start";

function fail(name, why) {
  process.stderr.write(`FAIL: ${name}: ${why}\n`);
  process.exit(1);
}

function check(name, condition, why = "") {
  if (!condition) fail(name, why || "condition is false");
  checks += 1;
  console.log(`ok - ${name}`);
}

function checkEqual(name, got, want) {
  const g = JSON.stringify(got);
  const w = JSON.stringify(want);
  check(name, g === w, `got ${g}, want ${w}`);
}

function checkBytes(name, got, want) {
  const g = Buffer.from(got);
  check(name, g.equals(want),
        `got ${g.length} bytes (sha256 ${sha256(g)}), ` +
        `want ${want.length} (sha256 ${sha256(want)})`);
}

function md5(data) {
  return createHash("md5").update(data).digest("hex");
}

function sha256(data) {
  return createHash("sha256").update(data).digest("hex");
}

// The ETag S3 gives a multipart object: MD5 of the concatenated part MD5s, "-", part count.
function multipartEtag(data, partSizeBytes) {
  const h = createHash("md5");
  let parts = 0;
  for (let i = 0; i < data.length; i += partSizeBytes) {
    h.update(createHash("md5").update(data.subarray(i, i + partSizeBytes)).digest());
    parts += 1;
  }
  return `"${h.digest("hex")}-${parts}"`;
}

// Same bytes as random_bytes() in the Python suites: SHA-256 in counter mode.
function deterministicBytes(sizeBytes, seed) {
  const out = Buffer.alloc(sizeBytes);
  let offset = 0;
  for (let counter = 0; offset < sizeBytes; counter += 1) {
    const block = createHash("sha256").update(`${seed}:${counter}`).digest();
    offset += block.copy(out, offset, 0, Math.min(block.length, sizeBytes - offset));
  }
  return out;
}

async function streamToBuffer(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

// Runs fn, which must throw; returns the error.
async function expectError(name, fn) {
  try {
    await fn();
  } catch (e) {
    return e;
  }
  fail(name, "the call succeeded; an error was expected");
}

function env(name) {
  const value = process.env[name];
  if (!value) fail("environment", `${name} is not set`);
  return value;
}

const endpoint = env("S3_ENDPOINT");
const accessKey = env("S3_ACCESS_KEY");
const secretKey = env("S3_SECRET_KEY");
const region = env("S3_REGION");
const bucket = env("S3_BUCKET");

// --- @aws-sdk/client-s3, @aws-sdk/lib-storage, @aws-sdk/s3-request-presigner ---------------------

async function awsSdk() {
  const s3 = await import("@aws-sdk/client-s3");
  const { Upload } = await import("@aws-sdk/lib-storage");
  const { getSignedUrl } = await import("@aws-sdk/s3-request-presigner");
  const makeClient = (secret) => new s3.S3Client({
    endpoint, region, forcePathStyle: true, maxAttempts: 1,
    credentials: { accessKeyId: accessKey, secretAccessKey: secret },
  });
  const client = makeClient(secretKey);
  const send = (command) => client.send(command);

  step = "CreateBucket";
  await send(new s3.CreateBucketCommand({
    Bucket: bucket, CreateBucketConfiguration: { LocationConstraint: region } }));
  const location = await send(new s3.GetBucketLocationCommand({ Bucket: bucket }));
  checkEqual("aws-sdk CreateBucket in the region", location.LocationConstraint, region);
  let e = await expectError("aws-sdk CreateBucket twice", () => send(new s3.CreateBucketCommand({
    Bucket: bucket, CreateBucketConfiguration: { LocationConstraint: region } })));
  checkEqual("aws-sdk CreateBucket twice is BucketAlreadyOwnedByYou", e.name,
             "BucketAlreadyOwnedByYou");

  step = "PutObject / GetObject";
  const hello = Buffer.from("hello from node\n".repeat(10));
  const put = await send(new s3.PutObjectCommand({
    Bucket: bucket, Key: "dir/hello.txt", Body: hello, ContentType: "text/plain",
    Metadata: { origin: "node" } }));
  checkEqual("aws-sdk PutObject ETag is the MD5", put.ETag, `"${md5(hello)}"`);
  let got = await send(new s3.GetObjectCommand({ Bucket: bucket, Key: "dir/hello.txt" }));
  checkBytes("aws-sdk GetObject body", await got.Body.transformToByteArray(), hello);
  checkEqual("aws-sdk GetObject content type", got.ContentType, "text/plain");
  checkEqual("aws-sdk GetObject metadata", got.Metadata, { origin: "node" });

  const medium = deterministicBytes(300 * 1024, "aws-sdk-medium");  // file-backed on the server
  await send(new s3.PutObjectCommand({ Bucket: bucket, Key: "dir/medium.bin", Body: medium }));
  got = await send(new s3.GetObjectCommand({
    Bucket: bucket, Key: "dir/medium.bin", Range: "bytes=70000-70099" }));
  checkBytes("aws-sdk GetObject range body", await got.Body.transformToByteArray(),
             medium.subarray(70000, 70100));
  checkEqual("aws-sdk GetObject Content-Range", got.ContentRange,
             `bytes 70000-70099/${medium.length}`);
  const head = await send(new s3.HeadObjectCommand({ Bucket: bucket, Key: "dir/medium.bin" }));
  checkEqual("aws-sdk HeadObject size and ETag", [head.ContentLength, head.ETag],
             [medium.length, `"${md5(medium)}"`]);
  // The SDK sends a CRC32 with every PutObject; asked to, it checks the one the server returns.
  got = await send(new s3.GetObjectCommand({ Bucket: bucket, Key: "dir/medium.bin",
                                             ChecksumMode: "ENABLED" }));
  checkBytes("aws-sdk GetObject with checksum validation",
             await got.Body.transformToByteArray(), medium);
  check("aws-sdk GetObject returns the stored CRC32", typeof got.ChecksumCRC32 === "string" &&
        got.ChecksumCRC32.length === 8, `ChecksumCRC32 is ${got.ChecksumCRC32}`);
  e = await expectError("aws-sdk GetObject missing", () => send(new s3.GetObjectCommand({
    Bucket: bucket, Key: "missing" })));
  checkEqual("aws-sdk GetObject missing is NoSuchKey", [e.name, e.$metadata.httpStatusCode],
             ["NoSuchKey", 404]);
  e = await expectError("aws-sdk HeadObject missing", () => send(new s3.HeadObjectCommand({
    Bucket: bucket, Key: "missing" })));
  checkEqual("aws-sdk HeadObject missing is 404", e.$metadata.httpStatusCode, 404);

  step = "ListObjectsV2";
  const keys = ["a", "dir/sub/x", "e f+g", "z/1", "\u00e9t\u00e9"];
  for (const key of keys) {
    await send(new s3.PutObjectCommand({ Bucket: bucket, Key: key, Body: key }));
  }
  const allKeys = [...keys, "dir/hello.txt", "dir/medium.bin"].sort(
    (x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
  let list = await send(new s3.ListObjectsV2Command({ Bucket: bucket, Delimiter: "/" }));
  checkEqual("aws-sdk ListObjectsV2 delimiter keys", (list.Contents ?? []).map((c) => c.Key),
             ["a", "e f+g", "\u00e9t\u00e9"]);
  checkEqual("aws-sdk ListObjectsV2 common prefixes",
             (list.CommonPrefixes ?? []).map((p) => p.Prefix), ["dir/", "z/"]);
  list = await send(new s3.ListObjectsV2Command({ Bucket: bucket, Prefix: "dir/",
                                                  Delimiter: "/" }));
  checkEqual("aws-sdk ListObjectsV2 prefix", [list.Contents.map((c) => c.Key),
             list.CommonPrefixes.map((p) => p.Prefix)],
             [["dir/hello.txt", "dir/medium.bin"], ["dir/sub/"]]);
  const paged = [];
  let pages = 0;
  for await (const page of s3.paginateListObjectsV2({ client, pageSize: 2 }, { Bucket: bucket })) {
    pages += 1;
    paged.push(...(page.Contents ?? []).map((c) => c.Key));
  }
  checkEqual("aws-sdk ListObjectsV2 paginated", paged, allKeys);
  checkEqual("aws-sdk ListObjectsV2 page count", pages, Math.ceil(allKeys.length / 2));

  step = "CopyObject";
  await send(new s3.CopyObjectCommand({
    Bucket: bucket, Key: "copy/hello.txt", CopySource: `${bucket}/dir/hello.txt` }));
  got = await send(new s3.GetObjectCommand({ Bucket: bucket, Key: "copy/hello.txt" }));
  checkBytes("aws-sdk CopyObject body", await got.Body.transformToByteArray(), hello);
  checkEqual("aws-sdk CopyObject keeps metadata", got.Metadata, { origin: "node" });
  await send(new s3.CopyObjectCommand({
    Bucket: bucket, Key: "copy/replaced.txt", CopySource: `${bucket}/dir/hello.txt`,
    MetadataDirective: "REPLACE", Metadata: { other: "1" }, ContentType: "text/x-other" }));
  const replaced = await send(new s3.HeadObjectCommand({ Bucket: bucket,
                                                         Key: "copy/replaced.txt" }));
  checkEqual("aws-sdk CopyObject REPLACE metadata", [replaced.Metadata, replaced.ContentType],
             [{ other: "1" }, "text/x-other"]);
  // A key that needs escaping in x-amz-copy-source.
  await send(new s3.CopyObjectCommand({
    Bucket: bucket, Key: "copy/escaped", CopySource: `${bucket}/${encodeURIComponent("e f+g")}` }));
  got = await send(new s3.GetObjectCommand({ Bucket: bucket, Key: "copy/escaped" }));
  checkEqual("aws-sdk CopyObject escaped source", await got.Body.transformToString(), "e f+g");

  step = "DeleteObjects";
  const del = await send(new s3.DeleteObjectsCommand({ Bucket: bucket, Delete: {
    Objects: keys.map((Key) => ({ Key })) } }));
  checkEqual("aws-sdk DeleteObjects deleted", (del.Deleted ?? []).map((d) => d.Key).sort(),
             [...keys].sort());
  list = await send(new s3.ListObjectsV2Command({ Bucket: bucket }));
  checkEqual("aws-sdk ListObjectsV2 after DeleteObjects", list.Contents.map((c) => c.Key),
             ["copy/escaped", "copy/hello.txt", "copy/replaced.txt", "dir/hello.txt",
              "dir/medium.bin"]);

  step = "lib-storage Upload";
  const big = deterministicBytes(12 * MIB, "aws-sdk-multipart");
  const upload = new Upload({ client, params: { Bucket: bucket, Key: "keep/aws-sdk-multipart.bin",
                                                Body: big, ContentType: "application/x-big" },
                              partSize: 5 * MIB, queueSize: 2, leavePartsOnError: false });
  const uploaded = await upload.done();
  checkEqual("aws-sdk Upload 12 MiB ETag (3 parts)", uploaded.ETag, multipartEtag(big, 5 * MIB));
  got = await send(new s3.GetObjectCommand({ Bucket: bucket, Key: "keep/aws-sdk-multipart.bin" }));
  checkBytes("aws-sdk Upload 12 MiB round trip", await got.Body.transformToByteArray(), big);
  checkEqual("aws-sdk Upload content type", got.ContentType, "application/x-big");
  const uploads = await send(new s3.ListMultipartUploadsCommand({ Bucket: bucket }));
  checkEqual("aws-sdk no multipart upload left open", uploads.Uploads ?? [], []);
  const smallUpload = await new Upload({ client, params: {
    Bucket: bucket, Key: "keep/aws-sdk-small.txt", Body: Buffer.from("one part\n") } }).done();
  checkEqual("aws-sdk Upload below partSize is one PutObject", smallUpload.ETag,
             `"${md5(Buffer.from("one part\n"))}"`);

  step = "presigned URLs";
  const getUrl = await getSignedUrl(client, new s3.GetObjectCommand({
    Bucket: bucket, Key: "dir/medium.bin" }), { expiresIn: 120 });
  let response = await fetch(getUrl);
  checkEqual("aws-sdk presigned GET status", response.status, 200);
  checkBytes("aws-sdk presigned GET body", Buffer.from(await response.arrayBuffer()), medium);
  const putUrl = await getSignedUrl(client, new s3.PutObjectCommand({
    Bucket: bucket, Key: "keep/presigned-put.txt" }), { expiresIn: 120 });
  response = await fetch(putUrl, { method: "PUT", body: "put through a presigned URL\n" });
  checkEqual("aws-sdk presigned PUT status", response.status, 200);
  got = await send(new s3.GetObjectCommand({ Bucket: bucket, Key: "keep/presigned-put.txt" }));
  checkEqual("aws-sdk presigned PUT stored", await got.Body.transformToString(),
             "put through a presigned URL\n");
  response = await fetch(getUrl.replace("X-Amz-Signature=", "X-Amz-Signature=0"));
  checkEqual("aws-sdk tampered presigned URL is 403", response.status, 403);
  checkEqual("aws-sdk tampered presigned URL says why",
             /<Code>SignatureDoesNotMatch<\/Code>/.test(await response.text()), true);

  step = "bad credentials";
  e = await expectError("aws-sdk wrong secret", () => makeClient("wrong" + secretKey.slice(5)).send(
    new s3.ListObjectsV2Command({ Bucket: bucket })));
  checkEqual("aws-sdk wrong secret is SignatureDoesNotMatch", [e.name, e.$metadata.httpStatusCode],
             ["SignatureDoesNotMatch", 403]);
}

// --- minio ---------------------------------------------------------------------------------------

async function minio() {
  const Minio = await import("minio");
  const url = new URL(endpoint);
  const makeClient = (secret) => new Minio.Client({
    endPoint: url.hostname, port: Number(url.port), useSSL: url.protocol === "https:",
    accessKey, secretKey: secret, region, pathStyle: true, partSize: 5 * MIB });
  const client = makeClient(secretKey);

  step = "makeBucket";
  await client.makeBucket(bucket, region);
  checkEqual("minio bucketExists", await client.bucketExists(bucket), true);
  checkEqual("minio bucketExists for a missing bucket",
             await client.bucketExists(`${bucket}-missing`), false);
  const buckets = await client.listBuckets();
  checkEqual("minio listBuckets has the bucket", buckets.some((b) => b.name === bucket), true);

  step = "putObject / getObject";
  const text = Buffer.from("written by minio-js\n".repeat(20));
  const put = await client.putObject(bucket, "m/one.txt", text, text.length, {
    "Content-Type": "text/plain", "X-Amz-Meta-Origin": "minio" });
  checkEqual("minio putObject ETag is the MD5", put.etag, md5(text));
  const stat = await client.statObject(bucket, "m/one.txt");
  checkEqual("minio statObject", [stat.size, stat.etag, stat.metaData["content-type"],
                                  stat.metaData.origin],
             [text.length, md5(text), "text/plain", "minio"]);
  checkBytes("minio getObject", await streamToBuffer(await client.getObject(bucket, "m/one.txt")),
             text);
  checkBytes("minio getPartialObject",
             await streamToBuffer(await client.getPartialObject(bucket, "m/one.txt", 5, 10)),
             text.subarray(5, 15));
  let e = await expectError("minio getObject missing", () => client.getObject(bucket, "missing"));
  checkEqual("minio getObject missing is NoSuchKey", e.code, "NoSuchKey");

  step = "fPutObject multipart";
  // From a file, as minio-js is used for big objects: its stream reads 64 KiB at a time and it
  // cuts 5 MiB parts. (A 12 MiB Buffer goes up as a multipart upload of one 12 MiB part: minio-js
  // 8.0.7 reads its part splitter with read(), which joins every block already buffered.)
  const big = deterministicBytes(12 * MIB, "minio-multipart");
  const dir = await mkdtemp(join(tmpdir(), "sovai-npm-"));
  try {
    await writeFile(join(dir, "big.bin"), big);
    const bigPut = await client.fPutObject(bucket, "keep/minio-multipart.bin",
                                           join(dir, "big.bin"));
    checkEqual("minio fPutObject 12 MiB ETag (3 parts)", `"${bigPut.etag}"`,
               multipartEtag(big, 5 * MIB));
    await client.fGetObject(bucket, "keep/minio-multipart.bin", join(dir, "back.bin"));
    checkBytes("minio 12 MiB round trip", await readFile(join(dir, "back.bin")), big);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }

  step = "listObjectsV2";
  for (const key of ["m/two.txt", "m/sub/three.txt", "top z"]) {
    await client.putObject(bucket, key, Buffer.from(key));
  }
  const listAll = async (prefix, recursive) => {
    const seen = [];
    for await (const item of client.listObjectsV2(bucket, prefix, recursive)) {
      seen.push(item.name ?? `prefix:${item.prefix}`);
    }
    return seen;
  };
  checkEqual("minio listObjectsV2 recursive", await listAll("", true),
             ["keep/minio-multipart.bin", "m/one.txt", "m/sub/three.txt", "m/two.txt", "top z"]);
  // (minio-js yields a page's objects first, then its prefixes.)
  checkEqual("minio listObjectsV2 one level", await listAll("m/", false),
             ["m/one.txt", "m/two.txt", "prefix:m/sub/"]);

  step = "copyObject";
  await client.copyObject(new Minio.CopySourceOptions({ Bucket: bucket, Object: "m/one.txt" }),
                          new Minio.CopyDestinationOptions({ Bucket: bucket,
                                                             Object: "m/copy.txt" }));
  checkBytes("minio copyObject",
             await streamToBuffer(await client.getObject(bucket, "m/copy.txt")), text);

  step = "presigned URLs";
  const getUrl = await client.presignedGetObject(bucket, "m/one.txt", 120);
  let response = await fetch(getUrl);
  checkEqual("minio presignedGetObject status", response.status, 200);
  checkBytes("minio presignedGetObject body", Buffer.from(await response.arrayBuffer()), text);
  const putUrl = await client.presignedPutObject(bucket, "keep/minio-presigned.txt", 120);
  response = await fetch(putUrl, { method: "PUT", body: "minio presigned put\n" });
  checkEqual("minio presignedPutObject status", response.status, 200);
  checkBytes("minio presignedPutObject stored",
             await streamToBuffer(await client.getObject(bucket, "keep/minio-presigned.txt")),
             Buffer.from("minio presigned put\n"));

  step = "removeObject";
  await client.removeObject(bucket, "m/copy.txt");
  e = await expectError("minio statObject removed", () => client.statObject(bucket, "m/copy.txt"));
  checkEqual("minio removeObject removed it", e.code, "NotFound");
  await client.removeObjects(bucket, ["m/one.txt", "m/two.txt", "m/sub/three.txt", "top z"]);
  checkEqual("minio removeObjects", await listAll("", true),
             ["keep/minio-multipart.bin", "keep/minio-presigned.txt"]);

  step = "bad credentials";
  e = await expectError("minio wrong secret", () => makeClient("wrong" + secretKey.slice(5))
    .statObject(bucket, "keep/minio-presigned.txt"));
  // A HEAD has no body, so minio-js can only report the status.
  check("minio wrong secret HEAD is refused",
        ["SignatureDoesNotMatch", "AccessDenied", "Forbidden"].includes(e.code),
        `got code ${e.code}`);
  e = await expectError("minio wrong secret GET", () => makeClient("wrong" + secretKey.slice(5))
    .getObject(bucket, "keep/minio-presigned.txt"));
  checkEqual("minio wrong secret GET is SignatureDoesNotMatch", e.code, "SignatureDoesNotMatch");
}

const suites = { "aws-sdk": awsSdk, minio };
const suite = process.argv[2];
if (!suites[suite]) fail("usage", `node s3_npm_clients.mjs ${Object.keys(suites).join("|")}`);
try {
  await suites[suite]();
} catch (e) {
  const status = e?.$metadata?.httpStatusCode ?? e?.statusCode ?? "";
  fail(`${suite} ${step}`, `unexpected error ${e?.name ?? ""} ${e?.code ?? ""} ${status}: ` +
       `${e?.message ?? e}\n${e?.stack ?? ""}`);
}
console.log(`done: ${suite}, ${checks} checks`);
