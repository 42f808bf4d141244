"""The S3 features that table formats and recent SDKs rely on, as boto3 sees them: conditional
requests (If-Match / If-None-Match on GET, HEAD, PUT, DELETE and CompleteMultipartUpload, with
a race of create-only PUTs), the additional checksums (CRC32, CRC32C, CRC64NVME, SHA1, SHA256:
checked on upload, refused with BadDigest, returned with ChecksumMode), multipart checksums,
UploadPartCopy, the kept headers (Cache-Control, Content-Disposition, Content-Encoding,
Content-Language, Expires), GetObjectAttributes, expired presigned URLs and bucket CORS
(rules stored and read back, preflights answered or refused by them).

Run by crates/e2e/tests/s3.rs against a real `trove s3`; S3_ENDPOINT and the AWS_* variables
name it; S3_TLS_ENDPOINT, if set, is a second gateway over HTTPS (boto3 sends checksums in
the body's trailer there). Needs awscrt (boto3's CRC32C and CRC64NVME). Prints "N passed, 0 failed" at the end;
any failure raises.
"""

import base64
import datetime
import hashlib
import os
import struct
import threading
import time
import urllib.error
import urllib.request
import zlib

import boto3
from awscrt import checksums as crt
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

import checks
from checks import check, expect_error

ENDPOINT = os.environ["S3_ENDPOINT"]
CONFIG = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")
s3 = boto3.client("s3", endpoint_url=ENDPOINT, config=CONFIG)
MIB = 1 << 20


