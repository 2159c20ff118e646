"""Reading results at scale: `benchrun report`, `compare` and `export` on stores of 10^3 .. 10^6 records.

    .venv/bin/python perf/report_scale.py [--sizes 1000,10000,100000,1000000] [--baseline-ref REF] [--same-as REF]

Stores are built from the case study's 20 real records (examples/seed-000-table1,
~6 KB each: per-step times of every repeat and rank), replicated with distinct
run ids and varied: framework label (tensorflow/torch), batch size (4, 8),
host (8 names), a year of timestamps, throughput and RSS with noise, 2% of runs
out of memory, 40% of the tensorflow batch-4 all-reduce runs under docker (the
runtime section). 44 configurations whatever the size, so the cost that grows is the records'.
Stores are cached under --workdir (same size and generator: reused).

Each command runs in a fresh process, reading the store afresh (there is no cache of
what a store holds; the OS page cache keeps the file in memory unless --drop-caches).
Printed per size and command: wall time, peak RSS of its largest process (ru_maxrss)
and of all its processes together (sampled; `report` draws figures in worker
processes), and the fitted exponent b of wall = a * n^b. With --baseline-ref,
`benchrun report` of that git revision (the Python reader) runs beside it up to
--baseline-max records and the ratio is printed; with --same-as, report, compare and
export --csv of that revision run too and their results are compared byte for byte.
Goals (issue 15): 100,000 records report < 10 s; 1,000,000 < 60 s and < 2 GB.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "examples" / "seed-000-table1" / "results.jsonl"
GENERATOR = 1  # bump when the stores change: cached stores of another version are rebuilt
HOSTS = [f"node{i:02d}" for i in range(1, 9)]
YEAR_S = 365 * 24 * 3600
START = 1764547200  # 2025-12-01T00:00:00Z


def _templates() -> list[tuple[list[str], dict]]:
    """Per (case record, framework, batch, runtime, status): the record's JSON split at its
    varying values, so a store line is one join (fast enough for 10^6 records)."""
    case = [json.loads(line) for line in CASE.read_text().splitlines() if line.strip()]
    marks = {"run_id": "@@RUN@@", "timestamp_utc": "@@TS@@", "hostname": "@@HOST@@", "ips": "@@IPS@@", "rss": "@@RSS@@"}
    out = []
    for envelope in case:
        record = envelope["record"]
        for framework in ("tensorflow", "torch"):
            for batch in (4, 8):
                for runtime in ("local", "docker"):
                    for status in ("ok", "oom"):
                        r = json.loads(json.dumps(record))
                        r["run_id"], r["timestamp_utc"] = marks["run_id"], marks["timestamp_utc"]
                        r["config"]["framework"] = r["provenance"]["framework"]["name"] = framework
                        r["config"]["batch_size"] = batch
                        r["provenance"]["hostname"] = marks["hostname"]
                        r["world"]["hosts"] = [marks["hostname"]]
                        r["provenance"]["requested_runtime"] = runtime
                        r["provenance"]["container_runtime"] = "none" if runtime == "local" else runtime
                        r["memory"]["host_rss_peak_bytes"] = marks["rss"]
                        if status == "ok":
                            r["throughput"]["images_per_sec"] = marks["ips"]
                        else:
                            r.update(status="oom", throughput=None, step_time_s=None, input_wait_s=None, repeats=[],
                                     ranks=[], replicas=None, final_loss=None,
                                     error={"kind": "oom", "message": f"out of memory at batch {batch}"})
                        text = json.dumps({**envelope, "record": r})  # a sweep store's line
                        for name in ("ips", "rss"):
                            text = text.replace(f'"{marks[name]}"', marks[name])
                        parts, order = [], []
                        while True:
                            found = [(text.find(m), name) for name, m in marks.items() if m in text]
                            if not found:
                                break
                            at, name = min(found)
                            parts.append(text[:at])
                            order.append(name)
                            text = text[at + len(marks[name]):]
                        parts.append(text + "\n")
                        out.append((parts, order, dict(framework=framework, batch=batch, runtime=runtime, status=status,
                                                       strategy=record["config"]["strategy"], index=case.index(envelope),
                                                       ips=record["throughput"]["images_per_sec"],
                                                       rss=record["memory"]["host_rss_peak_bytes"])))
    return out


def generate(path: Path, n: int, seed: int = 0) -> None:
    """n records as a sweep store holds them (envelopes: the sweep point, command and log beside each record)."""
    rng = random.Random(seed)
    templates = _templates()
    by_key: dict[tuple, list] = {}
    for t in templates:
        by_key.setdefault((t[2]["framework"], t[2]["batch"], t[2]["runtime"], t[2]["status"]), []).append(t)
    tmp = path.with_suffix(".partial")
    with tmp.open("w") as f:
        lines = []
        for i in range(n):
            framework = rng.choice(("tensorflow", "torch"))
            batch = rng.choice((4, 8))
            status = "oom" if rng.random() < 0.02 else "ok"
            parts, order, info = rng.choice(by_key[(framework, batch, "local", status)])
            if framework == "tensorflow" and batch == 4 and info["strategy"] == "allreduce" and rng.random() < 0.4:
                parts, order, info = by_key[(framework, batch, "docker", status)][info["index"]]
            seconds = START + int(i * YEAR_S / n)
            values = {
                "run_id": f"{rng.getrandbits(128):032x}",
                "timestamp_utc": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{i % 1000:03d}Z",
                "hostname": rng.choice(HOSTS),
                "ips": repr(info["ips"] * (batch / 4) ** 0.5 * rng.gauss(1.0, 0.05)),
                "rss": str(int(info["rss"] * rng.gauss(1.0, 0.02))),
            }
            line = [parts[0]]
            for name, part in zip(order, parts[1:]):
                line.append(values[name])
                line.append(part)
            lines.append("".join(line))
            if len(lines) == 10_000:
                f.write("".join(lines))
                lines = []
        f.write("".join(lines))
    tmp.replace(path)


def store(workdir: Path, n: int) -> Path:
    path = workdir / f"store-{n}-g{GENERATOR}.jsonl"
    if not path.exists():
        started = time.perf_counter()
        generate(path, n)
        print(f"# generated {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - started:.0f} s",
              flush=True)
    return path


def measure(command: list[str], cwd: Path, env: dict, stdout: str | None = None) -> tuple[float, float, float, int, str]:
    """(wall s, peak RSS GB of its largest process, peak RSS GB of all its processes together, exit code,
    last stderr line) of one command in a fresh process; its stdout to the file `stdout`. The sum is
    sampled every 20 ms (report draws figures in worker processes) and counts shared pages in each
    process: an upper bound."""
    import psutil

    started = time.perf_counter()
    with open(stdout or os.devnull, "w") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        tree, total = psutil.Process(process.pid), 0
        while process.poll() is None:
            try:
                members = [tree, *tree.children(recursive=True)]
                total = max(total, sum(member.memory_info().rss for member in members))
            except psutil.Error:  # a process ended while being looked at
                pass
            time.sleep(0.02)
        wall = time.perf_counter() - started
        err.seek(0)
        lines = [line for line in err.read().splitlines() if line.strip()]
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest process so far: one command per helper
    return wall, peak_kb / 1024 ** 2, total / 1024 ** 3, process.returncode, lines[-1] if lines else ""


def child_peak(command: list[str], cwd: Path, env: dict, stdout: str | None = None) -> tuple[float, float, float, int, str]:
    """measure() in a fresh helper process, so ru_maxrss is this command's own peak."""
    code = ("import json, sys; sys.path.insert(0, %r); import report_scale as r; "
            "print(json.dumps(r.measure(%r, r.Path(%r), %r, %r)))" % (str(Path(__file__).parent), command, str(cwd), env,
                                                                     stdout))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return tuple(json.loads(out.splitlines()[-1]))


