"""The S3 gateway as boto3 sees it: objects, ranges, metadata, listings and pagination, copies,
batch deletes, multipart uploads (moved, not copied, on completion), signatures, presigned URLs,
malformed requests and invalid keys, concurrent PUTs of one key.

Run by crates/e2e/tests/s3.rs against a real `trove s3`; S3_ENDPOINT and the AWS_* variables
name it. With S3_TLS_ENDPOINT set (a second gateway over HTTPS with anonymous read access), the
TLS and anonymous-read checks run too. Prints "N passed, 0 failed" at the end; any failure
raises.
"""

import base64
import hashlib
import http.client
import os
import ssl
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

import boto3
import botocore
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config

import checks
from checks import check, error_code, expect_error

ENDPOINT = os.environ["S3_ENDPOINT"]
CONFIG = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")
s3 = boto3.client("s3", endpoint_url=ENDPOINT, config=CONFIG)
MIB = 1 << 20


def md5(b):
    return hashlib.md5(b).hexdigest()


def data(seed, n):
    # Deterministic bytes without spending CPU on a slow PRNG.
    block = hashlib.sha256(str(seed).encode()).digest() * 2048
    return (block * (n // len(block) + 1))[:n]


B = "boto"
s3.create_bucket(Bucket=B)
expect_error("create existing bucket", lambda: s3.create_bucket(Bucket=B), "BucketAlreadyOwnedByYou", 409)
check("list buckets", B in [b["Name"] for b in s3.list_buckets()["Buckets"]])
s3.head_bucket(Bucket=B)
expect_error("head missing bucket", lambda: s3.head_bucket(Bucket="no-such-bucket"), "404", 404)

# --- objects, metadata, ETags -------------------------------------------------------------------
body = data(1, 3 * MIB + 17)
r = s3.put_object(Bucket=B, Key="dir/obj.bin", Body=body, ContentType="application/x-test", Metadata={"color": "blue", "Size-Class": "m"})
check("put etag is md5", r["ETag"].strip('"') == md5(body), r["ETag"])
g = s3.get_object(Bucket=B, Key="dir/obj.bin")
got = g["Body"].read()
check("get bytes", got == body, f"{len(got)} bytes")
check("get content type", g["ContentType"] == "application/x-test", g["ContentType"])
check("get metadata", g["Metadata"] == {"color": "blue", "size-class": "m"}, str(g["Metadata"]))
check("get etag", g["ETag"].strip('"') == md5(body))
h = s3.head_object(Bucket=B, Key="dir/obj.bin")
check("head size", h["ContentLength"] == len(body))
expect_error("get missing key", lambda: s3.get_object(Bucket=B, Key="dir/none"), "NoSuchKey", 404)
expect_error("get from missing bucket", lambda: s3.get_object(Bucket="no-such-bucket", Key="x"), "NoSuchBucket", 404)
expect_error("get through a file", lambda: s3.get_object(Bucket=B, Key="dir/obj.bin/x"), "NoSuchKey", 404)

empty = s3.put_object(Bucket=B, Key="empty", Body=b"")
check("empty object etag", empty["ETag"].strip('"') == md5(b""))
check("empty object body", s3.get_object(Bucket=B, Key="empty")["Body"].read() == b"")

# Ranges.
for rng, want in [("bytes=0-99", body[:100]), ("bytes=100-", body[100:]), ("bytes=-50", body[-50:]),
                  (f"bytes={4 * MIB - 10}-{4 * MIB + 10}", body[4 * MIB - 10:4 * MIB + 11]) if len(body) > 4 * MIB else ("bytes=5-5", body[5:6]),
                  ("bytes=3145700-9999999", body[3145700:])]:
    r = s3.get_object(Bucket=B, Key="dir/obj.bin", Range=rng)
    check(f"range {rng}", r["Body"].read() == want and r["ResponseMetadata"]["HTTPStatusCode"] == 206)
expect_error("range past the end", lambda: s3.get_object(Bucket=B, Key="dir/obj.bin", Range="bytes=99999999-"), "InvalidRange", 416)

# Conditional requests.
etag = md5(body)
expect_error("if-none-match", lambda: s3.get_object(Bucket=B, Key="dir/obj.bin", IfNoneMatch=f'"{etag}"'), "304", 304)
expect_error("if-match mismatch", lambda: s3.get_object(Bucket=B, Key="dir/obj.bin", IfMatch='"0000"'), "PreconditionFailed", 412)
check("if-match", s3.get_object(Bucket=B, Key="dir/obj.bin", IfMatch=f'"{etag}"')["ResponseMetadata"]["HTTPStatusCode"] == 200)

# Content-MD5.
wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
expect_error("content-md5 mismatch", lambda: s3.put_object(Bucket=B, Key="md5", Body=b"payload", ContentMD5=wrong), "BadDigest", 400)
right = base64.b64encode(hashlib.md5(b"payload").digest()).decode()
s3.put_object(Bucket=B, Key="md5", Body=b"payload", ContentMD5=right)
expect_error("failed put leaves no object", lambda: s3.head_object(Bucket=B, Key="md5x"), "404", 404)

# --- keys that cannot be paths --------------------------------------------------------------------
for key in ["a//b", "x/../y", "./a", "x/./y", "trail//", ".trove-tmp.1", "d/.trove-s3-tmp.1"]:
    expect_error(f"invalid key {key!r}", lambda: s3.put_object(Bucket=B, Key=key, Body=b"x"), "InvalidArgument", 400)
expect_error("component too long", lambda: s3.put_object(Bucket=B, Key="d/" + "x" * 256, Body=b"x"), "KeyTooLongError", 400)
expect_error("key too long", lambda: s3.put_object(Bucket=B, Key="d/" * 520, Body=b"x"), "KeyTooLongError", 400)
check("255-byte component", s3.put_object(Bucket=B, Key="long/" + "y" * 255, Body=b"ok")["ResponseMetadata"]["HTTPStatusCode"] == 200)
s3.put_object(Bucket=B, Key="conflict", Body=b"file")
expect_error("key under an object", lambda: s3.put_object(Bucket=B, Key="conflict/x", Body=b"x"), "KeyConflict", 409)
s3.delete_object(Bucket=B, Key="conflict")
s3.delete_object(Bucket=B, Key="does/not/exist")
check("delete missing key succeeds", True)

# --- listings ------------------------------------------------------------------------------------
keys = sorted(set(
    [f"list/{c}/{i:03d}" for c in ["a", "b", "a-b", "a.c", "z"] for i in range(7)]
    + ["list/a", "list/a-", "list/top.txt", "list/deep/x/y/z/leaf", "list/sp ace/%25+&?.bin"]
) - {"list/a"})
for k in keys:
    s3.put_object(Bucket=B, Key=k, Body=k.encode())


def all_v2(**kw):
    out, prefixes, token, pages = [], [], None, 0
    while True:
        args = dict(kw)
        if token:
            args["ContinuationToken"] = token
        r = s3.list_objects_v2(Bucket=B, **args)
        pages += 1
        out += [o["Key"] for o in r.get("Contents", [])]
        prefixes += [p["Prefix"] for p in r.get("CommonPrefixes", [])]
        if not r["IsTruncated"]:
            return out, prefixes, pages
        token = r["NextContinuationToken"]


got, _, pages = all_v2(Prefix="list/", MaxKeys=7)
check("v2 lists every key in byte order across pages", got == keys and pages >= len(keys) // 7, f"{got} != {keys}")
got, _, _ = all_v2(Prefix="list/a")
check("v2 prefix inside a name", got == [k for k in keys if k.startswith("list/a")], str(got))
got, cps, _ = all_v2(Prefix="list/", Delimiter="/", MaxKeys=3)
want_cps = sorted({"list/" + k[5:].split("/")[0] + "/" for k in keys if "/" in k[5:]})
want_objs = [k for k in keys if "/" not in k[5:]]
check("v2 delimiter prefixes", cps == want_cps, f"{cps} != {want_cps}")
check("v2 delimiter objects", got == want_objs, f"{got} != {want_objs}")
got, _, _ = all_v2(Prefix="list/", StartAfter="list/a.c/003")
check("v2 start-after", got == [k for k in keys if k > "list/a.c/003"], str(got))
r = s3.list_objects_v2(Bucket=B, Prefix="list/sp ace/")
check("v2 keys that need url encoding", [o["Key"] for o in r["Contents"]] == ["list/sp ace/%25+&?.bin"], str(r.get("Contents")))
got, cps, _ = all_v2(Prefix="list/", Delimiter="-")
check("v2 other delimiter", cps == sorted({k[:k.index("-", 5) + 1] for k in keys if "-" in k[5:]}), str(cps))

# ListObjects (v1) with markers.
out, marker = [], ""
while True:
    r = s3.list_objects(Bucket=B, Prefix="list/", Marker=marker, MaxKeys=5)
    out += [o["Key"] for o in r.get("Contents", [])]
    if not r["IsTruncated"]:
        break
    marker = r.get("NextMarker") or r["Contents"][-1]["Key"]
check("v1 pagination", out == keys, str(out))
r = s3.list_objects(Bucket=B, Prefix="list/", Delimiter="/")
check("v1 delimiter", [p["Prefix"] for p in r["CommonPrefixes"]] == want_cps)

# --- copies -------------------------------------------------------------------------------------
r = s3.copy_object(Bucket=B, Key="copies/one.bin", CopySource={"Bucket": B, "Key": "dir/obj.bin"})
check("copy etag", r["CopyObjectResult"]["ETag"].strip('"') == md5(body))
g = s3.get_object(Bucket=B, Key="copies/one.bin")
check("copy bytes and metadata", g["Body"].read() == body and g["Metadata"] == {"color": "blue", "size-class": "m"})
s3.copy_object(Bucket=B, Key="copies/two.bin", CopySource={"Bucket": B, "Key": "dir/obj.bin"}, MetadataDirective="REPLACE",
               Metadata={"new": "1"}, ContentType="text/plain")
h = s3.head_object(Bucket=B, Key="copies/two.bin")
check("copy with replaced metadata", h["Metadata"] == {"new": "1"} and h["ContentType"] == "text/plain", str(h["Metadata"]))
s3.copy_object(Bucket=B, Key="copies/two.bin", CopySource={"Bucket": B, "Key": "copies/two.bin"}, MetadataDirective="REPLACE", Metadata={"v": "2"})
check("copy onto itself replaces metadata", s3.head_object(Bucket=B, Key="copies/two.bin")["Metadata"] == {"v": "2"})
expect_error("copy onto itself unchanged", lambda: s3.copy_object(Bucket=B, Key="copies/two.bin", CopySource={"Bucket": B, "Key": "copies/two.bin"}), "InvalidRequest", 400)

# --- batch delete --------------------------------------------------------------------------------
r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": "copies/one.bin"}, {"Key": "copies/two.bin"}, {"Key": "missing"}, {"Key": "bad//key"}]})
check("delete objects", sorted(d["Key"] for d in r.get("Deleted", [])) == ["copies/one.bin", "copies/two.bin", "missing"], str(r))
check("delete objects reports bad keys", [e["Key"] for e in r.get("Errors", [])] == ["bad//key"], str(r.get("Errors")))
check("deleted prefix is gone", "Contents" not in s3.list_objects_v2(Bucket=B, Prefix="copies/"))

# --- multipart -----------------------------------------------------------------------------------
def multipart(key, sizes, meta=None):
    up = s3.create_multipart_upload(Bucket=B, Key=key, Metadata=meta or {}, ContentType="application/x-mp")
    uid = up["UploadId"]
    parts, whole = [], []
    for i, n in enumerate(sizes, start=1):
        d = data(100 + i, n)
        whole.append(d)
        p = s3.upload_part(Bucket=B, Key=key, UploadId=uid, PartNumber=i, Body=d)
        check(f"{key} part {i} etag", p["ETag"].strip('"') == md5(d))
        parts.append({"PartNumber": i, "ETag": p["ETag"]})
    return uid, parts, b"".join(whole)


uid, parts, whole = multipart("mp/aligned.bin", [5 * MIB, 5 * MIB, 5 * MIB, 1234567], {"origin": "mp"})
lp = s3.list_parts(Bucket=B, Key="mp/aligned.bin", UploadId=uid)
check("list parts", [p["PartNumber"] for p in lp["Parts"]] == [1, 2, 3, 4] and lp["Parts"][3]["Size"] == 1234567)
lp = s3.list_parts(Bucket=B, Key="mp/aligned.bin", UploadId=uid, MaxParts=2)
check("list parts paged", lp["IsTruncated"] and lp["NextPartNumberMarker"] == 2)
lu = s3.list_multipart_uploads(Bucket=B)
check("list uploads", [(u["Key"], u["UploadId"]) for u in lu.get("Uploads", [])] == [("mp/aligned.bin", uid)], str(lu.get("Uploads")))
expect_error("wrong part etag", lambda: s3.complete_multipart_upload(Bucket=B, Key="mp/aligned.bin", UploadId=uid,
             MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]}), "InvalidPart", 400)
expect_error("parts out of order", lambda: s3.complete_multipart_upload(Bucket=B, Key="mp/aligned.bin", UploadId=uid,
             MultipartUpload={"Parts": [parts[1], parts[0]]}), "InvalidPartOrder", 400)
r = s3.complete_multipart_upload(Bucket=B, Key="mp/aligned.bin", UploadId=uid, MultipartUpload={"Parts": parts})
want_etag = hashlib.md5(b"".join(bytes.fromhex(p["ETag"].strip('"')) for p in parts)).hexdigest() + "-4"
check("multipart etag", r["ETag"].strip('"') == want_etag, r["ETag"])
copied = r["ResponseMetadata"]["HTTPHeaders"].get("x-trove-copied-bytes")
check("5 MiB parts complete without copying", copied == "0", str(copied))
g = s3.get_object(Bucket=B, Key="mp/aligned.bin")
check("multipart bytes", g["Body"].read() == whole)
check("multipart metadata", g["Metadata"] == {"origin": "mp"} and g["ContentType"] == "application/x-mp")
check("multipart etag on get", g["ETag"].strip('"') == want_etag)
check("upload gone after completion", "Uploads" not in s3.list_multipart_uploads(Bucket=B))
expect_error("completed upload is gone", lambda: s3.list_parts(Bucket=B, Key="mp/aligned.bin", UploadId=uid), "NoSuchUpload", 404)

uid, parts, whole = multipart("mp/odd.bin", [5 * MIB + 1, 5 * MIB + 3, 777])
r = s3.complete_multipart_upload(Bucket=B, Key="mp/odd.bin", UploadId=uid, MultipartUpload={"Parts": parts})
copied = int(r["ResponseMetadata"]["HTTPHeaders"].get("x-trove-copied-bytes", "-1"))
check("odd part sizes are copied after the first misaligned part", 0 < copied < len(whole), str(copied))
check("odd multipart bytes", s3.get_object(Bucket=B, Key="mp/odd.bin")["Body"].read() == whole)

uid, parts, _ = multipart("mp/small.bin", [100, 200])
expect_error("small non-last part", lambda: s3.complete_multipart_upload(Bucket=B, Key="mp/small.bin", UploadId=uid,
             MultipartUpload={"Parts": parts}), "EntityTooSmall", 400)
s3.abort_multipart_upload(Bucket=B, Key="mp/small.bin", UploadId=uid)
expect_error("aborted upload", lambda: s3.upload_part(Bucket=B, Key="mp/small.bin", UploadId=uid, PartNumber=1, Body=b"x"), "NoSuchUpload", 404)
expect_error("abort leaves no object", lambda: s3.head_object(Bucket=B, Key="mp/small.bin"), "404", 404)
expect_error("made-up upload id", lambda: s3.list_parts(Bucket=B, Key="k", UploadId="../../etc"), "NoSuchUpload", 404)

# A part uploaded twice: the second replaces the first.
up = s3.create_multipart_upload(Bucket=B, Key="mp/redo.bin")["UploadId"]
s3.upload_part(Bucket=B, Key="mp/redo.bin", UploadId=up, PartNumber=1, Body=b"first")
p = s3.upload_part(Bucket=B, Key="mp/redo.bin", UploadId=up, PartNumber=1, Body=b"second")
s3.complete_multipart_upload(Bucket=B, Key="mp/redo.bin", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]})
check("re-sent part replaces the old", s3.get_object(Bucket=B, Key="mp/redo.bin")["Body"].read() == b"second")

