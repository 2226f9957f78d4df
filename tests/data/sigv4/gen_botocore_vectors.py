#!/usr/bin/env python3
"""Generates the botocore cross-check vectors of src/objstore/sigv4_test.cc.

botocore (the signer of boto3 and the AWS CLI) signs a set of S3 requests — SigV4 header and
query (presigned), SigV2 header and query, UNSIGNED-PAYLOAD, a signed body, an aws-chunked body
with a CRC32 trailer — at a fixed time with a fixed credential. The output is C++ that
sigv4_test.cc embeds between its "BEGIN GENERATED" and "END GENERATED" markers; the test then
checks that Authenticate() accepts every request exactly as botocore signed it.

    python3 tests/data/sigv4/gen_botocore_vectors.py            # print the C++ block
    python3 tests/data/sigv4/gen_botocore_vectors.py --update   # rewrite it in sigv4_test.cc

Needs botocore (tested with 1.43). The vectors do not depend on the wall clock.
"""
import datetime
import io
import os
import sys
import types
from unittest import mock
from urllib.parse import quote

import botocore
from botocore import auth as bauth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum

ACCESS_KEY = "AKIDBOTOCORE0000"
SECRET_KEY = "botocore/Secret+Key=example"
REGION = "us-west-2"
NOW = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
NOW_EPOCH = int(NOW.timestamp())
HOST = "127.0.0.1:9000"
CREDS = Credentials(ACCESS_KEY, SECRET_KEY)

TEST_FILE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "src", "objstore",
                         "sigv4_test.cc")


def enc_path(path):
    """How botocore's S3 serializer puts a key into the URL."""
    return quote(path, safe="/~")


def enc_query(pairs):
    return "&".join(
        quote(k, safe="-_.~") + ("=" + quote(v, safe="-_.~") if v is not None else "")
        for k, v in pairs)


def unsigned_payload_context():
    return {"client_config": types.SimpleNamespace(s3={"payload_signing_enabled": False})}


REAL_FORMATDATE = bauth.formatdate


def fixed_formatdate(timeval=None, localtime=False, usegmt=False):
    return REAL_FORMATDATE(NOW_EPOCH if timeval is None else timeval, localtime, usegmt)


def sign(req, signer):
    with mock.patch.object(bauth, "get_current_datetime", return_value=NOW.replace(tzinfo=None)), \
         mock.patch.object(bauth, "formatdate", fixed_formatdate), \
         mock.patch.object(bauth.time, "time", return_value=float(NOW_EPOCH)):
        signer.add_auth(req)
    return req


def request(method, path, query=None, headers=None, body=b"", vhost_bucket=""):
    host = f"{vhost_bucket}.s3.local:9000" if vhost_bucket else HOST
    url = f"http://{host}{enc_path(path)}"
    if query:
        url += "?" + enc_query(query)
    hdrs = {"Host": host}
    hdrs.update(headers or {})
    req = AWSRequest(method=method, url=url, headers=hdrs, data=body)
    return req


VECTORS = []


def add(name, req, expected_method, body=b"", vhost_bucket="", decoded=None, trailers=()):
    target = req.url.split("://", 1)[1]
    target = target[target.index("/"):]
    headers = [(k, v) for k, v in req.headers.items()]
    if expected_method.endswith("-query"):
        # A presigned URL is handed to another client, which sends no Date of botocore's.
        headers = [(k, v) for k, v in headers if k.lower() != "date"]
    VECTORS.append(dict(name=name, method=req.method, target=target, vhost=vhost_bucket,
                        headers=headers, body=body,
                        decoded=body if decoded is None else decoded,
                        trailers=list(trailers), expected=expected_method))


