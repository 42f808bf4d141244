"""Bucket versioning as boto3 sees it: the state (unset, Enabled, Suspended), version ids on
PUT, copy and multipart completion, GET and HEAD of a version, delete markers and what GET
answers behind one, deleting versions and markers for good (and the next newest version
coming back), restoring an old version by copying it, null versions while suspended,
DeleteObjects with version ids, ListObjectVersions with prefix, delimiter and pages, concurrent
writers losing no version, and a bucket with versions refusing deletion until they are gone.

Run by crates/e2e/tests/s3.rs against a real `trove s3`; S3_ENDPOINT and the AWS_* variables
name it. Prints "N passed, 0 failed" at the end; any failure raises.
"""

import hashlib
import os
import threading

import boto3
from botocore.config import Config

import checks
from checks import check, expect_error, failure

ENDPOINT = os.environ["S3_ENDPOINT"]
CONFIG = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")
s3 = boto3.client("s3", endpoint_url=ENDPOINT, config=CONFIG)
MIB = 1 << 20
B = "versioned"


def data(seed, n=1000):
    block = hashlib.sha256(str(seed).encode()).digest() * 64
    return (block * (n // len(block) + 1))[:n]


def body(key, **kw):
    return s3.get_object(Bucket=B, Key=key, **kw)["Body"].read()


def all_versions(prefix="", page=1000, **kw):
    """Every version and delete marker, following the pages."""
    out, markers, pages = [], [], 0
    args = {"Bucket": B, "Prefix": prefix, "MaxKeys": page, **kw}
    while True:
        r = s3.list_object_versions(**args)
        pages += 1
        out += r.get("Versions", [])
        markers += r.get("DeleteMarkers", [])
        if not r["IsTruncated"]:
            return out, markers, pages
        args["KeyMarker"] = r["NextKeyMarker"]
        args.pop("VersionIdMarker", None)
        if r.get("NextVersionIdMarker"):
            args["VersionIdMarker"] = r["NextVersionIdMarker"]


s3.create_bucket(Bucket=B)
check("a new bucket has no versioning state", "Status" not in s3.get_bucket_versioning(Bucket=B))
s3.put_object(Bucket=B, Key="doc.txt", Body=data(0))
put = s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Enabled"})
check("versioning enabled", s3.get_bucket_versioning(Bucket=B)["Status"] == "Enabled")

# Versions made by PUT.
v1 = s3.put_object(Bucket=B, Key="doc.txt", Body=data(1))["VersionId"]
v2 = s3.put_object(Bucket=B, Key="doc.txt", Body=data(2))["VersionId"]
check("PUT answers distinct version ids", v1 != v2 and len(v1) == 24 and v1 < v2, f"{v1} {v2}")
got = s3.get_object(Bucket=B, Key="doc.txt")
check("GET reads the newest version and names it", got["Body"].read() == data(2) and got["VersionId"] == v2)
check("GET of an older version", body("doc.txt", VersionId=v1) == data(1))
check("GET of the version written before versioning (null)", body("doc.txt", VersionId="null") == data(0))
head = s3.head_object(Bucket=B, Key="doc.txt", VersionId=v1)
check("HEAD of an older version", head["ContentLength"] == 1000 and head["VersionId"] == v1)
expect_error("a malformed version id", lambda: s3.get_object(Bucket=B, Key="doc.txt", VersionId="nope"), "InvalidArgument", 400)
expect_error(
    "a version that does not exist",
    lambda: s3.get_object(Bucket=B, Key="doc.txt", VersionId="0" * 24),
    "NoSuchVersion",
    404,
)
versions, markers, _ = all_versions("doc")
check(
    "three versions listed newest first, the newest the latest",
    [(v["VersionId"], v["IsLatest"]) for v in versions] == [(v2, True), (v1, False), ("null", False)] and not markers,
    f"{versions}",
)
check("listed sizes and ETags", all(v["Size"] == 1000 and len(v["ETag"]) == 34 for v in versions), f"{versions}")

# Delete markers.
d = s3.delete_object(Bucket=B, Key="doc.txt")
marker = d["VersionId"]
check("DELETE leaves a delete marker", d["DeleteMarker"] and len(marker) == 24, f"{d}")
code, st, resp = failure(lambda: s3.get_object(Bucket=B, Key="doc.txt"))
headers = resp["ResponseMetadata"]["HTTPHeaders"] if resp else {}
check(
    "GET behind a delete marker: 404 saying so",
    code == "NoSuchKey" and st == 404 and headers.get("x-amz-delete-marker") == "true",
    f"{code} {st} {headers}",
)
expect_error(
    "GET of the delete marker itself", lambda: s3.get_object(Bucket=B, Key="doc.txt", VersionId=marker), "MethodNotAllowed", 405
)
check("older versions still readable", body("doc.txt", VersionId=v2) == data(2))
check("the key is gone from plain listings", s3.list_objects_v2(Bucket=B).get("KeyCount") == 0)
versions, markers, _ = all_versions("doc")
check(
    "the marker is the latest version",
    [(m["VersionId"], m["IsLatest"]) for m in markers] == [(marker, True)] and not any(v["IsLatest"] for v in versions),
    f"{markers} {versions}",
)
d = s3.delete_object(Bucket=B, Key="doc.txt", VersionId=marker)
check("deleting the marker by id", d["DeleteMarker"] and d["VersionId"] == marker, f"{d}")
check("the newest version is back", body("doc.txt") == data(2))

# Deleting the current version for good brings the next newest back.
s3.delete_object(Bucket=B, Key="doc.txt", VersionId=v2)
got = s3.get_object(Bucket=B, Key="doc.txt")
check("deleting the current version restores the previous one", got["Body"].read() == data(1) and got["VersionId"] == v1)
expect_error("the deleted version is gone", lambda: s3.get_object(Bucket=B, Key="doc.txt", VersionId=v2), "NoSuchVersion", 404)

# Restoring by copy.
c = s3.copy_object(Bucket=B, Key="doc.txt", CopySource={"Bucket": B, "Key": "doc.txt", "VersionId": "null"})
check("copying the null version back makes a new version", c["CopySourceVersionId"] == "null" and c["VersionId"] > v1, f"{c}")
check("the copy is current", body("doc.txt") == data(0))
check("the copied-over version is kept", body("doc.txt", VersionId=v1) == data(1))

# Multipart completion makes a version too.
up = s3.create_multipart_upload(Bucket=B, Key="doc.txt")["UploadId"]
parts = []
for n in (1, 2):
    e = s3.upload_part(Bucket=B, Key="doc.txt", UploadId=up, PartNumber=n, Body=data(10 + n, 5 * MIB))["ETag"]
    parts.append({"PartNumber": n, "ETag": e})
done = s3.complete_multipart_upload(Bucket=B, Key="doc.txt", UploadId=up, MultipartUpload={"Parts": parts})
check("multipart completion answers a version id", len(done.get("VersionId", "")) == 24, f"{done}")
check("the assembled object is current", body("doc.txt") == data(11, 5 * MIB) + data(12, 5 * MIB))
check("the version it replaced is kept", body("doc.txt", VersionId=c["VersionId"]) == data(0))

# Concurrent writers: every PUT's version is kept.
ids, errors = [], []


def writer(i):
    try:
        ids.append((s3.put_object(Bucket=B, Key="race", Body=data(100 + i))["VersionId"], i))
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append(repr(e))


threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check("eight concurrent PUTs succeed", not errors and len(ids) == 8, f"{errors}")
versions, _, _ = all_versions("race")
check("all eight versions are kept", sorted(v["VersionId"] for v in versions) == sorted(i for i, _ in ids), f"{versions}")
check("each version holds what its PUT wrote", all(body("race", VersionId=v) == data(100 + i) for v, i in ids))

# Pages, prefixes and delimiters.
for k in ("p/a", "p/b", "q"):
    for n in range(3):
        s3.put_object(Bucket=B, Key=k, Body=data(n))
whole, _, _ = all_versions("")
paged, _, pages = all_versions("", page=2)
check(
    "pages of two give the same listing",
    [(v["Key"], v["VersionId"]) for v in paged] == [(v["Key"], v["VersionId"]) for v in whole] and pages > 5,
    f"{pages} pages",
)
r = s3.list_object_versions(Bucket=B, Delimiter="/")
check(
    "a delimiter groups keys into prefixes",
    [p["Prefix"] for p in r.get("CommonPrefixes", [])] == ["p/"] and {v["Key"] for v in r["Versions"]} == {"doc.txt", "q", "race"},
    f"{r.get('CommonPrefixes')} {[v['Key'] for v in r['Versions']]}",
)
r = s3.list_object_versions(Bucket=B, Prefix="p/")
check("a prefix selects its keys", {v["Key"] for v in r["Versions"]} == {"p/a", "p/b"} and len(r["Versions"]) == 6)

# Suspended: writes make the one null version.
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Suspended"})
check("versioning suspended", s3.get_bucket_versioning(Bucket=B)["Status"] == "Suspended")
s3.put_object(Bucket=B, Key="q", Body=b"null one")
s3.put_object(Bucket=B, Key="q", Body=b"null two")
versions, _, _ = all_versions("q")
nulls = [v for v in versions if v["VersionId"] == "null"]
check(
    "while suspended a key has one null version, the latest, and keeps its older ones",
    len(nulls) == 1 and nulls[0]["IsLatest"] and len(versions) == 4,
    f"{versions}",
)
check("the null version holds the last write", body("q", VersionId="null") == b"null two")
d = s3.delete_object(Bucket=B, Key="q")
check("a delete while suspended leaves a null marker", d["DeleteMarker"] and d.get("VersionId") in (None, "null"), f"{d}")
s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Enabled"})

# DeleteObjects with version ids, then the bucket empties.
expect_error("a bucket with versions cannot be deleted", lambda: s3.delete_bucket(Bucket=B), "BucketNotEmpty", 409)
versions, markers, _ = all_versions("")
entries = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in versions + markers]
for i in range(0, len(entries), 1000):
    r = s3.delete_objects(Bucket=B, Delete={"Objects": entries[i : i + 1000]})
    check("DeleteObjects removes versions by id", not r.get("Errors") and len(r["Deleted"]) == len(entries[i : i + 1000]), f"{r.get('Errors')}")
versions, markers, _ = all_versions("")
check("nothing is left", not versions and not markers, f"{versions} {markers}")
check("no object is left either", s3.list_objects_v2(Bucket=B).get("KeyCount") == 0)
s3.delete_bucket(Bucket=B)
check("the emptied bucket is deleted", B not in [b["Name"] for b in s3.list_buckets()["Buckets"]])

print(checks.summary())
