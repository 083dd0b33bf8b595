#!/usr/bin/python3
"""kazoo peer for zk-recipes interoperability tests (same protocol as Interop.java).

usage (CONNECT = host:port[/chroot], PATH = lock path):
  kazoo_interop.py mutex     CONNECT PATH ITERATIONS HOLD_MS [ID]          kazoo Lock
  kazoo_interop.py read      CONNECT PATH ITERATIONS HOLD_MS [ID]          kazoo ReadLock   (needs kazoo>=2.9 when
  kazoo_interop.py write     CONNECT PATH ITERATIONS HOLD_MS [ID]          kazoo WriteLock   readers and writers mix)
  kazoo_interop.py hold      CONNECT PATH [ID]                             kazoo Lock held until stdin reaches EOF
  kazoo_interop.py semaphore CONNECT PATH PERMITS ITERATIONS HOLD_MS [ID]  kazoo Semaphore (NOT Curator-compatible)
  kazoo_interop.py list      CONNECT PATH                                  print children: NODE <name> <owner> <data>
ID defaults to "kazoo-<pid>".

Node naming (flag anywhere on the command line):
  --names=kazoo   (default) kazoo's own node names: <32hex>__lock__<seq> (Lock, WriteLock), <32hex>__rlock__<seq>
                  (ReadLock). extra_lock_patterns are added so that kazoo SEES Curator-style contenders
                  ("-lock-" for mutex/hold, "__WRIT__"/"__READ__" for write, "__WRIT__" for read). Curator does
                  NOT see these nodes as ordered contenders (its sort key is the text after "lock-"/"__READ__"/
                  "__WRIT__"), so a Curator peer on the same path can overlap with kazoo.
  --names=curator kazoo subclasses whose node names Curator can sort: <32hex>-lock-<seq> (mutex/hold),
                  <32hex>__READ__<seq> (read), <32hex>__WRIT__<seq> (write); they also see kazoo's own names.

Output, one flushed line per event:
  READY | REQ <ns> <kind> <id> | ACQ <ns> <kind> <id> <node-or--> | REL <ns> <kind> <id> [lost] | ERR <msg> | DONE
kind: lock | read | write | sem. ns = time.monotonic_ns() (CLOCK_MONOTONIC). ACQ is printed after acquire()
returned and REL just BEFORE release(), so [ACQ, REL] lies inside the real holding interval. "REL ... lost" is
printed once when the session is SUSPENDED/LOST while holding.
Session timeout 4 s.
"""
import os
import sys
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.recipe.lock import Lock, ReadLock, WriteLock, Semaphore
import kazoo.version

_OUT = threading.Lock()


def out(line):
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def now():
    return time.monotonic_ns()


class CuratorNamedLock(Lock):
    """Exclusive lock whose node name Curator's InterProcessMutex sorts by sequence ("lock-" + seq)."""
    _NODE_NAME = "-lock-"
    _EXCLUDE_NAMES = ["-lock-", "__lock__"]


class CuratorNamedReadLock(Lock):
    """Reader in Curator's InterProcessReadWriteLock layout (waits for earlier "__WRIT__" nodes)."""
    _NODE_NAME = "__READ__"
    _EXCLUDE_NAMES = ["__WRIT__", "__lock__"]


class CuratorNamedWriteLock(Lock):
    """Writer in Curator's InterProcessReadWriteLock layout (waits for every earlier node)."""
    _NODE_NAME = "__WRIT__"
    _EXCLUDE_NAMES = ["__WRIT__", "__READ__", "__lock__", "__rlock__"]


def make_lock(client, mode, path, ident, names):
    if names == "curator":
        cls = {"mutex": CuratorNamedLock, "hold": CuratorNamedLock,
               "read": CuratorNamedReadLock, "write": CuratorNamedWriteLock}[mode]
        return cls(client, path, ident)
    if mode in ("mutex", "hold"):
        return Lock(client, path, ident, extra_lock_patterns=["-lock-"])
    if mode == "read":
        return ReadLock(client, path, ident, extra_lock_patterns=["__WRIT__"])
    return WriteLock(client, path, ident, extra_lock_patterns=["__WRIT__", "__READ__"])


