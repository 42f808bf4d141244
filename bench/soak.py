#!/usr/bin/env python3
"""Kill-anything soak of a local Trove cluster (started by bench/soak.sh, which documents it).

Owns the workload, the killer and the final check. Writers and readers work through the FUSE
mount and the S3 gateway on the same files while a killer thread kills (SIGKILL) and restarts
storage nodes, the metadata service, the mount and the gateway. Every worker keeps a model of
its own files: for each name, the contents it may hold now. An operation that succeeded leaves
one possibility (the data written, or nothing after a delete); one that failed leaves every
outcome the contract allows (an S3 PUT: the old object or the new one, whole; a write through
the mount: the old file, or a prefix of the new data, never bytes that were not written; a
rename or delete: either side). Reads during the run must return exactly what the model
says; at the end, with everything restarted, every file must hold one of its possibilities,
bit for bit, and no process may have panicked.
"""

import argparse
import errno
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib

import boto3
import botocore.config
import botocore.exceptions

BUCKET = "soak"
SMALL_BYTES_MAX = 256 << 10
LARGE_BYTES_MAX = 24 << 20
NAMES_PER_WORKER_MAX = 40
# Storage nodes down at once: the parity of 4+2, so acknowledged data stays readable.
NODES_DOWN_MAX = 2


# The spawner's program: runs each command it is sent (one JSON list per line) and answers with
# its exit status and output (one JSON list per line).
SPAWNER = r"""
import json, subprocess, sys
for line in sys.stdin:
    p = subprocess.run(json.loads(line), capture_output=True, text=True)
    print(json.dumps([p.returncode, p.stdout, p.stderr]), flush=True)
"""


class Spawner:
    """Runs the killer's commands from a process started before any worker opened a file.

    A child started from this process inherits, until it execs, every descriptor the workers
    have open at that moment, files on the mount among them, and closing those sends the mount
    a FLUSH that waits for the metadata service: with the service killed, a plain `trove
    --version` started from here took up to 90 s. The spawner's children inherit nothing of the
    workers'."""

    class Result:
        def __init__(self, returncode, stdout, stderr):
            self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __init__(self):
        self.lock = threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def run(self, argv):
        with self.lock:
            self.proc.stdin.write(json.dumps(argv) + "\n")
            self.proc.stdin.flush()
            return Spawner.Result(*json.loads(self.proc.stdout.readline()))

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def content(seed, size):
    return random.Random(seed).randbytes(size)


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {}
        self.first = {}  # key -> seconds into the run when it was first counted
        self.started = time.time()

    def add(self, key, n=1):
        with self.lock:
            self.c[key] = self.c.get(key, 0) + n
            self.first.setdefault(key, round(time.time() - self.started, 1))

    def firsts(self):
        with self.lock:
            return dict(sorted(self.first.items(), key=lambda kv: kv[1]))

    def snapshot(self):
        with self.lock:
            return dict(sorted(self.c.items()))


