"""Looks at and changes objects of an S3 bucket with boto3, for the object pool tests.

Usage: bucket.py list BUCKET PREFIX | get BUCKET KEY OUT | put BUCKET KEY IN
Endpoint and key from S3_ENDPOINT, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
"""

import os
import sys

import boto3
from botocore.config import Config

s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["S3_ENDPOINT"],
    region_name="garage",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
)
cmd, bucket = sys.argv[1], sys.argv[2]
if cmd == "list":
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=sys.argv[3]):
        for obj in page.get("Contents", []):
            print(obj["Key"], obj["Size"])
elif cmd == "get":
    with open(sys.argv[4], "wb") as f:
        f.write(s3.get_object(Bucket=bucket, Key=sys.argv[3])["Body"].read())
elif cmd == "put":
    with open(sys.argv[4], "rb") as f:
        s3.put_object(Bucket=bucket, Key=sys.argv[3], Body=f.read())
else:
    sys.exit(f"unknown command {cmd}")
