"""Two tenants through one S3 gateway, with boto3: every cross-tenant attempt is refused or
sees only its own tenant, and inside a tenant, POSIX permissions (set by canned ACLs) decide
what another user may do.

Environment: S3_ENDPOINT; ALICE, BOB (tenant acme) and CAROL (tenant globex), each
"ACCESS_KEY:SECRET". Prints "ok" and what it checked; fails with the first surprise.
"""

import json
import os
import sys
import urllib.error
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["S3_ENDPOINT"]


def client(who):
    access, secret = os.environ[who].split(":", 1)
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


alice, bob, carol = client("ALICE"), client("BOB"), client("CAROL")
checked = []


def refused(what, call, *codes, says=None):
    """Expects `call` to fail with one of `codes` (and a message holding `says`, if given)."""
    try:
        out = call()
    except ClientError as e:
        code, message = e.response["Error"]["Code"], e.response["Error"].get("Message") or ""
        if code not in codes:
            sys.exit(f"{what}: expected {codes}, got {code}: {message}")
        if says is not None and says not in message:
            sys.exit(f"{what}: expected a message saying {says!r}, got {code}: {message}")
        checked.append(f"{what}: {code}")
        return
    sys.exit(f"{what}: expected {codes}, but it succeeded: {out}")


SECRET = b"acme's secret bytes " * 1000

# Each tenant has its own namespace: both may have a bucket called "data".
alice.create_bucket(Bucket="data")
alice.create_bucket(Bucket="acme-only")
alice.put_object(Bucket="data", Key="a/x.bin", Body=SECRET)
alice.put_object(Bucket="acme-only", Key="k", Body=SECRET)
carol.create_bucket(Bucket="data")
carol.put_object(Bucket="data", Key="globex.txt", Body=b"carol's")

# Carol sees her tenant only: guessing keys, buckets and upload ids finds nothing of acme's.
names = [b["Name"] for b in carol.list_buckets()["Buckets"]]
assert names == ["data"], names
keys = [o["Key"] for o in carol.list_objects_v2(Bucket="data").get("Contents", [])]
assert keys == ["globex.txt"], keys
refused("carol GET data/a/x.bin", lambda: carol.get_object(Bucket="data", Key="a/x.bin"), "NoSuchKey")
refused("carol HEAD data/a/x.bin", lambda: carol.head_object(Bucket="data", Key="a/x.bin"), "404")
refused("carol GET acme-only/k", lambda: carol.get_object(Bucket="acme-only", Key="k"), "NoSuchBucket")
refused("carol HEAD acme-only", lambda: carol.head_bucket(Bucket="acme-only"), "404")
refused("carol LIST acme-only", lambda: carol.list_objects_v2(Bucket="acme-only"), "NoSuchBucket")
refused("carol PUT acme-only/k", lambda: carol.put_object(Bucket="acme-only", Key="k", Body=b"x"), "NoSuchBucket")
refused("carol DELETE acme-only", lambda: carol.delete_bucket(Bucket="acme-only"), "NoSuchBucket")
refused(
    "carol copies acme-only/k",
    lambda: carol.copy_object(Bucket="data", Key="stolen", CopySource={"Bucket": "acme-only", "Key": "k"}),
    "NoSuchBucket",
)
# Carol's key cannot reach acme's data by presigned URL either.
url = carol.generate_presigned_url("get_object", Params={"Bucket": "acme-only", "Key": "k"}, ExpiresIn=300)
try:
    urllib.request.urlopen(url).read()
    sys.exit("carol's presigned URL read acme's object")
except urllib.error.HTTPError as e:
    body = e.read()
    assert e.code == 404 and b"NoSuchBucket" in body and SECRET[:20] not in body, (e.code, body)
    checked.append("carol presigned GET acme-only/k: 404 NoSuchBucket")