# --- concurrent PUTs of one key: one complete object wins -----------------------------------------
bodies = [data(500 + i, 6 * MIB + i) for i in range(6)]
errors = []


def put(i):
    try:
        boto3.client("s3", endpoint_url=ENDPOINT, config=CONFIG).put_object(Bucket=B, Key="race/key", Body=bodies[i])
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append(e)


threads = [threading.Thread(target=put, args=(i,)) for i in range(len(bodies))]
for t in threads:
    t.start()
for t in threads:
    t.join()
check("concurrent puts succeed", not errors, str(errors))
g = s3.get_object(Bucket=B, Key="race/key")
final = g["Body"].read()
check("one whole object wins", final in bodies and g["ETag"].strip('"') == md5(final), f"{len(final)} bytes")
check("no temporary files are listed", [o["Key"] for o in s3.list_objects_v2(Bucket=B, Prefix="race/")["Contents"]] == ["race/key"])

# --- authentication --------------------------------------------------------------------------------
bad = boto3.client("s3", endpoint_url=ENDPOINT, config=CONFIG, aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"], aws_secret_access_key="wrong-secret")
expect_error("bad signature", lambda: bad.get_object(Bucket=B, Key="empty"), "SignatureDoesNotMatch", 403)
unknown = boto3.client("s3", endpoint_url=ENDPOINT, config=CONFIG, aws_access_key_id="nobody", aws_secret_access_key="x")
code, status = error_code(lambda: unknown.list_buckets())
check("unknown access key", status == 403, f"{code} {status}")
try:
    urllib.request.urlopen(f"{ENDPOINT}/{B}/empty")
    check("anonymous refused", False, "anonymous GET succeeded")
except urllib.error.HTTPError as e:
    check("anonymous refused", e.code == 403 and b"AccessDenied" in e.read(), str(e.code))

url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "dir/obj.bin"}, ExpiresIn=300)
check("presigned get", urllib.request.urlopen(url).read() == body)
tampered = url.replace("dir/obj.bin", "dir/other.bin")
try:
    urllib.request.urlopen(tampered)
    check("tampered presigned url refused", False, "it was accepted")
