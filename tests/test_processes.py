"""benchmarks.core.processes finds a real process tree (psutil): children, descendants, parents, a group's
members and argv; a zombie counts as gone; a stopped group leaves nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from benchmarks.core import processes

PARENT = ("import subprocess, sys, time\n"
          "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
          "print(child.pid, flush=True)\n"
          "time.sleep(60)\n")


def test_a_process_tree_is_found_and_a_zombie_is_gone():
    top = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        leaf = int(top.stdout.readline())
        assert processes.children(top.pid) == [leaf]
        assert {top.pid, leaf} <= set(processes.descendants())
        assert top.pid in processes.children()  # of this process
        assert processes.parent(leaf) == top.pid and processes.alive(leaf)
        assert sorted(processes.group_members(top.pid)) == sorted([top.pid, leaf])
        assert processes.command_lines()[top.pid][:2] == [sys.executable, "-c"]
        os.kill(leaf, signal.SIGKILL)  # not reaped by its parent: a zombie, which is dead
        deadline = time.monotonic() + 10
        while processes.alive(leaf) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not processes.alive(leaf) and processes.children(top.pid) == []
        assert processes.group_members(top.pid) == [top.pid]
    finally:
        processes.stop_process_group(top, grace_s=5)
    assert top.returncode == -signal.SIGTERM and not processes.alive(top.pid)
    assert processes.parent(top.pid) is None and processes.descendants(top.pid) == []



def test_stop_scope_raises_notes_and_restores():
    """The one stop-signal policy: raised while armed (once, if asked), only noted otherwise and raised at
    arm(), handed to `then`, and the previous handler back on exit."""
    import pytest

    class Stopped(Exception):
        pass

    def signal_me(signum):
        os.kill(os.getpid(), signum)
        time.sleep(0.1)  # the handler runs at the next bytecode of the main thread

    before = signal.getsignal(signal.SIGTERM)
    seen = []
    with pytest.raises(Stopped):
        with processes.StopScope(Stopped, then=seen.append):
            signal_me(signal.SIGTERM)
    assert seen == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) == before

    scope = processes.StopScope(Stopped, once=True, armed=False).install()
    try:
        signal_me(signal.SIGINT)  # before arm(): only noted, then raised by arm()
        with pytest.raises(Stopped):
            scope.arm()
        scope.armed = True
        with pytest.raises(Stopped):
            signal_me(signal.SIGTERM)
        signal_me(signal.SIGTERM)  # once: a second one is only noted
        assert scope.received == [signal.SIGINT, signal.SIGTERM, signal.SIGTERM]
    finally:
        scope.restore()
    assert signal.getsignal(signal.SIGTERM) == before


def test_returns_within_waits_raises_and_gives_up():
    import threading

    import pytest

    assert processes.returns_within(lambda: None, 5)
    with pytest.raises(ValueError, match="the call's own"):
        processes.returns_within(lambda: (_ for _ in ()).throw(ValueError("the call's own")), 5)
    started = time.monotonic()
    assert not processes.returns_within(threading.Event().wait, 0.5)
    assert 0.5 <= time.monotonic() - started < 5


def test_returns_within_calls_inline_where_no_thread_starts(monkeypatch):
    """Under an address-space limit just hit (a max-batch probe's OOM) no thread starts: the call runs in
    the caller's thread, so the OOM stays the record's status (test_maxbatch's limit run sees it for real)."""
    import threading

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    called = []
    assert processes.returns_within(lambda: called.append(threading.current_thread()), 5)
    assert called == [threading.main_thread()]
