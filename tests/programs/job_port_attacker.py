"""A stranger on the cluster network against a job's port: what tests/e2e/test_job_port_hostile.py throws at a
running two-host job. It holds no secret; it connects from its own loopback address (another machine).

    job_port_attacker.py MODE HOST PORT --source ADDRESS [--seconds S] [--seed N]

Prints one JSON line of what it saw: connections made, how many the job closed, and when.
"""

import argparse
import json
import os
import random
import resource
import socket
import time

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=("nesting", "hold", "bulk", "slowloris", "storm", "fuzz"))
parser.add_argument("host")
parser.add_argument("port", type=int)
parser.add_argument("--source", required=True)
parser.add_argument("--seconds", type=float, default=4.0)
parser.add_argument("--count", type=int)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))   # the attacker is not held to the usual 1,024
rng = random.Random(args.seed)
family = socket.AF_INET6 if ":" in args.host else socket.AF_INET


def connect(blocking=True):
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.source, 0))
    sock.settimeout(2.0)
    try:
        sock.connect((args.host, args.port))
    except OSError:
        sock.close()
        return None
    sock.setblocking(blocking)
    return sock


def closed_by_peer(sock) -> bool:
    """Whether the job closed this connection (EOF or reset), without waiting."""
    try:
        while True:
            data = sock.recv(65536, socket.MSG_DONTWAIT)
            if not data:
                return True
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def send(sock, data) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def frame():
    """One line a fuzzer would send: random bytes, near-protocol JSON, forged signatures, deep nesting."""
    kind = rng.randrange(7)
    if kind == 0:
        return os.urandom(rng.randrange(1, 3000)) + b"\n"
    if kind == 1:
        message = {"t": rng.choice(["join", "stop", "result", "hb", "stack", "verdict", "welcome", "x"]),
                   "index": rng.choice([0, 1, -1, 2 ** 70, "0", None, [1]]), "attempt": rng.choice([0, 1, -5, "a"]),
                   "nonce": rng.choice(["", "00" * 16, None]), "proof": rng.choice(["", "ab" * 32, 7]),
                   "run_id": rng.choice(["", "x", None]), "cause": {"kind": "failed", "rank": 0}}
        return b"- " + json.dumps(message).encode() + b"\n"
    if kind == 2:   # a signed-looking line before any handshake
        return b"%032x " % rng.getrandbits(128) + b'{"t":"stop","attempt":0,"cause":{"kind":"failed"}}\n'
    if kind == 3:
        depth = rng.choice([5, 100, 1500, 100000])
        return b"- " + b"[" * depth + b"]" * depth + b"\n"
    if kind == 4:
        return b"- " + b'{"t":"join","x":"' + b"a" * rng.randrange(3000, 9000) + b'"}\n'
    if kind == 5:
        return b"- {\"t\": \"join\", \"index\": 1e999999, \"proof\": \"\\ud800\"}\n"
    return b"\n" * rng.randrange(1, 50)


def run():
    seen = {"mode": args.mode, "connected": 0, "closed_by_job": 0, "refused": 0}
    end = time.monotonic() + args.seconds
    if args.mode == "nesting":
        for line in (b"- " + b"[" * 100000 + b"\n", b"- " + b"[" * 2000 + b"]" * 2000 + b"\n",
                     b"- {\"t\":\"join\",\"a\":" + b"[" * 1000 + b"]" * 1000 + b"}\n"):
            sock = connect()
            if sock is None:
                seen["refused"] += 1
                continue
            seen["connected"] += 1
            send(sock, line)
            sock.settimeout(3.0)
            try:
                while sock.recv(65536):
                    pass
                seen["closed_by_job"] += 1
            except OSError:
                seen["closed_by_job"] += 1
            sock.close()
    elif args.mode in ("hold", "bulk", "slowloris"):
        count = args.count or {"hold": 1100, "bulk": 300, "slowloris": 50}[args.mode]
        held = []
        for _ in range(count):
            sock = connect(blocking=args.mode != "bulk")
            if sock is None:
                seen["refused"] += 1
                continue
            seen["connected"] += 1
            if args.mode == "bulk":   # a MiB with no newline, as far as the job takes it
                sock.settimeout(0.05)
                sent = 0
                try:
                    while sent < 1 << 20:
                        sent += sock.send(b"x" * 65536)
                except OSError:
                    pass
            held.append(sock)
        closed_at = []
        started = time.monotonic()
        while time.monotonic() < end and len(closed_at) < len(held):
            for sock in held:
                if sock.fileno() < 0:
                    continue
                if args.mode == "slowloris" and not send(sock, b"x"):
                    closed_at.append(time.monotonic() - started)
                    sock.close()
                elif closed_by_peer(sock):
                    closed_at.append(time.monotonic() - started)
                    sock.close()
            time.sleep(0.5 if args.mode == "slowloris" else 0.1)
        seen["closed_by_job"] = len(closed_at)
        seen["last_closed_after"] = max(closed_at, default=None)
        for sock in held:
            sock.close()
    elif args.mode == "storm":
        count = args.count or 3000
        for index in range(count):
            sock = connect()
            if sock is None:
                seen["refused"] += 1
                continue
            seen["connected"] += 1
            send(sock, b"- junk %d\n" % index)
            sock.close()
    else:   # fuzz: every kind of frame, a few storms and slow senders, until the time is up
        slow = []
        while time.monotonic() < end:
            choice = rng.randrange(10)
            if choice < 6:
                sock = connect()
                if sock is None:
                    seen["refused"] += 1
                    continue
                seen["connected"] += 1
                for _ in range(rng.randrange(1, 4)):
                    if not send(sock, frame()):
                        break
                if rng.random() < 0.5:
                    sock.close()
                else:
                    slow.append(sock)
            elif choice < 8 and len(slow) < 200:
                sock = connect()
                if sock is not None:
                    seen["connected"] += 1
                    slow.append(sock)
            for sock in list(slow):
                if sock.fileno() < 0 or not send(sock, os.urandom(1)):
                    seen["closed_by_job"] += 1
                    sock.close()
                    slow.remove(sock)
            time.sleep(0.01)
        for sock in slow:
            sock.close()
    print(json.dumps(seen), flush=True)


run()
