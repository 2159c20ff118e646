"""How the ranks of one run meet: all-gather of small JSON values over TCP to process 0.

Framework-independent on purpose: TensorFlow ranks need each other's host
names before TF starts, every rank's measurements must reach the reporting
process whatever the strategy, processes that never exit on their own
(parameter servers) wait here for the chief's "done", and a rank that fails
tells process 0 so the run is recorded as failed instead of hanging.

A stopped rank hands process 0 the steps it timed (benchmarks/run/rank_steps.py) on a connection of its own, since
its gather connection may be blocked in a collective: the only way they reach process 0 from another host.

A rank whose connection closes before the end without a report (killed with its supervisor, its
node gone) is reported for it LOST_REPORT_WAIT_S later, so process 0 ends wherever it is (building,
in a collective) instead of waiting for the launcher to stop it.

Every rank but process 0 also beats: one line a second on a connection of its own, so process 0
can name a rank that is alive but says nothing (SIGSTOPped, its host hung) when the run is stopped
or its collective times out; a closed beat connection is not silence (a killed rank is reported
as gone, above).

Every message carries the run's token (world.run_token): process 0 answers a rank of another run
that reached its port with an error naming both runs, and ignores failures reported by one, so
two runs given the same port fail in one line instead of joining each other.
"""

from __future__ import annotations

import errno
import json
import select
import socket
import socketserver
import threading
import time
from typing import Callable

RETRY_S = 0.2
LOST_REPORT_WAIT_S = 5.0  # a vanished rank's own report (its supervisor's) wins if it comes within this
GONE_CHECK_S = 1.0  # how often a rank waiting in a gather is checked for a closed connection
BYE = "bye"  # a rank closing its connection on purpose; one that closes without it died
DONE = "done"  # the last gather of a run: a rank that closes its connection after it has finished
BEAT = "beat"  # a rank is alive, on its beat connection
BEAT_S = 1.0
STEPS = "steps"  # a stopped rank's steps, handed to process 0
HAND_OVER_S = 2.0  # how long a stopped rank tries to reach process 0 with its steps: its launcher kills it soon
SILENT_AFTER_S = 5.0  # a rank's beats can lag on a loaded host; one not heard from for longer is silent


class RendezvousError(RuntimeError):
    pass


def _send(sock: socket.socket, message: dict) -> None:
    sock.sendall((json.dumps(message) + "\n").encode())