class Gate:
    """Mount operations share it; a remount holds it alone, so that no operation runs on the
    bare mount point directory between the unmount and the new mount (a write there would land
    on the local disk and vanish under the next mount)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.users = 0
        self.closed = False

    def shared(self):
        gate = self

        class Shared:
            def __enter__(self):
                with gate.cond:
                    gate.cond.wait_for(lambda: not gate.closed)
                    gate.users += 1

            def __exit__(self, *exc):
                with gate.cond:
                    gate.users -= 1
                    gate.cond.notify_all()

        return Shared()

    def exclusive(self):
        gate = self

        class Exclusive:
            def __enter__(self):
                with gate.cond:
                    gate.cond.wait_for(lambda: not gate.closed)
                    gate.closed = True
                    gate.cond.wait_for(lambda: gate.users == 0)

            def __exit__(self, *exc):
                with gate.cond:
                    gate.closed = False
                    gate.cond.notify_all()

        return Exclusive()


class Soak:
    def __init__(self, args):
        self.args = args
        self.trove = args.trove
        self.dir = args.cluster
        self.mnt = args.mount
        self.stop = threading.Event()
        self.counts = Counts()
        self.errors = Counts()
        self.failures = []  # verification failures: the point of the run
        self.failures_lock = threading.Lock()
        self.mount_proc = None
        self.s3_proc = None
        self.s3_port = free_port()
        self.down = {}  # storage node -> when to restart it
        self.proc_lock = threading.Lock()
        self.gate = Gate()
        self.slowest = {}  # victim -> most seconds its kill and restart took
        self.kill_log = []
        self.rng = random.Random(args.seed)
        self.logs = os.path.join(self.dir, "logs")
        self.spawner = Spawner()

    # -- processes -------------------------------------------------------------------------

    def run_trove(self, *args, check=True):
        p = self.spawner.run([self.trove, *args])
        if check and p.returncode != 0:
            raise RuntimeError(f"trove {' '.join(args)}: {p.stderr.strip()}")
        return p

    def state(self):
        with open(os.path.join(self.dir, "cluster.toml"), "rb") as f:
            return tomllib.load(f)

    def start_mount(self):
        log = open(os.path.join(self.logs, "soak-mount.log"), "ab")
        self.mount_proc = subprocess.Popen(
            [self.trove, "mount", "--cluster", self.dir, self.mnt],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, "TROVE_LOG": "warn"},
        )
        deadline = time.time() + 60
        while not os.path.ismount(self.mnt):
            if self.mount_proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("trove mount did not come up; see logs/soak-mount.log")
            time.sleep(0.05)

    def kill_mount(self):
        if self.mount_proc is not None:
            self.mount_proc.kill()
            self.mount_proc.wait()
        # The kernel keeps a dead FUSE mount until it is unmounted.
        subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)

    def start_s3(self):
        log = open(os.path.join(self.logs, "soak-s3.log"), "ab")
        self.s3_proc = subprocess.Popen(
            [
                self.trove, "s3", "--cluster", self.dir, "--listen", f"127.0.0.1:{self.s3_port}",
                "--access-key", "soak", "--secret-key", "soak-secret-0123456789",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, "TROVE_LOG": "warn"},
        )
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.s3_port), timeout=1).close()
                return
            except OSError:
                if self.s3_proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("trove s3 did not come up; see logs/soak-s3.log")
                time.sleep(0.05)

    def kill_s3(self):
        if self.s3_proc is not None:
            self.s3_proc.kill()
            self.s3_proc.wait()

    def s3(self):
        cfg = botocore.config.Config(
            retries={"max_attempts": 1},
            connect_timeout=5,
            read_timeout=60,
            s3={"addressing_style": "path"},
        )
        return boto3.session.Session().client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.s3_port}",
            aws_access_key_id="soak",
            aws_secret_access_key="soak-secret-0123456789",
            region_name="us-east-1",
            config=cfg,
        )

    # -- the killer ------------------------------------------------------------------------

    def node_states(self):
        """State of each storage node by its index in cluster.toml (what `trove cluster` takes)."""
        p = self.run_trove("--cluster", self.dir, "status", "--json", check=False)
        if p.returncode != 0:
            return None
        by_addr = {n["addr"]: n["state"] for n in json.loads(p.stdout)["nodes"]}
        return {i: by_addr.get(n["addr"], "unknown") for i, n in enumerate(self.state()["nodes"], start=1)}

    def killer(self):
        rng = random.Random(self.args.seed ^ 0x5EED)
        while not self.stop.wait(rng.uniform(self.args.kill_every_s * 0.5, self.args.kill_every_s * 1.5)):
            states = self.node_states() or {}
            for node in list(self.down):
                if states.get(node) == "out":
                    # Down long enough to be marked out and rebuilt elsewhere: it stays out,
                    # and a new node takes its place, as an operator would.
                    del self.down[node]
                    self.counts.add("storage node marked out, replaced")
                    self.run_trove("cluster", "add-node", "--dir", self.dir, check=False)
                elif self.down[node] <= time.time():
                    self.restart_node(node)
            victim = rng.choice(["storage", "storage", "meta", "mount", "s3"])
            began = time.time()
            steps = []
            try:
                if victim == "storage":
                    up = [n for n, st in states.items() if st == "up" and n not in self.down]
                    if len(self.down) >= NODES_DOWN_MAX or not up:
                        continue
                    node = rng.choice(up)
                    self.run_trove("cluster", "kill-node", "--dir", self.dir, "--node", str(node))
                    self.down[node] = time.time() + rng.uniform(5, 75)
                    self.counts.add("kill storage node")
                elif victim == "meta":
                    os.kill(int(self.state()["meta"]["pid"]), signal.SIGKILL)
                    time.sleep(rng.uniform(0.5, 3))
                    slept = time.time()
                    # Where a slow restart spends its time: starting any trove process (a
                    # control), the restart command and what it says of its steps.
                    self.run_trove("--version")
                    control = time.time()
                    p = self.run_trove("cluster", "restart-meta", "--dir", self.dir)
                    self.counts.add("kill metadata service")
                    steps.append(f"paused {slept - began:.1f} s, trove --version took {control - slept:.1f} s, restart-meta took {time.time() - control:.1f} s: {p.stdout.strip()} {p.stderr.strip()}".strip())
                elif victim == "mount":
                    # Killed while operations are in flight; they fail with ENOTCONN. New ones
                    # wait at the gate while the dead mount is replaced.
                    with self.proc_lock:
                        self.mount_proc.kill()
                        time.sleep(rng.uniform(0.5, 3))
                        with self.gate.exclusive():
                            self.kill_mount()
                            self.start_mount()
                    self.counts.add("kill mount")
                else:
                    with self.proc_lock:
                        self.kill_s3()
                        time.sleep(rng.uniform(0.5, 3))
                        self.start_s3()
                    self.counts.add("kill s3 gateway")
            except Exception as e:  # a restart that failed is a finding, and is retried at the end
                self.errors.add(f"killer: {victim}: {short(e)}")
            took = time.time() - began
            with self.counts.lock:
                self.slowest[victim] = max(self.slowest.get(victim, 0), round(took, 1))
            if victim == "meta":
                self.kill_log.append((round(began - self.counts.started, 1), victim, round(took, 1), steps))
        for node in list(self.down):
            self.restart_node(node)

    def restart_node(self, node):
        p = self.run_trove("cluster", "restart-node", "--dir", self.dir, "--node", str(node), check=False)
        if p.returncode == 0:
            del self.down[node]
        else:
            self.errors.add(f"killer: restart node: {short(p.stderr)}")

    # -- the workload ----------------------------------------------------------------------

    def fail(self, what):
        with self.failures_lock:
            self.failures.append(what)
        print(f"FAILURE: {what}", file=sys.stderr, flush=True)

    def worker(self, wid, front):
        rng = random.Random(self.args.seed * 1000 + wid)
        model = {}  # name -> list of possibilities: ("absent",) ("exact", seed, size) ("prefix", seed, size)
        self.models[wid] = model
        s3 = self.s3()
        serial = 0
        while not self.stop.is_set():
            serial += 1
            try:
                with self.gate.shared():
                    self.step(rng, front, s3, model, f"w{wid}", serial)
            except MountGone:
                time.sleep(0.5)

    def step(self, rng, front, s3, model, prefix, serial):
        """One operation, chosen at random, on this worker's own files."""
        known = [n for n, p in model.items() if len(p) == 1 and p[0][0] == "exact"]
        roll = rng.random()
        if roll < 0.35 or not known:
            if len(model) >= NAMES_PER_WORKER_MAX and known:
                self.delete(front, s3, model, rng.choice(known))
                return
            # A new name mostly; sometimes an overwrite of one that exists.
            name = rng.choice(known) if known and rng.random() < 0.25 else f"{prefix}/f{serial}"
            large = rng.random() < 0.2
            size = rng.randint(1, LARGE_BYTES_MAX if large else SMALL_BYTES_MAX)
            self.write(front, s3, model, name, rng.getrandbits(48), size, large)
        elif roll < 0.75:
            self.read(rng, front, s3, model, rng.choice(known))
        elif roll < 0.87:
            self.rename(model, rng.choice(known), f"{prefix}/r{serial}")
        else:
            self.delete(front, s3, model, rng.choice(known))

    def path(self, name):
        return os.path.join(self.mnt, BUCKET, name)

    def write(self, front, s3, model, name, seed, size, large):
        data = content(seed, size)
        before = model.get(name, [("absent",)])
        kind = f"write {'large' if large else 'small'} via {front}"
        try:
            if front == "s3":
                s3.put_object(Bucket=BUCKET, Key=name, Body=data)
            else:
                os.makedirs(os.path.dirname(self.path(name)), exist_ok=True)
                fd = os.open(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    view = memoryview(data)
                    while view:
                        n = os.write(fd, view[: 1 << 20])
                        view = view[n:]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            model[name] = [("exact", seed, size)]
            self.counts.add(kind)
        except Exception as e:
            self.errors.add(f"{kind}: {short(e)}")
            if front == "s3":
                model[name] = dedup(before + [("exact", seed, size)])
            else:
                model[name] = dedup(before + [("prefix", seed, size)])
            raise_if_mount_gone(e)

    def read(self, rng, front, s3, model, name):
        try:
            if front == "s3" or rng.random() < 0.1:
                got = s3.get_object(Bucket=BUCKET, Key=name)["Body"].read()
                via = "s3"
            else:
                with open(self.path(name), "rb") as f:
                    got = f.read()
                via = "mount"
        except Exception as e:
            self.errors.add(f"read via {front}: {short(e)}")
            raise_if_mount_gone(e)
            return
        self.counts.add(f"read via {via}")
        why = mismatch(got, model[name])
        if why:
            self.fail(f"read of {name} via {via} during the run: {why}")

    def rename(self, model, src, dst):
        try:
            os.rename(self.path(src), self.path(dst))
            model[dst] = model.pop(src)
            self.counts.add("rename via mount")
        except Exception as e:
            self.errors.add(f"rename via mount: {short(e)}")
            model[dst] = dedup(model[src] + [("absent",)])
            model[src] = dedup(model[src] + [("absent",)])
            raise_if_mount_gone(e)

    def delete(self, front, s3, model, name):
        try:
            if front == "s3":
                s3.delete_object(Bucket=BUCKET, Key=name)
            else:
                os.unlink(self.path(name))
            model[name] = [("absent",)]
            self.counts.add(f"delete via {front}")
        except Exception as e:
            self.errors.add(f"delete via {front}: {short(e)}")
            model[name] = dedup(model[name] + [("absent",)])
            raise_if_mount_gone(e)

    # -- the check at the end ----------------------------------------------------------------

    def settle(self):
        """Everything running again, every node that is not out up, a fresh mount and gateway."""
        state = self.state()
        if not alive(int(state["meta"]["pid"])):
            self.run_trove("cluster", "restart-meta", "--dir", self.dir)
        states = self.node_states() or {}
        for i, node in enumerate(state["nodes"], start=1):
            if states.get(i) != "out" and not alive(int(node["pid"])):
                self.run_trove("cluster", "restart-node", "--dir", self.dir, "--node", str(i))
        deadline = time.time() + 120
        while True:
            states = self.node_states()
            if states and all(st in ("up", "out") for st in states.values()):
                break
            if time.time() > deadline:
                raise RuntimeError(f"the cluster did not come back: {states}")
            time.sleep(1)
        with self.proc_lock, self.gate.exclusive():
            self.kill_mount()
            self.start_mount()
            self.kill_s3()
            self.start_s3()

    def verify(self):
        checked = 0
        s3 = self.s3()
        for wid, model in sorted(self.models.items()):
            for name, possible in sorted(model.items()):
                try:
                    with open(self.path(name), "rb") as f:
                        got = f.read()
                except FileNotFoundError:
                    got = None
                why = mismatch(got, possible)
                if why:
                    self.fail(f"final read of {name} via the mount: {why}")
                if got is not None and self.workers[wid] == "s3":
                    try:
                        body = s3.get_object(Bucket=BUCKET, Key=name)["Body"].read()
                        if body != got:
                            self.fail(f"final read of {name}: S3 and the mount disagree")
                    except Exception as e:
                        self.fail(f"final read of {name} via S3: {short(e)}")
                checked += 1
            listed = set()
            top = os.path.join(self.mnt, BUCKET, f"w{wid}")
            if os.path.isdir(top):
                listed = {f"w{wid}/{n}" for n in os.listdir(top)}
            stray = listed - set(model)
            if stray:
                self.fail(f"names no operation made: {sorted(stray)[:5]}")
        return checked

    def panics(self):
        found = []
        for root, _, files in os.walk(self.logs):
            for f in files:
                with open(os.path.join(root, f), "rb") as fh:
                    for line in fh:
                        if b"panicked" in line:
                            found.append(f"{f}: {line.decode(errors='replace').strip()[:200]}")
        return found

    def run(self):
        self.run_trove("--cluster", self.dir, "mkdir", "/" + BUCKET)
        self.start_mount()
        self.start_s3()
        fronts = ["mount"] * self.args.mount_workers + ["s3"] * self.args.s3_workers
        self.workers = dict(enumerate(fronts))
        self.models = {}
        threads = [threading.Thread(target=self.worker, args=(w, f), daemon=True) for w, f in self.workers.items()]
        killer = threading.Thread(target=self.killer, daemon=True)
        started = time.time()
        for t in threads:
            t.start()
        killer.start()
        while time.time() - started < self.args.duration_s:
            time.sleep(min(30, self.args.duration_s - (time.time() - started)))
            print(f"[{time.time() - started:5.0f} s] failures {len(self.failures)}, operations and kills "
                  f"{self.counts.snapshot()}, errors {sum(self.errors.snapshot().values())}", flush=True)
        self.stop.set()
        killer.join(timeout=120)
        hung = []
        for w, t in zip(self.workers, threads):
            t.join(timeout=120)
            if t.is_alive():
                hung.append(w)
        if hung:
            self.fail(f"workers {hung} did not finish their operation within 120 s of the end")
        self.settle()
        checked = self.verify()
        panics = self.panics()
        for p in panics:
            self.fail(f"panic: {p}")
        summary = {
            "seconds": round(time.time() - started),
            "operations": self.counts.snapshot(),
            "errors_seen_by_clients": self.errors.snapshot(),
            "first_seen_at_s": self.errors.firsts(),
            "kill_and_restart_slowest_s": self.slowest,
            "metadata_kills_at_s_took_s": self.kill_log,
            "files_checked_at_the_end": checked,
            "failures": self.failures,
        }
        print(json.dumps(summary, indent=2))
        self.kill_mount()
        self.kill_s3()
        return 0 if not self.failures else 1


class MountGone(Exception):
    pass


def raise_if_mount_gone(e):
    if isinstance(e, OSError) and e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
        raise MountGone() from e


def mismatch(got, possible):
    """Why `got` (bytes, or None for no file) is none of the possibilities; None if it is one."""
    for p in possible:
        if p[0] == "absent" or got is None:
            if p[0] == "absent" and got is None:
                return None
            continue
        data = content(p[1], p[2])
        if p[0] == "exact" and got == data:
            return None
        if p[0] == "prefix" and len(got) <= len(data) and got == data[: len(got)]:
            return None
    if got is None:
        return f"missing; it should hold one of {describe(possible)}"
    zeros = got.count(0)
    return f"{len(got)} bytes ({zeros} zero bytes) match none of {describe(possible)}"


def describe(possible):
    return ", ".join("nothing" if p[0] == "absent" else f"{p[0]} {p[2]} bytes of seed {p[1]}" for p in possible)


def dedup(possible):
    out = []
    for p in possible:
        if p not in out:
            out.append(p)
    return out


def short(e):
    text = str(e).strip().splitlines()
    text = text[-1] if text else type(e).__name__
    # Group errors by cause, not by file or request id.
    text = re.sub(r"/[^\s'\"]*", "PATH", text)
    text = re.sub(r"\d+", "N", text)
    return text[:120]


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trove", required=True)
    ap.add_argument("--cluster", required=True, help="directory of a running local cluster")
    ap.add_argument("--mount", required=True, help="an empty directory to mount on")
    ap.add_argument("--duration-s", type=float, default=600)
    ap.add_argument("--kill-every-s", type=float, default=10)
    ap.add_argument("--mount-workers", type=int, default=3)
    ap.add_argument("--s3-workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    sys.exit(Soak(ap.parse_args()).run())


if __name__ == "__main__":
    main()
