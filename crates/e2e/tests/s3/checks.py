"""What the S3 check scripts in this directory share: a check that counts and prints each pass,
and the S3 error a boto3 call fails with. A failed check raises, so a script that reaches its
summary passed everything.
"""

from botocore.exceptions import ClientError

passed = 0


def check(name, cond, detail=""):
    global passed
    if not cond:
        raise AssertionError(f"{name}: {detail}")
    passed += 1
    print(f"ok {name}", flush=True)


def failure(fn):
    """The S3 error code, HTTP status and whole response `fn` fails with; (None, 200, None) when
    it succeeds."""
    try:
        fn()
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"], e.response
    return None, 200, None


def error_code(fn):
    """The S3 error code and HTTP status `fn` fails with; (None, 200) when it succeeds."""
    code, status, _ = failure(fn)
    return code, status


def expect_error(name, fn, code, status=None):
    got, st = error_code(fn)
    check(name, got == code and (status is None or st == status), f"expected {code} {status}, got {got} {st}")


def summary():
    """The last line every script prints; the Rust tests look for it."""
    return f"{passed} passed, 0 failed"