class _Board:
    """Process 0's state: values per tag, and who is waiting for them."""

    def __init__(self, size: int, on_failure: Callable[[dict], None] | None, run_token: str | None = None):
        self.size, self.run_token = size, run_token
        self.values: dict[str, dict[int, object]] = {}
        self.closing = False
        self.cond = threading.Condition()
        self.on_failure = on_failure
        self.heard: dict[int, float] = {}  # rank -> its last beat (monotonic), while its beat connection is open
        self.settled: dict[str, set[int]] = {}  # tag -> the other ranks answered there (or found gone)
        self.handed: dict[int, object] = {}  # rank -> the steps it handed over when stopped

    def silent(self) -> dict[int, float]:
        """Ranks not heard from for SILENT_AFTER_S: rank -> seconds since their last beat."""
        now = time.monotonic()
        return {rank: now - last for rank, last in list(self.heard.items()) if now - last > SILENT_AFTER_S}

    def put(self, tag: str, rank: int, value) -> None:
        with self.cond:
            self.values.setdefault(tag, {})[rank] = value
            self.cond.notify_all()

    def wait_all(self, tag: str, timeout_s: float, gone: Callable[[], bool] = lambda: False) -> list | None:
        """Every rank's value, or None as soon as `gone()` (the waiting rank's connection closed)."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while len(self.values.get(tag, {})) < self.size:
                left = deadline - time.monotonic()
                if left <= 0:
                    have = sorted(self.values.get(tag, {}))
                    missing = [r for r in range(self.size) if r not in have]
                    raise RendezvousError(f"timed out after {timeout_s:g} s waiting for ranks {missing} at '{tag}'")
                if gone():
                    return None
                self.cond.wait(min(left, GONE_CHECK_S))
            return [self.values[tag][r] for r in range(self.size)]

    def settle(self, tag: str, rank: int) -> None:
        with self.cond:
            self.settled.setdefault(tag, set()).add(rank)
            self.cond.notify_all()

    def wait_settled(self, tag: str, timeout_s: float) -> None:
        """Until every other rank has been answered at `tag` (its reply sent, or its connection found gone), at
        most timeout_s: process 0 goes on only then. Else a rank's reply, sent by a thread of this process,
        could wait for the GIL while the main thread holds it, blocked in a framework call that needs that
        very rank (TensorFlow's first collective after 'preflight': a deadlock a loaded CI run hit, the other
        rank timing out after 300 s). Once every value is in, each answer is moments away."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while len(self.settled.get(tag, ())) < self.size - 1 and (left := deadline - time.monotonic()) > 0:
                self.cond.wait(min(left, GONE_CHECK_S))

    def report_if_open(self, rank: int) -> None:
        """A vanished rank's failure, unless the run has ended meanwhile (its record is written)."""
        if not self.closing and self.on_failure:
            self.on_failure(_went_away(rank))


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        board: _Board = self.server.board  # type: ignore[attr-defined]
        rank, finished = None, False  # whose connection this is, once it has spoken; whether it saw "done"
        beating = None  # the rank whose beat connection this is
        try:
            for line in self.rfile:
                message = json.loads(line)
                if message.get("run") != board.run_token:  # a rank of another run: not counted, not heard
                    if message["op"] not in ("fail", STEPS):
                        _send(self.request, {"tag": message.get("tag"), "error": _foreign(board.run_token, message.get("run"))})
                    return
                if message["op"] == "fail":
                    if board.on_failure:
                        board.on_failure(message)  # must not raise: the run's outcome rides on it
                    continue
                if message["op"] == STEPS:
                    board.handed[message["rank"]] = message["value"]
                    continue
                if message["op"] == BEAT:
                    beating = message["rank"]
                    board.heard[beating] = time.monotonic()
                    continue
                if message["op"] == BYE:  # its part is done: leaving now is no failure
                    finished = True
                    continue
                rank, tag, finished = message["rank"], message["tag"], False
                board.put(tag, rank, message["value"])
                try:
                    try:
                        reply = {"tag": tag, "values": board.wait_all(tag, message["timeout_s"],
                                                                      gone=lambda: _closed(self.request))}
                    except RendezvousError as error:
                        reply = {"tag": tag, "error": str(error)}
                    if reply.get("values", ()) is None:
                        break  # it died waiting (a parameter server or PS worker waits for "done" all run long)
                    _send(self.request, reply)
                finally:
                    board.settle(tag, rank)
                finished = tag == DONE  # answered at "done", it may leave
        except OSError:
            pass  # reset by a dying peer: noted below like a close
        if beating is not None:
            board.heard.pop(beating, None)
        if rank is not None and not finished and not board.closing and board.on_failure:
            # its supervisor reports why within moments; killed with it, nobody does
            timer = threading.Timer(LOST_REPORT_WAIT_S, board.report_if_open, args=(rank,))
            timer.daemon = True
            timer.start()


def _closed(sock: socket.socket) -> bool:
    """The peer closed (or reset) its end: readable with nothing to read. A waiting rank sends nothing."""
    try:
        if not select.select([sock], [], [], 0)[0]:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _went_away(rank: int) -> dict:
    """The failure report a rank that vanished would have sent."""
    message = "went away without a report (its connection to process 0 closed): killed, or its host failed"
    return {"op": "fail", "rank": rank, "record": {"status": "failed", "error": {"kind": "crash", "message": message}}}


CONCURRENT_RUNS = "give concurrent runs distinct --rendezvous-port values, or none (each run's token then picks one)"


