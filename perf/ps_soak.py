"""Hunt the parameter-server hang (issue 26): repeat a 2-node TF PS run until it hangs or passes N times.

    python perf/ps_soak.py [-n 100] [--hog 2] [--limit-s 240] [--cases ps,ps-comm,ddp,allreduce]
                           [--out perf/ps_soak/DATE]

A TensorFlow parameter-server run over two emulated Slurm nodes once hung until its test's 300 s
limit. This starts its own 2-node cluster (scripts/local-slurm.sh, needs root), keeps --hog CPU-bound
processes running beside it (the load of a shared CI machine), and runs the cases in turn with
`benchrun launch --launcher srun`, without bench's --timeout (a hang must show as one). A run that
outlives --limit-s is a hang: every bench worker of the cluster gets SIGUSR1 (faulthandler: each
thread's Python stack on its stderr), the output is kept as OUT/hang-CASE-I.log, and the run is
killed. OUT/runs.jsonl has one line per run (case, seconds, exit, hung); the summary is printed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SLURM = ROOT / "scripts" / "local-slurm.sh"
TINY = ["--model", "alexnet", "--image-size", "64", "--batch-size", "2", "--num-threads", "1"]
CASES = {
    "ps": ["-n", "2", "--num-ps", "1", "--", "--framework", "tensorflow", "--strategy", "ps", *TINY,
           "--num-warmup-batches", "1", "--num-batches", "4"],
    "ps-comm": ["-n", "2", "--num-ps", "1", "--", "--framework", "tensorflow", "comm", "--strategy", "ps",
                "--model", "alexnet", "--image-size", "64", "--ops", "pull,ps_step", "--max-bytes", "64K", "--iters", "2",
                "--warmup-iters", "1"],
    "ddp": ["-n", "2", "--", "--framework", "torch", "--strategy", "ddp", *TINY, "--num-warmup-batches", "1",
            "--num-batches", "4"],
    "allreduce": ["-n", "2", "--", "--framework", "tensorflow", "--strategy", "allreduce", *TINY,
                  "--num-warmup-batches", "1", "--num-batches", "4"],
}


def hog() -> None:
    while True:
        pass


def cluster_workers(conf: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "benchmarks.run.worker" in " ".join(proc.info["cmdline"] or []) and proc.environ().get("SLURM_CONF") == conf:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def one_run(case: str, index: int, env: dict, conf: str, limit_s: float, out: Path, port: int) -> dict:
    ports = ["--rendezvous-port", str(port), "--worker-port", str(port + 10), "--ps-port", str(port + 20)]
    argv = [sys.executable, "-m", "runners", "launch", "--launcher", "srun", "--launcher-arg=--nodes=2",
            *CASES[case], *ports]
    log = out / f"run-{case}-{index}.log"
    started = time.monotonic()
    with open(log, "w") as sink:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code, hung = proc.wait(timeout=limit_s), False
        except subprocess.TimeoutExpired:
            hung = True
            for worker in cluster_workers(conf):
                worker.send_signal(signal.SIGUSR1)
            time.sleep(5)  # the stacks reach the log through bench and srun
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            subprocess.run(["scancel", "--full", "--user", str(os.getuid())], env=env, capture_output=True)
    seconds = time.monotonic() - started
    if hung:
        log.rename(out / f"hang-{case}-{index}.log")
    else:
        log.unlink()
    return {"case": case, "run": index, "seconds": round(seconds, 1), "exit": code, "hung": hung}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=100, help="runs of each case (default 100)")
    p.add_argument("--hog", type=int, default=multiprocessing.cpu_count(), help="CPU-bound processes beside the runs")
    p.add_argument("--limit-s", type=float, default=240.0, help="a run longer than this is a hang (default 240)")
    p.add_argument("--cases", default="ps,ps-comm", help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--out", type=Path, default=ROOT / "perf" / "ps_soak" / str(date.today()))
    p.add_argument("--port", type=int, default=4810)
    args = p.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    if any(c not in CASES for c in cases) or os.geteuid() != 0:
        print(f"ps_soak: error: needs root and cases of {', '.join(CASES)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    directory = f"/tmp/dlb-soak-{os.getpid()}"
    started = subprocess.run([str(SLURM), "start", "--nodes", "2", "--dir", directory, "--port", "17917"],
                             capture_output=True, text=True)
    if started.returncode != 0:
        print(f"ps_soak: error: local-slurm.sh start failed: {started.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return 1
    conf = f"{directory}/slurm.conf"
    env = {**os.environ, "SLURM_CONF": conf, "DLBENCH_COORDINATOR": "127.0.0.1"}
    hogs = [multiprocessing.Process(target=hog, daemon=True) for _ in range(args.hog)]
    for h in hogs:
        h.start()
    results, t0 = [], time.monotonic()
    try:
        for index in range(args.n):
            for case in cases:
                result = one_run(case, index, env, conf, args.limit_s, args.out, args.port)
                results.append(result)
                with open(args.out / "runs.jsonl", "a") as f:
                    f.write(json.dumps(result) + "\n")
                print(json.dumps(result), flush=True)
    finally:
        for h in hogs:
            h.terminate()
        subprocess.run([str(SLURM), "stop", "--dir", directory], capture_output=True)
    for case in cases:
        mine = [r for r in results if r["case"] == case]
        secs = sorted(r["seconds"] for r in mine)
        print(f"{case}: {len(mine)} runs, {sum(r['hung'] for r in mine)} hung, "
              f"{sum(r['exit'] != 0 and not r['hung'] for r in mine)} failed, median {secs[len(secs) // 2]:.0f} s, "
              f"max {secs[-1]:.0f} s; {time.monotonic() - t0:.0f} s in all")
    return 1 if any(r["hung"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