# Multipart uploads: alice's upload is invisible and unusable to carol.
up = alice.create_multipart_upload(Bucket="data", Key="big.bin")["UploadId"]
refused("carol lists acme-only's uploads", lambda: carol.list_multipart_uploads(Bucket="acme-only"), "NoSuchBucket")
mine = carol.list_multipart_uploads(Bucket="data").get("Uploads", [])
assert mine == [], mine
refused(
    "carol uploads a part into alice's upload",
    lambda: carol.upload_part(Bucket="data", Key="big.bin", UploadId=up, PartNumber=1, Body=b"x"),
    "NoSuchUpload",
)
refused("carol lists alice's parts", lambda: carol.list_parts(Bucket="data", Key="big.bin", UploadId=up), "NoSuchUpload")
# Alice's presigned URL, by contrast, is alice's grant and works.
url = alice.generate_presigned_url("get_object", Params={"Bucket": "acme-only", "Key": "k"}, ExpiresIn=300)
assert urllib.request.urlopen(url).read() == SECRET

# Browser POST uploads: a form signed with a configured key (the gateway's own) is taken in the
# root namespace; one signed with a cluster key is refused, since the front chooses a request's
# namespace from its URL and headers, and a form's key is in its body.
def post_form(form, content):
    boundary = "trove" + os.urandom(8).hex()
    body = b""
    for name, value in form["fields"].items():
        body += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
    body += f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\n'.encode()
    body += content + f"\r\n--{boundary}--\r\n".encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(form["url"], data=body, headers=headers, method="POST")) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


ops = boto3.client(
    "s3", endpoint_url=ENDPOINT, region_name="us-east-1", config=Config(s3={"addressing_style": "path"})
)
ops.create_bucket(Bucket="ops-posts")
status, text = post_form(ops.generate_presigned_post("ops-posts", "form.txt"), b"posted")
assert status in (200, 204), (status, text)
assert ops.get_object(Bucket="ops-posts", Key="form.txt")["Body"].read() == b"posted"
status, text = post_form(alice.generate_presigned_post("data", "form.txt"), b"posted")
assert status == 403 and b"browser POST form" in text, (status, text)
refused("the POST form left nothing", lambda: alice.head_object(Bucket="data", Key="form.txt"), "404")
checked.append("browser POST: a configured key's form stored, a cluster key's refused (403)")

# Inside acme: bob is in the tenant's group, but alice's buckets are private (0700).
refused("bob GET data/a/x.bin (private bucket)", lambda: bob.get_object(Bucket="data", Key="a/x.bin"), "AccessDenied")
refused("bob LIST data (private bucket)", lambda: bob.list_objects_v2(Bucket="data"), "AccessDenied")
refused("bob PUT data/b (private bucket)", lambda: bob.put_object(Bucket="data", Key="b", Body=b"x"), "AccessDenied")
assert [b["Name"] for b in bob.list_buckets()["Buckets"]] == [], "bob lists none of alice's private buckets"
refused("bob sets alice's bucket ACL", lambda: bob.put_bucket_acl(Bucket="data", ACL="public-read"), "AccessDenied")
refused("bob deletes alice's bucket", lambda: bob.delete_bucket(Bucket="acme-only"), "AccessDenied")
refused("bob uses alice's upload", lambda: bob.list_parts(Bucket="data", Key="big.bin", UploadId=up), "AccessDenied")
# public-read opens the bucket to the tenant (0755): bob reads and lists, and still may not write.
alice.put_bucket_acl(Bucket="data", ACL="public-read")
acl = alice.get_bucket_acl(Bucket="data")
assert acl["Owner"]["ID"] == "alice", acl
assert any(g["Permission"] == "READ" for g in acl["Grants"]), acl
assert bob.get_object(Bucket="data", Key="a/x.bin")["Body"].read() == SECRET
assert [o["Key"] for o in bob.list_objects_v2(Bucket="data")["Contents"]] == ["a/x.bin"]
refused("bob PUT into a public-read bucket", lambda: bob.put_object(Bucket="data", Key="b", Body=b"x"), "AccessDenied")
refused("bob DELETE in a public-read bucket", lambda: bob.delete_object(Bucket="data", Key="a/x.bin"), "AccessDenied")
# An object written private (0600) stays alice's even in a readable bucket.
alice.put_object(Bucket="data", Key="diary.txt", Body=b"private", ACL="private")
refused("bob GET a private object", lambda: bob.get_object(Bucket="data", Key="diary.txt"), "AccessDenied")
oacl = alice.get_object_acl(Bucket="data", Key="diary.txt")
assert len(oacl["Grants"]) == 1 and oacl["Owner"]["ID"] == "alice", oacl
# bob's own bucket is his; public-read-write lets alice write into it.
bob.create_bucket(Bucket="bobs", ACL="public-read-write")
alice.put_object(Bucket="bobs", Key="from-alice", Body=b"hi")
assert bob.get_object(Bucket="bobs", Key="from-alice")["Body"].read() == b"hi"
# The tenant's directory is sticky: alice may write into bob's bucket but not delete it (the
# refusal comes before the bucket's content is looked at: it is not BucketNotEmpty).
refused("alice deletes bob's bucket (sticky tenant directory)", lambda: alice.delete_bucket(Bucket="bobs"), "AccessDenied")
refused("an ACL POSIX modes cannot say", lambda: alice.put_object_acl(Bucket="data", Key="diary.txt", ACL="bucket-owner-read"), "NotImplemented")

