"""A bench peer that runs native code (llama.cpp) lives in a child process, so its crash costs its own rows only.

The child is a standard-library script (run by path, so it does not import torch or multidraft) that talks JSON
lines: one request on its stdin, one reply on its stdout. A reply {"error": ...} is an ordinary failure; the child
dying (a signal such as SIGSEGV, or an exit), or giving no answer within the timeout (it is then killed), is a
fatal one: PeerFailed says which, where ("in its first decode") and the last line the child wrote to stderr.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Optional

from multidraft.errors import MultidraftError
from multidraft.openmp_wait import peer_environment

_LIVE: "weakref.WeakSet[PeerProcess]" = weakref.WeakSet()


class PeerFailed(MultidraftError, RuntimeError):
    """A peer could not give its answer. `fatal`: its process is gone (crashed, hung and stopped, or never
    loaded), so every later request of this bench run fails the same way without starting it again."""

    def __init__(self, reason: str, fatal: bool = False):
        super().__init__(reason)
        self.fatal = fatal


def child_environment() -> dict[str, str]:
    """The parent's environment, with its import path: the child imports what the parent would (the checkout's
    source tree, a test's stand-in module)."""
    path = [p for p in sys.path if p and os.path.isdir(p)]
    return dict(peer_environment(dict(os.environ)), PYTHONPATH=os.pathsep.join(path))


def exit_description(returncode: int) -> str:
    """'crashed (SIGSEGV)' for a death by signal, else 'exited with status N'."""
    if returncode < 0:
        try:
            return f"crashed ({signal.Signals(-returncode).name})"
        except ValueError:
            return f"crashed (signal {-returncode})"
    return f"exited with status {returncode}"


class PeerProcess:
    """One child process running `script`; `label` names the peer in failure messages ("llama.cpp")."""

    def __init__(self, script: Path, label: str):
        self.label = label
        self.failure: Optional[PeerFailed] = None
        self._stderr = tempfile.TemporaryFile()         # a file, not a pipe: a chatty child never blocks on it
        self._buffer = b""
        self.process = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._stderr, env=child_environment())
        _LIVE.add(self)

    def receive(self, timeout: float, where: str) -> dict:
        """The child's next reply; PeerFailed (fatal) if it dies or stays silent for `timeout` seconds."""
        if self.failure is not None:
            raise PeerFailed(str(self.failure), fatal=True)
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._fail(f"{self.label} gave no answer in {timeout:.0f} s {where} (hung?); stopped it", kill=True)
            chunk = os.read(fd, 1 << 16)
            if not chunk:                                # EOF: the child is gone
                returncode = self.process.wait()
                self._fail(f"{self.label} {exit_description(returncode)} {where}" + self._stderr_tail())
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply = json.loads(line)
        if "error" in reply:
            raise PeerFailed(f"{self.label}: {reply['error']}", fatal=bool(reply.get("fatal")))
        return reply

    def ask(self, request: dict, timeout: float, where: str) -> dict:
        if self.failure is None:
            try:
                self.process.stdin.write((json.dumps(request) + "\n").encode())
                self.process.stdin.flush()
            except (BrokenPipeError, OSError):
                pass                                     # the child is gone: receive() says how it ended
        return self.receive(timeout, where)

    def _fail(self, reason: str, kill: bool = False):
        self.failure = PeerFailed(reason, fatal=True)
        self.close(kill)
        raise PeerFailed(reason, fatal=True)

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().decode(errors="replace").splitlines() if line.strip()]
        return f"; its last words: {lines[-1][:200]}" if lines else ""

    def close(self, kill: bool = False) -> None:
        """Stop the child: closing its stdin ends it; a kill if asked, or if it does not go within a second."""
        if self.process.poll() is None:
            try:
                if kill:
                    raise subprocess.TimeoutExpired("peer", 0)
                self.process.stdin.close()
                self.process.wait(timeout=1)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        _LIVE.discard(self)


@atexit.register
def _stop_children() -> None:
    for peer in list(_LIVE):
        peer.close()