def build():
    key = "/photos/dir/a key+ü €(1)!.txt"

    # SigV4 header: GET of a key with spaces, unicode, '+' and reserved characters.
    r = request("GET", key, headers={"Range": "bytes=0-9"})
    add("v4_header_get_unicode_key", sign(r, bauth.S3SigV4Auth(CREDS, "s3", REGION)),
        "SigV4-header")

    # SigV4 header dated by Date instead of x-amz-date: botocore does that when the caller set a
    # Date header, and writes it as "Wed, 01 May 2024 12:00:00 -0000".
    r = request("HEAD", "/photos/dated", headers={"Date": "placeholder"})
    add("v4_header_date_not_amz_date", sign(r, bauth.S3SigV4Auth(CREDS, "s3", REGION)),
        "SigV4-header")

    # SigV4 header: ListObjectsV2 with several query parameters (one repeated, one empty).
    q = [("list-type", "2"), ("prefix", "a b/c+d"), ("delimiter", "/"), ("max-keys", "10"),
         ("encoding-type", "url"), ("start-after", "ü=x&y"), ("fetch-owner", ""),
         ("x-id", "b"), ("x-id", "a")]
    r = request("GET", "/photos", query=q)
    add("v4_header_list_query", sign(r, bauth.S3SigV4Auth(CREDS, "s3", REGION)), "SigV4-header")

    # SigV4 header: PUT with a signed body (http: botocore hashes the payload) and metadata.
    body = b"Hello, S3 signature version 4!\n"
    r = request("PUT", key, body=body,
                headers={"Content-Type": "text/plain", "x-amz-meta-owner": "  alice   and bob ",
                         "x-amz-storage-class": "STANDARD", "Content-Length": str(len(body))})
    add("v4_header_put_signed_body", sign(r, bauth.S3SigV4Auth(CREDS, "s3", REGION)),
        "SigV4-header", body=body)

    # SigV4 header: UNSIGNED-PAYLOAD.
    body = b"unsigned payload bytes"
    r = request("PUT", "/photos/unsigned.bin", body=body,
                headers={"Content-Length": str(len(body))})
    r.context.update(unsigned_payload_context())
    add("v4_header_put_unsigned", sign(r, bauth.S3SigV4Auth(CREDS, "s3", REGION)),
        "SigV4-header", body=body)

    # SigV4 header: virtual-hosted style, multipart upload query (?uploadId=&partNumber=).
    body = b"part-one"
    r = request("PUT", "/big/object.bin", query=[("partNumber", "1"), ("uploadId", "u/1+2=3")],
                body=body, headers={"Content-Length": str(len(body))}, vhost_bucket="photos")
    add("v4_header_vhost_upload_part", sign(r, bauth.S3SigV4Auth(CREDS, "s3", REGION)),
        "SigV4-header", body=body, vhost_bucket="photos")

    # SigV4 header: aws-chunked with a CRC32 trailer (STREAMING-UNSIGNED-PAYLOAD-TRAILER), the
    # body framed by botocore's own AwsChunkedWrapper.
    data = b"0123456789abcdef" * 20  # 320 bytes: chunks of 128, 128 and 64
    wrapper = AwsChunkedWrapper(io.BytesIO(data), checksum_cls=Crc32Checksum,
                                checksum_name="x-amz-checksum-crc32", chunk_size=128)
    framed = wrapper.read()
    r = request("PUT", "/photos/chunked.bin", body=framed,
                headers={"Content-Encoding": "aws-chunked", "x-amz-trailer": "x-amz-checksum-crc32",
                         "x-amz-decoded-content-length": str(len(data)),
                         "Content-Length": str(len(framed))})
    r.context["checksum"] = {"request_algorithm": {"in": "trailer",
                                                   "name": "x-amz-checksum-crc32"}}
    crc = Crc32Checksum()
    crc.update(data)
    add("v4_header_unsigned_trailer", sign(r, bauth.S3SigV4Auth(CREDS, "s3", REGION)),
        "SigV4-header", body=framed, decoded=data,
        trailers=[("x-amz-checksum-crc32", crc.b64digest())])

    # SigV4 query (presigned): GET with response overrides, and a PUT.
    r = request("GET", key, query=[("response-content-type", "text/plain; charset=utf-8"),
                                   ("response-content-disposition", 'attachment; filename="a b"')])
    add("v4_query_get", sign(r, bauth.S3SigV4QueryAuth(CREDS, "s3", REGION, expires=3600)),
        "SigV4-query")
    body = b"presigned put"  # the URL is made without the body; the client sends it later
    r = request("PUT", "/photos/presigned put.txt")
    add("v4_query_put", sign(r, bauth.S3SigV4QueryAuth(CREDS, "s3", REGION, expires=604800)),
        "SigV4-query", body=body)

    # SigV2 header: GET of a unicode key, ?acl sub-resource, PUT with amz headers, vhost style.
    r = request("GET", key)
    add("v2_header_get_unicode_key", sign(r, bauth.HmacV1Auth(CREDS)), "SigV2-header")
    r = request("GET", "/photos/a+b", query=[("acl", None), ("versionId", "v 1/2")])
    add("v2_header_acl_version", sign(r, bauth.HmacV1Auth(CREDS)), "SigV2-header")
    body = b"v2 body"
    r = request("PUT", "/photos/v2.txt", body=body,
                headers={"Content-Type": "text/plain", "Content-MD5": "Cw9QmZlv3U0Qgd1G1vAntA==",
                         "x-amz-meta-b": " two ", "X-Amz-Meta-A": "one",
                         "x-amz-acl": "private"})
    add("v2_header_put_amz_headers", sign(r, bauth.HmacV1Auth(CREDS)), "SigV2-header", body=body)
    r = request("GET", "/k e y", vhost_bucket="photos")
    r.auth_path = "/photos" + enc_path("/k e y")
    add("v2_header_vhost", sign(r, bauth.HmacV1Auth(CREDS)), "SigV2-header",
        vhost_bucket="photos")

    # SigV2 query (presigned).
    r = request("GET", key, query=[("response-content-disposition", "inline")])
    add("v2_query_get", sign(r, bauth.HmacV1QueryAuth(CREDS, expires=3600)), "SigV2-query")