def data(seed, n):
    block = hashlib.sha256(str(seed).encode()).digest() * 2048
    return (block * (n // len(block) + 1))[:n]


def b64(raw):
    return base64.b64encode(raw).decode()


def crc32(b):
    return b64(struct.pack(">I", zlib.crc32(b) & 0xFFFFFFFF))


def crc32c(b):
    return b64(struct.pack(">I", crt.crc32c(b)))


def crc64nvme(b):
    return b64(struct.pack(">Q", crt.crc64nvme(b)))


SUMS = {
    "CRC32": crc32,
    "CRC32C": crc32c,
    "CRC64NVME": crc64nvme,
    "SHA1": lambda b: b64(hashlib.sha1(b).digest()),
    "SHA256": lambda b: b64(hashlib.sha256(b).digest()),
}

B = "compat"
s3.create_bucket(Bucket=B)

# --- conditional writes -----------------------------------------------------------------------------
first = s3.put_object(Bucket=B, Key="log/00001.json", Body=b"commit 1", IfNoneMatch="*")
check("create-only put of a new key", first["ETag"].strip('"') == hashlib.md5(b"commit 1").hexdigest())
expect_error(
    "create-only put of an existing key",
    lambda: s3.put_object(Bucket=B, Key="log/00001.json", Body=b"other", IfNoneMatch="*"),
    "PreconditionFailed",
    412,
)
check("refused create left the object", s3.get_object(Bucket=B, Key="log/00001.json")["Body"].read() == b"commit 1")

# Eight writers race to create one key: exactly one wins, the others are refused.
results = []


def racer(i):
    c = boto3.client("s3", endpoint_url=ENDPOINT, config=CONFIG)
    body = data(100 + i, 256 * 1024)
    try:
        c.put_object(Bucket=B, Key="log/00002.json", Body=body, IfNoneMatch="*")
        results.append(("won", body))
    except ClientError as e:
        results.append((e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]))


threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
winners = [r for r in results if r[0] == "won"]
losers = [r for r in results if r[0] != "won"]
check("one racing creator wins", len(winners) == 1, str([r[0] for r in results]))
check(
    "the other racing creators are refused",
    len(losers) == 7 and all(r in (("PreconditionFailed", 412), ("ConditionalRequestConflict", 409)) for r in losers),
    str(losers),
)
check("the winner's bytes are stored", s3.get_object(Bucket=B, Key="log/00002.json")["Body"].read() == winners[0][1])

etag1 = first["ETag"]
second = s3.put_object(Bucket=B, Key="log/00001.json", Body=b"commit 1 rewritten", IfMatch=etag1)
check("if-match put with the current etag", second["ETag"] != etag1)
expect_error(
    "if-match put with a stale etag",
    lambda: s3.put_object(Bucket=B, Key="log/00001.json", Body=b"lost update", IfMatch=etag1),
    "PreconditionFailed",
    412,
)
expect_error(
    "if-match put of a missing key",
    lambda: s3.put_object(Bucket=B, Key="log/missing.json", Body=b"x", IfMatch=etag1),
    "NoSuchKey",
    404,
)
check("stale put changed nothing", s3.get_object(Bucket=B, Key="log/00001.json")["Body"].read() == b"commit 1 rewritten")

# --- conditional reads ------------------------------------------------------------------------------
etag2 = second["ETag"]
check("get if-match current", s3.get_object(Bucket=B, Key="log/00001.json", IfMatch=etag2)["Body"].read() == b"commit 1 rewritten")
expect_error("get if-match stale", lambda: s3.get_object(Bucket=B, Key="log/00001.json", IfMatch=etag1), "PreconditionFailed", 412)
expect_error("get if-none-match current", lambda: s3.get_object(Bucket=B, Key="log/00001.json", IfNoneMatch=etag2), "304", 304)
expect_error("head if-match stale", lambda: s3.head_object(Bucket=B, Key="log/00001.json", IfMatch=etag1), "412", 412)
expect_error("head if-none-match current", lambda: s3.head_object(Bucket=B, Key="log/00001.json", IfNoneMatch=etag2), "304", 304)
check("head if-none-match stale", s3.head_object(Bucket=B, Key="log/00001.json", IfNoneMatch=etag1)["ETag"] == etag2)

# --- conditional deletes ----------------------------------------------------------------------------
expect_error(
    "delete if-match stale", lambda: s3.delete_object(Bucket=B, Key="log/00001.json", IfMatch=etag1), "PreconditionFailed", 412
)
check("refused delete kept the object", s3.get_object(Bucket=B, Key="log/00001.json")["Body"].read() == b"commit 1 rewritten")
s3.delete_object(Bucket=B, Key="log/00001.json", IfMatch=etag2)
expect_error("delete if-match removed it", lambda: s3.head_object(Bucket=B, Key="log/00001.json"), "404", 404)
expect_error(
    "delete if-match of a missing key", lambda: s3.delete_object(Bucket=B, Key="log/00001.json", IfMatch=etag2), "NoSuchKey", 404
)

# --- conditional multipart completion --------------------------------------------------------------
def multipart(key, parts, **create):
    up = s3.create_multipart_upload(Bucket=B, Key=key, **create)
    done = []
    for i, p in enumerate(parts, 1):
        extra = {}
        if "ChecksumAlgorithm" in create:
            extra["ChecksumAlgorithm"] = create["ChecksumAlgorithm"]
        r = s3.upload_part(Bucket=B, Key=key, UploadId=up["UploadId"], PartNumber=i, Body=p, **extra)
        entry = {"PartNumber": i, "ETag": r["ETag"]}
        for k, v in r.items():
            if k.startswith("Checksum"):
                entry[k] = v
        done.append(entry)
    return up["UploadId"], done


uid, done = multipart("mp/cond.bin", [data(1, 5 * MIB), data(2, MIB)])
s3.put_object(Bucket=B, Key="mp/cond.bin", Body=b"already there")
expect_error(
    "create-only completion onto an existing key",
    lambda: s3.complete_multipart_upload(
        Bucket=B, Key="mp/cond.bin", UploadId=uid, MultipartUpload={"Parts": done}, IfNoneMatch="*"
    ),
    "PreconditionFailed",
    412,
)
s3.delete_object(Bucket=B, Key="mp/cond.bin")
s3.complete_multipart_upload(Bucket=B, Key="mp/cond.bin", UploadId=uid, MultipartUpload={"Parts": done}, IfNoneMatch="*")
check("create-only completion of a new key", s3.head_object(Bucket=B, Key="mp/cond.bin")["ContentLength"] == 6 * MIB)

# --- additional checksums ---------------------------------------------------------------------------
body = data(3, 3 * MIB + 5)
for algo, fn in SUMS.items():
    key = f"sum/{algo}.bin"
    r = s3.put_object(Bucket=B, Key=key, Body=body, ChecksumAlgorithm=algo)
    check(f"put with {algo} answers it", r.get(f"Checksum{algo}") == fn(body), str(r))
    h = s3.head_object(Bucket=B, Key=key, ChecksumMode="ENABLED")
    check(f"head returns the {algo}", h.get(f"Checksum{algo}") == fn(body), str(h))
    g = s3.get_object(Bucket=B, Key=key, ChecksumMode="ENABLED")
    check(f"get returns and boto3 validates the {algo}", g["Body"].read() == body and g.get(f"Checksum{algo}") == fn(body))
    # The value given in a header (not a trailer) is checked too.
    r = s3.put_object(Bucket=B, Key=key, Body=body, **{f"Checksum{algo}": fn(body)})
    check(f"put with a correct {algo} header", r.get(f"Checksum{algo}") == fn(body))
    expect_error(
        f"put with a wrong {algo} is refused",
        lambda: s3.put_object(Bucket=B, Key=f"sum/{algo}-bad.bin", Body=body, **{f"Checksum{algo}": fn(b"other bytes")}),
        "BadDigest",
        400,
    )
    expect_error(f"nothing stored for the wrong {algo}", lambda: s3.head_object(Bucket=B, Key=f"sum/{algo}-bad.bin"), "404", 404)

plain = s3.put_object(Bucket=B, Key="sum/default.bin", Body=body)
h = s3.head_object(Bucket=B, Key="sum/default.bin", ChecksumMode="ENABLED")
check("an sdk-default upload keeps a checksum", any(h.get(f"Checksum{a}") == fn(body) for a, fn in SUMS.items()), str(h))
check("no checksum without checksum mode", not any(k.startswith("ChecksumCRC") for k in s3.head_object(Bucket=B, Key="sum/default.bin")))
g = s3.get_object(Bucket=B, Key="sum/default.bin", ChecksumMode="ENABLED", Range="bytes=0-9")
check("no checksum for a range", g["Body"].read() == body[:10] and "ChecksumCRC64NVME" not in g and "ChecksumCRC32" not in g)

# Multipart: a full-object CRC combined from the parts; a composite SHA256.
parts = [data(10, 5 * MIB), data(11, 5 * MIB), data(12, 123)]
whole = b"".join(parts)
uid, done = multipart("mp/crc32.bin", parts, ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT")
r = s3.complete_multipart_upload(Bucket=B, Key="mp/crc32.bin", UploadId=uid, MultipartUpload={"Parts": done})
check("full-object crc32 of a multipart upload", r.get("ChecksumCRC32") == crc32(whole), str(r))
h = s3.head_object(Bucket=B, Key="mp/crc32.bin", ChecksumMode="ENABLED")
check("head returns the full-object crc32", h.get("ChecksumCRC32") == crc32(whole) and h.get("ChecksumType") == "FULL_OBJECT", str(h))
uid, done = multipart("mp/sha256.bin", parts, ChecksumAlgorithm="SHA256")
r = s3.complete_multipart_upload(Bucket=B, Key="mp/sha256.bin", UploadId=uid, MultipartUpload={"Parts": done})
composite = b64(hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).digest()) + "-3"
check("composite sha256 of a multipart upload", r.get("ChecksumSHA256") == composite, str(r))
uid, done = multipart("mp/bad.bin", parts[:2], ChecksumAlgorithm="SHA256")
done[1]["ChecksumSHA256"] = SUMS["SHA256"](b"not the part")
expect_error(
    "completion listing a wrong part checksum",
    lambda: s3.complete_multipart_upload(Bucket=B, Key="mp/bad.bin", UploadId=uid, MultipartUpload={"Parts": done}),
    "InvalidPart",
    400,
)
uid, done = multipart("mp/plain.bin", parts)
s3.complete_multipart_upload(Bucket=B, Key="mp/plain.bin", UploadId=uid, MultipartUpload={"Parts": done})
h = s3.head_object(Bucket=B, Key="mp/plain.bin", ChecksumMode="ENABLED")
check("an upload naming no algorithm gets a full-object crc64nvme", h.get("ChecksumCRC64NVME") == crc64nvme(whole), str(h))
# The transfer manager (parallel parts, SDK-default checksums) end to end.
path = "/tmp/trove-compat-upload.bin"
with open(path, "wb") as f:
    f.write(data(13, 20 * MIB))
s3.upload_file(path, B, "mp/transfer.bin", Config=TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB))
s3.download_file(B, "mp/transfer.bin", path + ".back")
check("upload_file and download_file round trip", open(path + ".back", "rb").read() == data(13, 20 * MIB))
os.unlink(path)
os.unlink(path + ".back")

