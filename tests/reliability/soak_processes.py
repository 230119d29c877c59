"""The processes of a launched job, read from /proc, for kill_soak.py (a rank is found by the RANK in its
environment); and a free TCP port for its rendezvous. Standard library only."""
import os
import socket
import time
from pathlib import Path


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def children_of(pid):
    """The processes whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d))
    return out


def rank_of(pid):
    """The RANK in a process's environment (None before the launcher's child has exec'd bellows, or once gone)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"RANK="):
            return int(kv[5:])
    return None


def alive(pid):
    """A process that exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_naming(text):
    """The live processes whose command line contains text (a run directory: what the soak started and left)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                if text.encode() in Path(f"/proc/{d}/cmdline").read_bytes() and alive(int(d)):
                    out.append(int(d))
            except OSError:
                pass
    return out


def rank_pids(launcher, ranks, wait_s):
    """{rank: pid} of the launcher's children, once all of them have exec'd bellows (or as many as there are after wait_s)."""
    deadline = time.time() + wait_s
    while True:
        found = {}
        for pid in children_of(launcher.pid):
            r = rank_of(pid)
            if r is not None:
                found[r] = pid
        if len(found) == ranks or time.time() > deadline or launcher.poll() is not None:
            return found
        time.sleep(0.002)
