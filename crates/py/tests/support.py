"""Shared setup of the package's tests: the cluster under test (TROVE_CLUSTER), the `trove`
binary (TROVE_BIN) and a fresh directory on the cluster for each test module."""

import os
import subprocess
import uuid

import trove


def client() -> trove.Client:
    return trove.Client()


def fresh_dir(prefix: str) -> str:
    path = f"/pytest-{prefix}-{uuid.uuid4().hex[:8]}"
    client().makedirs(path)
    return path


def trove_cli(*args: str) -> str:
    """Runs the `trove` binary against the cluster under test; fails with its stderr."""
    out = subprocess.run([os.environ["TROVE_BIN"], *args], capture_output=True, text=True, env=os.environ)
    if out.returncode != 0:
        raise AssertionError(f"trove {' '.join(args)} failed: {out.stderr}")
    return out.stdout
