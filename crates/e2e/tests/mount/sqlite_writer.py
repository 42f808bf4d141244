#!/usr/bin/env python3
"""One of several processes writing the same SQLite database: inserts ROWS rows, one
transaction each, retrying while another process holds the database lock.

Usage: sqlite_writer.py DB WRITER_ID ROWS        (writes)
       sqlite_writer.py DB --check EXPECTED_ROWS (prints integrity_check and the row count)

SQLite serialises writers with fcntl byte-range locks on the database file, so running two of
these at once on one mount exercises locking, O_EXCL journal files, fsync and small random
writes together.
"""

import sqlite3
import sys
import time


def connect(path):
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 60000")
    return db


def write(path, writer, rows):
    db = connect(path)
    db.execute("CREATE TABLE IF NOT EXISTS t (writer INTEGER, n INTEGER, payload BLOB, PRIMARY KEY (writer, n))")
    for n in range(rows):
        for attempt in range(100):
            try:
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT INTO t VALUES (?, ?, ?)", (writer, n, bytes([n % 256]) * (100 + n * 37 % 3000)))
                db.execute("COMMIT")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                try:
                    db.execute("ROLLBACK")
                except sqlite3.OperationalError:
                    pass
                time.sleep(0.01 * (attempt + 1))
        else:
            raise SystemExit(f"writer {writer}: row {n} never committed")
    db.close()


def check(path, expected):
    db = connect(path)
    integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    count = db.execute("SELECT count(*) FROM t").fetchone()[0]
    writers = db.execute("SELECT count(DISTINCT writer) FROM t").fetchone()[0]
    print(f"integrity_check={integrity} rows={count} writers={writers}")
    if integrity != "ok" or count != expected:
        raise SystemExit(f"expected integrity ok and {expected} rows")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--check":
        check(sys.argv[1], int(sys.argv[3]))
    elif len(sys.argv) == 4:
        write(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
