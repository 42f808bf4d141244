"""A TCP round trip of 64 bytes between two processes on loopback, 20,000 times; prints the
mean. Pin both to one CPU with `taskset -c 0 python3 pingpong.py` to compare."""
import os
import socket
import time

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(1)
port = s.getsockname()[1]
if os.fork() == 0:
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(100)
        if not d:
            os._exit(0)
        c.send(d)
c = socket.create_connection(("127.0.0.1", port))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
n = 20000
t = time.perf_counter()
for _ in range(n):
    c.send(b"x" * 64)
    c.recv(100)
print("tcp loopback rtt %.1f us" % ((time.perf_counter() - t) / n * 1e6))