def drop_caches() -> None:
    """Empty the OS page cache (root only), so the next read of a store comes from the disk."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def baseline_tree(ref: str, workdir: Path) -> Path:
    """The repository at `ref` (git archive), for the reader before DuckDB."""
    tree = workdir / f"baseline-{ref}"
    if not tree.exists():
        data = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
        tmp = workdir / f"baseline-{ref}.partial"
        tmp.mkdir(parents=True, exist_ok=True)
        tarfile.open(fileobj=io.BytesIO(data)).extractall(tmp)
        tmp.rename(tree)
    return tree


def fit(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(wall) on log(n)."""
    if len(points) < 2:
        return None
    xs, ys = [math.log(n) for n, _ in points], [math.log(w) for _, w in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def commands(benchrun: list[str], path: Path, out: Path) -> dict[str, tuple[list[str], Path, str | None]]:
    """name -> (argv, its result file, file for its stdout)."""
    return {
        "report": (benchrun + ["report", str(path), "--out", str(out / "report")], out / "report" / "report.md", None),
        "export-parquet": (benchrun + ["export", str(path), "--parquet", str(out / "all.parquet")], out / "all.parquet", None),
        "export-csv": (benchrun + ["export", str(path), "--csv", str(out / "all.csv")], out / "all.csv", None),
        "compare": (benchrun + ["compare", str(path), str(path)], out / "compare.txt", str(out / "compare.txt")),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000,10000,100000,1000000", help="records per store, comma-separated")
    p.add_argument("--workdir", default="/tmp/dlbench-report-scale", help="stores and outputs (large: ~6 KB a record)")
    p.add_argument("--baseline-ref", help="git revision whose `benchrun report` (Python reader) runs beside")
    p.add_argument("--same-as", metavar="REF", help="git revision whose report, compare and export --csv must give "
                   "byte-identical results (checked up to --baseline-max records)")
    p.add_argument("--baseline-max", type=int, default=10_000, help="largest size the baseline and --same-as run at")
    p.add_argument("--commands", default="report,export-parquet,export-csv,compare", help="which to time, in this order")
    p.add_argument("--drop-caches", action="store_true", help="empty the OS page cache before each command (root): "
                   "the store is read from the disk, not from memory")
    args = p.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    wanted = args.commands.split(",")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    benchrun = [sys.executable, "-m", "runners"]
    print(f"# {os.cpu_count()} CPUs; load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"page cache {'dropped before each command' if args.drop_caches else 'kept (stores just written or read)'}",
          flush=True)
    rows, series = [], {}

    def row(n: int, mb: float, name: str, result: tuple, load: float, note: str) -> None:
        wall, peak, total, code, last = result
        ok = code == 0 or (name.startswith("compare") and code == 1)
        rows.append((n, mb, name, wall, peak, total, load, note if ok else f"exit {code}: {last}"))
        print("| " + " | ".join(_cells(rows[-1])) + " |", flush=True)

    for n in sizes:
        path = store(workdir, n)
        mb = path.stat().st_size / 1e6
        out = workdir / f"out-{n}"
        for name, (argv, _, stdout) in commands(benchrun, path, out).items():
            if name not in wanted:
                continue
            if args.drop_caches:
                drop_caches()
            load = os.getloadavg()[0]
            result = child_peak(argv, ROOT, env, stdout)
            series.setdefault(name, []).append((n, result[0]))
            row(n, mb, name, result, load, "")
        if n > args.baseline_max:
            continue
        if args.baseline_ref and "report" in wanted:
            tree = baseline_tree(args.baseline_ref, workdir)
            load = os.getloadavg()[0]
            result = child_peak(benchrun + ["report", str(path), "--out", str(out / "report-baseline")], tree,
                                {**os.environ, "PYTHONPATH": str(tree)})
            new = next(r for r in rows if r[0] == n and r[2] == "report")
            row(n, mb, f"report @{args.baseline_ref}", result, load,
                f"new/baseline: wall {new[3] / result[0]:.3f}, RSS {new[4] / result[1]:.3f}")
        if args.same_as:
            tree = baseline_tree(args.same_as, workdir)
            theirs = commands(benchrun, path, out / f"at-{args.same_as}")
            for name, (argv, result_file, stdout) in commands(benchrun, path, out).items():
                if name not in wanted or name == "export-parquet":  # Parquet files carry the writer's version
                    continue
                load = os.getloadavg()[0]
                result = child_peak(theirs[name][0], tree, {**os.environ, "PYTHONPATH": str(tree)}, theirs[name][2])
                same = result_file.read_bytes() == theirs[name][1].read_bytes()
                row(n, mb, f"{name} @{args.same_as}", result, load,
                    f"result {'byte-identical' if same else 'DIFFERENT'}; new/old wall "
                    f"{next(r for r in rows if r[0] == n and r[2] == name)[3] / result[0]:.3f}")
    print("\n| records | store MB | command | wall s | peak RSS GB (largest process) | peak RSS GB (all its processes) "
          "| load (1 min) at start | note |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(_cells(r)) + " |")
    print()
    for name, points in series.items():
        big = [pt for pt in points if pt[0] >= 10_000]
        whole, top = fit(points), fit(big)
        print(f"fitted exponent b (wall ~ n^b), {name}: {whole:.2f} over all sizes" if whole is not None else name,
              f"; {top:.2f} over n >= 10,000" if top is not None and len(big) < len(points) else "")
    print()
    for n, limit_s, limit_gb in ((100_000, 10, None), (1_000_000, 60, 2.0)):
        for r in rows:
            if r[0] == n and r[2] in wanted:
                verdict = r[3] < limit_s and (limit_gb is None or r[5] < limit_gb)
                print(f"goal {r[2]} at {n:,} records: < {limit_s} s" + (f" and < {limit_gb} GB" if limit_gb else "")
                      + f": {r[3]:.1f} s, {r[5]:.2f} GB: {'met' if verdict else 'NOT met'}")
    print(f"# load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


def _cells(row: tuple) -> list[str]:
    n, mb, name, wall, peak, total, load, note = row
    return [f"{n:,}", f"{mb:,.0f}", name, f"{wall:.1f}", f"{peak:.2f}", f"{total:.2f}", f"{load:.1f}", note]


if __name__ == "__main__":
    sys.exit(main())