def _foreign(held_by: str | None, ours: str | None) -> str:
    return (f"the rendezvous port is held by another run (its token {held_by or 'none'}, this run's {ours or 'none'}): "
            + CONCURRENT_RUNS)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class Rendezvous:
    """All-gather among `size` ranks; process 0 serves, the others connect."""

    def __init__(
        self,
        rank: int,
        size: int,
        host: str,
        port: int,
        timeout_s: float,
        on_failure: Callable[[dict], None] | None = None,
        run_token: str | None = None,
        on_silence: Callable[[dict[int, float]], None] | None = None,
    ):
        """`on_silence` (process 0): called with {rank: seconds since its last beat} whenever the set of
        silent ranks changes."""
        self.rank, self.size, self.timeout_s, self.run_token = rank, size, timeout_s, run_token
        self.where, self._address = f"{host}:{port}", (host, port)
        self._server = self._sock = self._board = None
        self._lines = None
        if rank == 0:
            self._board = _Board(size, on_failure, run_token)
            try:
                self._server = _Server(("", port), _Handler)
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                raise RendezvousError(f"--rendezvous-port {port} is in use on this host (another run's process 0?): "
                                      + CONCURRENT_RUNS) from None
            self._server.board = self._board
            threading.Thread(target=self._server.serve_forever, name="rendezvous", daemon=True).start()
            if on_silence is not None:
                threading.Thread(target=self._watch, args=(on_silence,), name="rendezvous-silence", daemon=True).start()
        else:
            self._sock = _connect(host, port, timeout_s)
            self._lines = self._sock.makefile("r")
            self._left = threading.Event()
            threading.Thread(target=self._beat, args=(host, port), name="rendezvous-beat", daemon=True).start()

    def _beat(self, host: str, port: int) -> None:
        try:
            with socket.create_connection((host, port), timeout=self.timeout_s) as sock:
                while True:
                    _send(sock, {"op": BEAT, "rank": self.rank, "run": self.run_token})
                    if self._left.wait(BEAT_S):
                        return
        except OSError:
            return  # process 0 is gone: the gathers say so

    def _watch(self, on_silence: Callable[[dict[int, float]], None]) -> None:
        named: set[int] = set()
        while not self._board.closing:
            time.sleep(BEAT_S)
            silent = self._board.silent()
            if set(silent) != named:
                named = set(silent)
                on_silence(silent)

    def allgather(self, tag: str, value, wait_forever: bool = False) -> list:
        """Every rank's value for `tag`, in rank order; raises RendezvousError on timeout.

        `wait_forever` is for servers waiting for the chief's end of run: they
        wait as long as the run lasts, and still notice process 0 dying.
        """
        timeout_s = 10 * 365 * 86400.0 if wait_forever else self.timeout_s
        if self._sock is None:
            self._board.put(tag, self.rank, value)
            values = self._board.wait_all(tag, timeout_s)
            self._board.wait_settled(tag, timeout_s)
            return values
        _send(self._sock, {"op": "gather", "tag": tag, "rank": self.rank, "value": value, "timeout_s": timeout_s,
                           "run": self.run_token})
        self._sock.settimeout(None if wait_forever else timeout_s + 5)
        try:
            line = self._lines.readline()
        except (OSError, socket.timeout) as error:
            raise RendezvousError(f"lost process 0 at '{tag}': {error}") from None
        if not line:
            raise RendezvousError(f"process 0 closed the rendezvous at '{tag}' (it ended or failed)")
        reply = json.loads(line)
        if "error" in reply:
            raise RendezvousError(f"{self.where}: {reply['error']}")
        return reply["values"]

    def hand_over(self, value) -> bool:
        """A stopped rank's steps to process 0, on a connection of its own (this rank's may be blocked in a gather);
        best effort, at most HAND_OVER_S: process 0 may be gone. Process 0's own are kept in its board."""
        if self._board is not None:
            self._board.handed[self.rank] = value
            return True
        try:
            with socket.create_connection(self._address, timeout=HAND_OVER_S) as sock:
                _send(sock, {"op": STEPS, "rank": self.rank, "value": value, "run": self.run_token})
            return True
        except OSError:
            return False

    def handed_over(self) -> dict[int, object]:
        """Process 0: the steps the stopped ranks have handed over so far, by rank."""
        return dict(self._board.handed) if self._board is not None else {}

    def close(self) -> None:
        if self._board is not None:
            self._board.closing = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._sock is not None:
            self._left.set()
            try:
                _send(self._sock, {"op": BYE, "rank": self.rank, "run": self.run_token})
            except OSError:
                pass  # process 0 is gone already
            self._lines.close()  # the socket's file object holds it open too
            self._sock.close()


def _connect(host: str, port: int, timeout_s: float) -> socket.socket:
    """Process 0 may start later than us: retry until the deadline."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return socket.create_connection((host, port), timeout=max(1.0, deadline - time.monotonic()))
        except OSError as error:
            last_error = error
            time.sleep(RETRY_S)
    raise RendezvousError(f"could not reach process 0 at {host}:{port} within {timeout_s:g} s ({last_error})")


def report_failure(host: str, port: int, rank: int, record: dict, run_token: str | None,
                   timeout_s: float = 5.0) -> bool:
    """Tell process 0 that this rank failed (best effort: process 0 may be gone; another run's ignores it)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            _send(sock, {"op": "fail", "rank": rank, "record": record, "run": run_token})
        return True
    except OSError:
        return False
