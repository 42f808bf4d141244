"""NFSv3 over the wire with handles a client makes up: a raw ONC RPC client (record marking,
AUTH_UNIX, XDR by hand, as a hostile host would send) against `trove nfs`.

It mounts the export, reads a file below it through LOOKUP and READ (the handles the gateway
handed out work), then asks for READ and GETATTR of an inode outside the export with handles
forged from the export's own: the inode number swapped into a real handle, a handle of format
version 1 (tag and inode number, no MAC), and random MAC bytes. Every forged handle must be
refused (BADHANDLE, or STALE for version 1) and the outside file's bytes must never arrive.

Arguments: PORT (the gateway's NFS and MOUNT port), PATH (a file below the export, from its
root, e.g. /imagenet/0.jpg), EXPECT (its content), INO (the inode number of a file outside the
export), SECRET (that file's content). Prints "ok" and what it checked; fails with the first
surprise.
"""

import os
import socket
import struct
import sys

PORT, PATH, EXPECT, INO, SECRET = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode(), int(sys.argv[4]), sys.argv[5].encode()
NFS_PROG, NFS_VERS, MOUNT_PROG, MOUNT_VERS = 100003, 3, 100005, 3
NFS3_OK, NFS3ERR_STALE, NFS3ERR_BADHANDLE = 0, 70, 10001
PROC_GETATTR, PROC_LOOKUP, PROC_READ, MOUNTPROC_MNT = 1, 3, 6, 1


def opaque(b):
    return struct.pack(">I", len(b)) + b + b"\0" * (-len(b) % 4)


class Rpc:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.xid = 0x7000

    def call(self, prog, vers, proc, args):
        self.xid += 1
        cred = struct.pack(">I", 0) + opaque(b"forger") + struct.pack(">III", 0, 0, 0)  # uid 0, gid 0, no gids
        msg = struct.pack(">IIIIII", self.xid, 0, 2, prog, vers, proc) + struct.pack(">I", 1) + opaque(cred)
        msg += struct.pack(">II", 0, 0) + args  # AUTH_NULL verifier
        self.sock.sendall(struct.pack(">I", 0x80000000 | len(msg)) + msg)
        reply = b""
        while True:
            (mark,) = struct.unpack(">I", self.recv(4))
            reply += self.recv(mark & 0x7FFFFFFF)
            if mark & 0x80000000:
                break
        xid, mtype, stat = struct.unpack(">III", reply[:12])
        assert xid == self.xid and mtype == 1 and stat == 0, f"RPC reply {xid} {mtype} {stat}"
        (vlen,) = struct.unpack(">I", reply[16:20])
        body = reply[20 + vlen + (-vlen % 4):]
        (accept,) = struct.unpack(">I", body[:4])
        assert accept == 0, f"RPC not accepted: {accept}"
        return body[4:]

    def recv(self, n):
        out = b""
        while len(out) < n:
            got = self.sock.recv(n - len(out))
            if not got:
                sys.exit("the gateway closed the connection")
            out += got
        return out


def take_opaque(b):
    (n,) = struct.unpack(">I", b[:4])
    return b[4:4 + n], b[4 + n + (-n % 4):]


def skip_post_op_attr(b):
    (present,) = struct.unpack(">I", b[:4])
    return b[4 + (84 if present else 0):]


rpc = Rpc(PORT)
status_and_rest = rpc.call(MOUNT_PROG, MOUNT_VERS, MOUNTPROC_MNT, opaque(b"/"))
(mstat,) = struct.unpack(">I", status_and_rest[:4])
assert mstat == 0, f"MNT status {mstat}"
root, _ = take_opaque(status_and_rest[4:])
checked = [f"mounted: a root handle of {len(root)} bytes"]


def lookup(dirfh, name):
    res = rpc.call(NFS_PROG, NFS_VERS, PROC_LOOKUP, opaque(dirfh) + opaque(name.encode()))
    (status,) = struct.unpack(">I", res[:4])
    assert status == NFS3_OK, f"LOOKUP {name}: status {status}"
    fh, _ = take_opaque(res[4:])
    return fh


def read(fh):
    """(status, data) of READ of the first 64 KiB."""
    res = rpc.call(NFS_PROG, NFS_VERS, PROC_READ, opaque(fh) + struct.pack(">QI", 0, 65536))
    (status,) = struct.unpack(">I", res[:4])
    if status != NFS3_OK:
        return status, b""
    rest = skip_post_op_attr(res[4:])
    data, _ = take_opaque(rest[8:])  # count, eof
    return status, data


def getattr_status(fh):
    (status,) = struct.unpack(">I", rpc.call(NFS_PROG, NFS_VERS, PROC_GETATTR, opaque(fh))[:4])
    return status


fh = root
for part in PATH.strip("/").split("/"):
    fh = lookup(fh, part)
status, data = read(fh)
assert status == NFS3_OK and data == EXPECT, f"READ {PATH}: status {status}, {data!r}"
checked.append(f"READ {PATH} with the handles the gateway handed out: {len(data)} bytes, right")

swapped = fh[:8] + struct.pack("<Q", INO) + fh[16:]
version1 = b"TROVNFS1" + struct.pack("<Q", INO)
random_mac = fh[:8] + struct.pack("<Q", INO) + os.urandom(len(fh) - 16)
for what, forged, want in (
    ("the outside inode swapped into a real handle", swapped, NFS3ERR_BADHANDLE),
    ("a format 1 handle (no MAC)", version1, NFS3ERR_STALE),
    ("random MAC bytes", random_mac, NFS3ERR_BADHANDLE),
):
    status, data = read(forged)
    assert SECRET not in data, f"{what}: the outside file's bytes arrived"
    assert status == want, f"READ with {what}: status {status}, wanted {want}"
    gstatus = getattr_status(forged)
    assert gstatus == want, f"GETATTR with {what}: status {gstatus}, wanted {want}"
    checked.append(f"READ and GETATTR with {what}: refused ({status})")
print("ok")
for line in checked:
    print(line)