# --- UploadPartCopy ---------------------------------------------------------------------------------
src = data(20, 12 * MIB + 7)
s3.put_object(Bucket=B, Key="copy/src.bin", Body=src)
up = s3.create_multipart_upload(Bucket=B, Key="copy/dst.bin")
cut = 6 * MIB
p1 = s3.upload_part_copy(
    Bucket=B, Key="copy/dst.bin", UploadId=up["UploadId"], PartNumber=1, CopySource={"Bucket": B, "Key": "copy/src.bin"},
    CopySourceRange=f"bytes=0-{cut - 1}",
)
check("upload part copy etag is the range's md5", p1["CopyPartResult"]["ETag"].strip('"') == hashlib.md5(src[:cut]).hexdigest())
p2 = s3.upload_part_copy(
    Bucket=B, Key="copy/dst.bin", UploadId=up["UploadId"], PartNumber=2, CopySource={"Bucket": B, "Key": "copy/src.bin"},
    CopySourceRange=f"bytes={cut}-{len(src) - 1}",
)
p3 = s3.upload_part(Bucket=B, Key="copy/dst.bin", UploadId=up["UploadId"], PartNumber=3, Body=b"tail")
s3.complete_multipart_upload(
    Bucket=B, Key="copy/dst.bin", UploadId=up["UploadId"],
    MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": p1["CopyPartResult"]["ETag"]},
        {"PartNumber": 2, "ETag": p2["CopyPartResult"]["ETag"]},
        {"PartNumber": 3, "ETag": p3["ETag"]},
    ]},
)
check("object assembled from copied parts", s3.get_object(Bucket=B, Key="copy/dst.bin")["Body"].read() == src + b"tail")
up = s3.create_multipart_upload(Bucket=B, Key="copy/whole.bin")
p = s3.upload_part_copy(Bucket=B, Key="copy/whole.bin", UploadId=up["UploadId"], PartNumber=1, CopySource=f"{B}/copy/src.bin")
s3.complete_multipart_upload(
    Bucket=B, Key="copy/whole.bin", UploadId=up["UploadId"],
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["CopyPartResult"]["ETag"]}]},
)
check("upload part copy of a whole object", s3.get_object(Bucket=B, Key="copy/whole.bin")["Body"].read() == src)
up = s3.create_multipart_upload(Bucket=B, Key="copy/bad.bin")
expect_error(
    "upload part copy of a range past the end",
    lambda: s3.upload_part_copy(
        Bucket=B, Key="copy/bad.bin", UploadId=up["UploadId"], PartNumber=1, CopySource=f"{B}/copy/src.bin",
        CopySourceRange=f"bytes=0-{len(src)}",
    ),
    "InvalidArgument",
    400,
)
expect_error(
    "upload part copy with a stale source etag",
    lambda: s3.upload_part_copy(
        Bucket=B, Key="copy/bad.bin", UploadId=up["UploadId"], PartNumber=1, CopySource=f"{B}/copy/src.bin",
        CopySourceIfMatch='"0123456789abcdef0123456789abcdef"',
    ),
    "PreconditionFailed",
    412,
)
expect_error(
    "upload part copy of a missing source",
    lambda: s3.upload_part_copy(Bucket=B, Key="copy/bad.bin", UploadId=up["UploadId"], PartNumber=1, CopySource=f"{B}/copy/none"),
    "NoSuchKey",
    404,
)
s3.abort_multipart_upload(Bucket=B, Key="copy/bad.bin", UploadId=up["UploadId"])