# Bucket policies: only the bucket's owner sets them; a Deny binds the owner too.
deny = {
    "Version": "2012-10-17",
    "Statement": [
        {"Sid": "BobNotInA", "Effect": "Deny", "Principal": {"AWS": ["arn:aws:iam::acme:user/bob"]},
         "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/a/*"},
        {"Sid": "NoDeletes", "Effect": "Deny", "Principal": "*", "Action": ["s3:DeleteObject"],
         "Resource": "arn:aws:s3:::data/*"},
    ],
}
refused("bob sets alice's bucket policy", lambda: bob.put_bucket_policy(Bucket="data", Policy=json.dumps(deny)), "AccessDenied")
cond = {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/*",
                       "Condition": {"IpAddress": {"aws:SourceIp": "127.0.0.1/32"}}}]}
refused("a policy with a Condition", lambda: alice.put_bucket_policy(Bucket="data", Policy=json.dumps(cond)), "MalformedPolicy")
refused("no policy yet", lambda: alice.get_bucket_policy(Bucket="data"), "NoSuchBucketPolicy")
alice.put_bucket_policy(Bucket="data", Policy=json.dumps(deny))
assert json.loads(alice.get_bucket_policy(Bucket="data")["Policy"]) == deny
alice.put_object(Bucket="data", Key="scratch.txt", Body=b"x")
refused("bob GET under a denied prefix", lambda: bob.get_object(Bucket="data", Key="a/x.bin"), "AccessDenied")
assert bob.get_object(Bucket="data", Key="scratch.txt")["Body"].read() == b"x"
refused("alice DELETE while deletes are denied", lambda: alice.delete_object(Bucket="data", Key="scratch.txt"), "AccessDenied")
refused(
    "alice DeleteObjects while deletes are denied",
    lambda: alice.delete_objects(Bucket="data", Delete={"Objects": [{"Key": "scratch.txt"}]}),
    "AccessDenied",
)
assert alice.get_object(Bucket="data", Key="a/x.bin")["Body"].read() == SECRET, "the deny names bob only"
alice.delete_bucket_policy(Bucket="data")
alice.delete_object(Bucket="data", Key="scratch.txt")
assert bob.get_object(Bucket="data", Key="a/x.bin")["Body"].read() == SECRET

# Allow statements confine everyone but the bucket's owner to what they name, and grant nothing
# that POSIX modes refuse (the mount's answer): an S3 request must pass both.
alice.put_object(Bucket="data", Key="b/y.bin", Body=b"not for bob")
allow = {
    "Statement": [
        {"Sid": "BobInA", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::acme:user/bob"},
         "Action": ["s3:GetObject", "s3:PutObject"], "Resource": "arn:aws:s3:::data/a/*"},
        {"Sid": "BobLists", "Effect": "Allow", "Principal": {"AWS": "bob"}, "Action": "s3:ListBucket",
         "Resource": "arn:aws:s3:::data"},
        {"Sid": "BobDiary", "Effect": "Allow", "Principal": {"AWS": "bob"}, "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::data/diary.txt"},
    ]
}
refused("bob sets an Allow policy on alice's bucket", lambda: bob.put_bucket_policy(Bucket="data", Policy=json.dumps(allow)), "AccessDenied")
alice.put_bucket_policy(Bucket="data", Policy=json.dumps(allow))
assert bob.get_object(Bucket="data", Key="a/x.bin")["Body"].read() == SECRET
assert "b/y.bin" in [o["Key"] for o in bob.list_objects_v2(Bucket="data")["Contents"]]
refused("bob GET where the mode lets him but no Allow does", lambda: bob.get_object(Bucket="data", Key="b/y.bin"),
        "AccessDenied", says="not allowed by the policy of bucket data")
refused("bob HEAD where no Allow does", lambda: bob.head_object(Bucket="data", Key="b/y.bin"), "403")
refused("bob PUT an Allow grants but the bucket's mode refuses", lambda: bob.put_object(Bucket="data", Key="a/new", Body=b"x"), "AccessDenied")
refused("bob GET of a private object an Allow names", lambda: bob.get_object(Bucket="data", Key="diary.txt"), "AccessDenied")
refused("bob DeleteObjects without an Allow of every key",
        lambda: bob.delete_objects(Bucket="data", Delete={"Objects": [{"Key": "a/x.bin"}]}), "AccessDenied")
# A copy reads its source: the source bucket's policy judges that read.
refused("bob copies what no Allow lets him read into his own bucket",
        lambda: bob.copy_object(Bucket="bobs", Key="stolen", CopySource={"Bucket": "data", "Key": "b/y.bin"}),
        "AccessDenied", says="s3:GetObject on arn:aws:s3:::data/b/y.bin")
up_copy = bob.create_multipart_upload(Bucket="bobs", Key="stolen-parts")["UploadId"]
refused("bob UploadPartCopy from what no Allow lets him read",
        lambda: bob.upload_part_copy(Bucket="bobs", Key="stolen-parts", UploadId=up_copy, PartNumber=1,
                                     CopySource={"Bucket": "data", "Key": "b/y.bin"}), "AccessDenied")
bob.abort_multipart_upload(Bucket="bobs", Key="stolen-parts", UploadId=up_copy)
bob.copy_object(Bucket="bobs", Key="copied", CopySource={"Bucket": "data", "Key": "a/x.bin"})
assert bob.get_object(Bucket="bobs", Key="copied")["Body"].read() == SECRET
refused("bob HEAD of a key he cannot read, by copy", lambda: bob.head_object(Bucket="bobs", Key="stolen"), "404")
# The owner is not confined: alice writes and reads outside every Allow.
alice.put_object(Bucket="data", Key="c/z.bin", Body=b"z")
assert alice.get_object(Bucket="data", Key="b/y.bin")["Body"].read() == b"not for bob"
done = alice.delete_objects(Bucket="data", Delete={"Objects": [{"Key": "c/z.bin"}]})
assert not done.get("Errors") and [d["Key"] for d in done["Deleted"]] == ["c/z.bin"], done
refused("the owner's DeleteObjects left the key", lambda: alice.head_object(Bucket="data", Key="c/z.bin"), "404")
alice.delete_bucket_policy(Bucket="data")
assert bob.get_object(Bucket="data", Key="b/y.bin")["Body"].read() == b"not for bob"
bob.delete_object(Bucket="bobs", Key="copied")
alice.delete_object(Bucket="data", Key="b/y.bin")
checked.append("bucket policies: deny by user and prefix, deny deletes to all (owner included); Allow confines "
               "others (not the owner) and grants nothing the modes refuse; copy sources judged by their bucket's policy")

etag = alice.upload_part(Bucket="data", Key="big.bin", UploadId=up, PartNumber=1, Body=b"multipart " * 100)["ETag"]
alice.complete_multipart_upload(
    Bucket="data", Key="big.bin", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}
)
assert bob.get_object(Bucket="data", Key="big.bin")["Body"].read() == b"multipart " * 100
print("ok")
for line in checked:
    print(line)