def cxx_string(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    out = '"'
    for c in b:
        ch = chr(c)
        if ch == '"':
            out += '\\"'
        elif ch == "\\":
            out += "\\\\"
        elif ch == "\r":
            out += "\\r"
        elif ch == "\n":
            out += "\\n"
        elif 0x20 <= c < 0x7F:  # '?' is safe: C++17 has no trigraphs
            out += ch
        else:
            out += "\\%03o" % c
    return out + '"'


def cxx_block():
    lines = ["// BEGIN GENERATED by tests/data/sigv4/gen_botocore_vectors.py (botocore "
             + botocore.__version__ + "); do not edit.",
             "// clang-format off",
             "constexpr char kBotocoreAccessKey[] = " + cxx_string(ACCESS_KEY) + ";",
             "constexpr char kBotocoreSecretKey[] = " + cxx_string(SECRET_KEY) + ";",
             "constexpr char kBotocoreRegion[] = " + cxx_string(REGION) + ";",
             f"constexpr int64_t kBotocoreNowUnixSeconds = {NOW_EPOCH};",
             "const std::vector<BotocoreVector>& BotocoreVectors() {",
             "  static const auto* vectors = new std::vector<BotocoreVector>{"]
    for v in VECTORS:
        lines.append("      {")
        lines.append(f"          .name = {cxx_string(v['name'])},")
        lines.append(f"          .method = {cxx_string(v['method'])},")
        lines.append(f"          .target = {cxx_string(v['target'])},")
        lines.append(f"          .virtual_host_bucket = {cxx_string(v['vhost'])},")
        lines.append("          .headers = {")
        for k, val in v["headers"]:
            lines.append(f"              {{{cxx_string(k)}, {cxx_string(val)}}},")
        lines.append("          },")
        for field in ("body", "decoded"):
            # Explicit lengths keep NUL bytes; an empty value is a plain std::string().
            value = (f"std::string({cxx_string(v[field])}, {len(v[field])})" if v[field]
                     else "std::string()")
            lines.append(f"          .{field} = {value},")
        lines.append("          .trailers = {")
        for k, val in v["trailers"]:
            lines.append(f"              {{{cxx_string(k)}, {cxx_string(val)}}},")
        lines.append("          },")
        lines.append(f"          .expected_method = {cxx_string(v['expected'])},")
        lines.append("      },")
    lines.append("  };")
    lines.append("  return *vectors;")
    lines.append("}")
    lines.append("// clang-format on")
    lines.append("// END GENERATED")
    return "\n".join(lines) + "\n"


def main():
    build()
    block = cxx_block()
    if "--update" not in sys.argv:
        sys.stdout.write(block)
        return
    with open(TEST_FILE, encoding="utf-8") as f:
        text = f.read()
    begin = text.index("// BEGIN GENERATED")
    end = text.index("// END GENERATED")
    end = text.index("\n", end) + 1
    with open(TEST_FILE, "w", encoding="utf-8") as f:
        f.write(text[:begin] + block + text[end:])
    print(f"updated {len(VECTORS)} vectors in {os.path.normpath(TEST_FILE)}")


if __name__ == "__main__":
    main()