# --- kept headers -----------------------------------------------------------------------------------
expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
HEADERS = dict(
    CacheControl="max-age=3600, public",
    ContentDisposition='attachment; filename="report.csv"',
    ContentEncoding="gzip",
    ContentLanguage="de-CH",
    Expires=expires,
)


def kept(h, want=HEADERS):
    return all(h.get(k) == v for k, v in want.items())


s3.put_object(Bucket=B, Key="hdr/put.csv", Body=b"a,b\n", ContentType="text/csv", **HEADERS)
h = s3.head_object(Bucket=B, Key="hdr/put.csv")
check("head returns the kept headers", kept(h) and h["ContentType"] == "text/csv", str(h))
g = s3.get_object(Bucket=B, Key="hdr/put.csv")
check("get returns the kept headers", kept(g) and g["Body"].read() == b"a,b\n", str(g))
s3.copy_object(Bucket=B, Key="hdr/copied.csv", CopySource=f"{B}/hdr/put.csv")
check("copy keeps the headers", kept(s3.head_object(Bucket=B, Key="hdr/copied.csv")))
s3.copy_object(
    Bucket=B, Key="hdr/replaced.csv", CopySource=f"{B}/hdr/put.csv", MetadataDirective="REPLACE", CacheControl="no-store"
)
h = s3.head_object(Bucket=B, Key="hdr/replaced.csv")
check("copy with REPLACE replaces the headers", h.get("CacheControl") == "no-store" and "ContentDisposition" not in h, str(h))
up = s3.create_multipart_upload(Bucket=B, Key="hdr/mp.csv", **HEADERS)
p = s3.upload_part(Bucket=B, Key="hdr/mp.csv", UploadId=up["UploadId"], PartNumber=1, Body=b"x,y\n")
s3.complete_multipart_upload(
    Bucket=B, Key="hdr/mp.csv", UploadId=up["UploadId"], MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]}
)
check("a multipart upload keeps the headers", kept(s3.head_object(Bucket=B, Key="hdr/mp.csv")))