class Holder:
    """Tracks what we hold; a SUSPENDED/LOST session while holding prints `REL ... lost` once."""

    def __init__(self):
        self.cv = threading.Condition()
        self.kind = None
        self.ident = None
        self.lost = False

    def begin(self, kind, ident):
        with self.cv:
            self.kind, self.ident, self.lost = kind, ident, False

    def listener(self, state):
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            with self.cv:
                if self.kind is not None and not self.lost:
                    self.lost = True
                    out("REL %d %s %s lost" % (now(), self.kind, self.ident))
                    self.cv.notify_all()
        return False  # stay registered

    def hold_for(self, ms):
        deadline = now() + int(ms) * 1_000_000
        with self.cv:
            while not self.lost:
                left = deadline - now()
                if left <= 0:
                    break
                self.cv.wait(min(left / 1e9, 0.05))

    def end(self):
        with self.cv:
            if self.kind is not None and not self.lost:
                out("REL %d %s %s" % (now(), self.kind, self.ident))
            self.kind, self.ident, self.lost = None, None, False


def _version_tuple(v):
    parts = []
    for p in v.split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def usage():
    out("ERR usage: kazoo_interop.py (mutex|read|write) CONNECT PATH ITERATIONS HOLD_MS [ID] | hold CONNECT PATH [ID]"
        " | semaphore CONNECT PATH PERMITS ITERATIONS HOLD_MS [ID] | list CONNECT PATH  [--names=kazoo|curator]")
    sys.exit(2)


def arg(a, i, name):
    if len(a) <= i:
        raise ValueError("missing " + name)
    return a[i]


def main(argv):
    names = "kazoo"
    a = []
    for x in argv:
        if x.startswith("--names="):
            names = x.split("=", 1)[1]
            if names not in ("kazoo", "curator"):
                usage()
        else:
            a.append(x)
    if len(a) < 3:
        usage()
    mode, hosts, path = a[0], a[1], a[2]
    if mode not in ("mutex", "read", "write", "hold", "semaphore", "list"):
        usage()
    default_id = "kazoo-%d" % os.getpid()
    if mode in ("read", "write") and _version_tuple(kazoo.version.__version__) < (2, 9):
        sys.stderr.write("warning: kazoo %s ReadLock/WriteLock deadlock when readers and writers mix "
                         "(python-zk/kazoo#649, fixed in 2.9)\n" % kazoo.version.__version__)
    holder = Holder()
    client = KazooClient(hosts=hosts, timeout=4.0)
    try:
        client.start(timeout=20)
        client.add_listener(holder.listener)
        out("READY")
        if mode == "list":
            for child in sorted(client.get_children(path)):
                data, stat = client.get(path + "/" + child)
                out("NODE %s 0x%x %r" % (child, stat.ephemeralOwner, data))
        elif mode in ("mutex", "read", "write"):
            iterations = int(arg(a, 3, "ITERATIONS"))
            hold_ms = int(arg(a, 4, "HOLD_MS"))
            ident = a[5] if len(a) > 5 else default_id
            kind = "lock" if mode == "mutex" else mode
            lk = make_lock(client, mode, path, ident, names)
            for _ in range(iterations):
                out("REQ %d %s %s" % (now(), kind, ident))
                lk.acquire()
                holder.begin(kind, ident)
                out("ACQ %d %s %s %s" % (now(), kind, ident, lk.node or "-"))
                holder.hold_for(hold_ms)
                holder.end()
                lk.release()
        elif mode == "hold":
            ident = a[3] if len(a) > 3 else default_id
            lk = make_lock(client, mode, path, ident, names)
            out("REQ %d lock %s" % (now(), ident))
            lk.acquire()
            holder.begin("lock", ident)
            out("ACQ %d lock %s %s" % (now(), ident, lk.node or "-"))
            while sys.stdin.buffer.read(256):
                pass
            holder.end()
            lk.release()
        elif mode == "semaphore":
            permits = int(arg(a, 3, "PERMITS"))
            iterations = int(arg(a, 4, "ITERATIONS"))
            hold_ms = int(arg(a, 5, "HOLD_MS"))
            ident = a[6] if len(a) > 6 else default_id
            sem = Semaphore(client, path, ident, max_leases=permits)
            for _ in range(iterations):
                out("REQ %d sem %s" % (now(), ident))
                sem.acquire()
                holder.begin("sem", ident)
                out("ACQ %d sem %s %s" % (now(), ident, sem.create_path.rsplit("/", 1)[-1]))
                holder.hold_for(hold_ms)
                holder.end()
                sem.release()
        client.stop()
        client.close()
        out("DONE")
        return 0
    except Exception as e:  # noqa: BLE001 - report anything as ERR
        out(("ERR %s: %s" % (type(e).__name__, e)).replace("\n", " "))
        try:
            client.stop()
            client.close()
        except Exception:  # noqa: BLE001
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