except urllib.error.HTTPError as e:
    check("tampered presigned url refused", e.code == 403, str(e.code))
put_url = s3.generate_presigned_url("put_object", Params={"Bucket": B, "Key": "presigned/put.bin"}, ExpiresIn=300)
urllib.request.urlopen(urllib.request.Request(put_url, data=b"via presigned put", method="PUT"))
check("presigned put", s3.get_object(Bucket=B, Key="presigned/put.bin")["Body"].read() == b"via presigned put")

# --- malformed requests ----------------------------------------------------------------------------
creds = boto3.Session().get_credentials()


def signed(method, path, body_bytes, query=""):
    req = AWSRequest(method=method, url=f"{ENDPOINT}{path}{query}", data=body_bytes,
                     headers={"x-amz-content-sha256": hashlib.sha256(body_bytes).hexdigest(),
                              "Content-MD5": base64.b64encode(hashlib.md5(body_bytes).digest()).decode()})
    SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    u = urllib.parse.urlsplit(ENDPOINT)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request(method, f"{path}{query}", body=body_bytes, headers=dict(req.headers.items()))
    resp = conn.getresponse()
    return resp.status, resp.read()


status, text = signed("POST", f"/{B}", b"<Delete><Object><Key>x</Key></Obj", "?delete")
check("malformed xml", status == 400 and b"MalformedXML" in text, f"{status} {text[:200]!r}")
status, text = signed("POST", f"/{B}/mp/x.bin", b"not xml at all", "?uploadId=" + "0" * 32)
check("malformed completion", status == 400 or status == 404, f"{status} {text[:200]!r}")
u = urllib.parse.urlsplit(ENDPOINT)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
try:
    conn.request("GET", f"/{B}/empty", headers={"X-Huge": "h" * (200 * 1024)})
    st = conn.getresponse().status