# --- GetObjectAttributes ----------------------------------------------------------------------------
a = s3.get_object_attributes(Bucket=B, Key="sum/SHA256.bin", ObjectAttributes=["ETag", "ObjectSize", "Checksum", "StorageClass"])
check(
    "object attributes of a put",
    a["ETag"].strip('"') == hashlib.md5(body).hexdigest() and a["ObjectSize"] == len(body)
    and a["Checksum"].get("ChecksumSHA256") == SUMS["SHA256"](body) and a["StorageClass"] == "STANDARD",
    str(a),
)
a = s3.get_object_attributes(Bucket=B, Key="mp/crc32.bin", ObjectAttributes=["ObjectParts", "Checksum", "ObjectSize"])
check(
    "object attributes of a multipart object",
    a["ObjectParts"]["TotalPartsCount"] == 3 and a["Checksum"]["ChecksumCRC32"] == crc32(whole) and a["ObjectSize"] == len(whole),
    str(a),
)
a = s3.get_object_attributes(Bucket=B, Key="sum/default.bin", ObjectAttributes=["ObjectSize"])
check("only the asked attributes", "ETag" not in a and a["ObjectSize"] == len(body), str(a))
expect_error(
    "object attributes of a missing key",
    lambda: s3.get_object_attributes(Bucket=B, Key="nope", ObjectAttributes=["ETag"]),
    "NoSuchKey",
    404,
)

url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "sum/default.bin"}, ExpiresIn=604801)
try:
    urllib.request.urlopen(url)
    check("presigned url valid over a week refused", False, "it was accepted")
except urllib.error.HTTPError as e:
    text = e.read().decode(errors="replace")
    check("presigned url valid over a week refused as S3 does", e.code == 400 and "AuthorizationQueryParametersError" in text, text)

# --- checksums in the trailer of an aws-chunked body (what boto3 sends over HTTPS) ---------------------
tls = os.environ.get("S3_TLS_ENDPOINT")
if tls:
    ts3 = boto3.client("s3", endpoint_url=tls, config=CONFIG, verify=False)
    for algo in ["CRC32C", "CRC64NVME"]:
        ts3.put_object(Bucket=B, Key=f"tls/{algo}.bin", Body=body, ChecksumAlgorithm=algo)
        h = s3.head_object(Bucket=B, Key=f"tls/{algo}.bin", ChecksumMode="ENABLED")
        check(f"{algo} sent in a trailer is kept", h.get(f"Checksum{algo}") == SUMS[algo](body), str(h))
    ts3.put_object(Bucket=B, Key="tls/default.bin", Body=body)
    h = s3.head_object(Bucket=B, Key="tls/default.bin", ChecksumMode="ENABLED")
    check("an sdk-default upload over tls keeps a checksum", any(h.get(f"Checksum{a}") == fn(body) for a, fn in SUMS.items()), str(h))