except (ConnectionError, http.client.HTTPException) as e:
    st = str(e)
check("oversized header refused", st == 431 or isinstance(st, str), str(st))

# --- TLS and anonymous reads (second gateway) -------------------------------------------------------
tls = os.environ.get("S3_TLS_ENDPOINT")
if tls:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    check("anonymous read over tls", urllib.request.urlopen(f"{tls}/{B}/dir/obj.bin", context=ctx).read() == body)
    try:
        urllib.request.urlopen(urllib.request.Request(f"{tls}/{B}/anon.bin", data=b"x", method="PUT"), context=ctx)
        check("anonymous write refused over tls", False, "accepted")
    except urllib.error.HTTPError as e:
        check("anonymous write refused over tls", e.code == 403, str(e.code))
    ts3 = boto3.client("s3", endpoint_url=tls, config=CONFIG, verify=False)
    ts3.put_object(Bucket=B, Key="tls/signed.bin", Body=b"over tls")
    check("signed write over tls", s3.get_object(Bucket=B, Key="tls/signed.bin")["Body"].read() == b"over tls")

# --- bucket removal --------------------------------------------------------------------------------
expect_error("delete non-empty bucket", lambda: s3.delete_bucket(Bucket=B), "BucketNotEmpty", 409)
s3.create_bucket(Bucket="boto-empty")
s3.delete_bucket(Bucket="boto-empty")
expect_error("deleted bucket is gone", lambda: s3.head_bucket(Bucket="boto-empty"), "404", 404)

print(checks.summary())