# --- expired presigned URLs -------------------------------------------------------------------------
url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "sum/default.bin"}, ExpiresIn=1)
time.sleep(2)
try:
    urllib.request.urlopen(url)
    check("expired presigned url refused", False, "it was accepted")
except urllib.error.HTTPError as e:
    text = e.read().decode(errors="replace")
    check("expired presigned url refused as S3 does", e.code == 403 and "<Code>AccessDenied</Code>" in text and "expired" in text, text)

# --- CORS -------------------------------------------------------------------------------------------
import http.client
import urllib.parse

expect_error("no cors configuration yet", lambda: s3.get_bucket_cors(Bucket=B), "NoSuchCORSConfiguration", 404)
RULES = [
    {
        "ID": "web app",
        "AllowedOrigins": ["https://*.example.com"],
        "AllowedMethods": ["GET", "PUT"],
        "AllowedHeaders": ["x-amz-*", "Content-Type"],
        "ExposeHeaders": ["ETag"],
        "MaxAgeSeconds": 600,
    },
    {"AllowedOrigins": ["*"], "AllowedMethods": ["HEAD"]},
]
s3.put_bucket_cors(Bucket=B, CORSConfiguration={"CORSRules": RULES})
got = s3.get_bucket_cors(Bucket=B)["CORSRules"]
check("cors rules read back", got == RULES, str(got))
expect_error(
    "cors rule with an unknown method refused",
    lambda: s3.put_bucket_cors(Bucket=B, CORSConfiguration={"CORSRules": [{"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}]}),
    "MalformedXML",
    400,
)
host = urllib.parse.urlparse(ENDPOINT).netloc


def options(path, headers):
    conn = http.client.HTTPConnection(host, timeout=30)
    conn.request("OPTIONS", path, headers=headers)
    r = conn.getresponse()
    body = r.read().decode(errors="replace")
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


st, h, _ = options(
    f"/{B}/hdr/put.csv",
    {"Origin": "https://app.example.com", "Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "x-amz-date, content-type"},
)
check(
    "preflight allowed by a rule",
    st == 200 and h.get("access-control-allow-origin") == "https://app.example.com"
    and "PUT" in h.get("access-control-allow-methods", "") and h.get("access-control-max-age") == "600",
    f"{st} {h}",
)
st, h, body = options(f"/{B}/hdr/put.csv", {"Origin": "https://evil.test", "Access-Control-Request-Method": "GET"})
check("preflight from another origin refused", st == 403 and "CORSResponse" in body, f"{st} {body}")
st, h, body = options(f"/{B}/hdr/put.csv", {"Origin": "https://app.example.com", "Access-Control-Request-Method": "DELETE"})
check("preflight for a method no rule allows refused", st == 403, f"{st} {body}")
st, h, _ = options(f"/{B}/x", {"Origin": "https://anything.test", "Access-Control-Request-Method": "HEAD"})
check("wildcard origin rule answers *", st == 200 and h.get("access-control-allow-origin") == "*", f"{st} {h}")
url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "hdr/put.csv"}, ExpiresIn=300)
r = urllib.request.urlopen(urllib.request.Request(url, headers={"Origin": "https://app.example.com"}))
check(
    "actual request gets the allow-origin and exposed headers",
    r.headers.get("Access-Control-Allow-Origin") == "https://app.example.com" and r.headers.get("Access-Control-Expose-Headers") == "ETag",
    str(dict(r.headers)),
)
s3.delete_bucket_cors(Bucket=B)
expect_error("cors configuration deleted", lambda: s3.get_bucket_cors(Bucket=B), "NoSuchCORSConfiguration", 404)
st, _, body = options(f"/{B}/hdr/put.csv", {"Origin": "https://app.example.com", "Access-Control-Request-Method": "GET"})
check("preflight without rules refused", st == 403 and "CORS is not enabled" in body, f"{st} {body}")

print(checks.summary())
