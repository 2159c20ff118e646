"""The nccl-tests-style table `bench comm` prints (plain text: easy to compare by eye with
all_reduce_perf output)."""

from __future__ import annotations

from typing import TextIO


def lines(record: dict) -> list[str]:
    cfg, world = record["config"], record["world"]
    fw = record["provenance"].get("framework") or {}
    out = [f"# bench comm | {cfg['framework']} {fw.get('version', '')} | backend {cfg['backend']} | "
           f"{world['processes']} ranks on {world['nodes']} node(s) ({world['launcher']}) | "
           f"{fw.get('device_kind', '?')}: {fw.get('device_name', '?')} | runtime: {record['provenance']['container_runtime']}",
           f"# warmup {cfg['warmup_iters']} iters, {cfg['iters']} timed iters per size; time = mean per op (us); "
           "GB/s = 1e9 B/s; busbw = algbw x 2(n-1)/n for all-reduce (nccl-tests)",
           f"# {'op':>10} {'size (B)':>12} {'count':>11} {'time (us)':>11} {'algbw':>8} {'busbw':>8} {'#wrong':>7}  note"]
    for row in record["results"]:
        note = row.get("peer") or ""
        if row["op"] == "gradients":
            note = f"{len(row['buckets'])} messages: one step of {(record.get('gradients') or {}).get('model', '?')}"
        elif row["op"] == "pingpong":
            note = f"one-way latency, ranks {row['peer']}"
        elif row["op"] == "ps_step":
            note = (f"{len(row['buckets'])} variables of {(record.get('gradients') or {}).get('model', '?')} pulled, "
                    f"then pushed: {row['peer']}")
        out.append(f"  {row['op']:>10} {row['bytes']:>12} {row['elements']:>11} {row['time_s'] * 1e6:>11.1f} "
                   f"{row['algbw_gbps']:>8.3f} {row['busbw_gbps']:>8.3f} {row['wrong']:>7}  {note}")
    allreduce = [r for r in record["results"] if r["op"] == "allreduce"]
    if allreduce:
        average = sum(r["busbw_gbps"] for r in allreduce) / len(allreduce)
        peak = max(allreduce, key=lambda r: r["busbw_gbps"])
        out.append(f"# avg allreduce busbw: {average:.3f} GB/s; peak {peak['busbw_gbps']:.3f} GB/s at {peak['bytes']} B")
    if record.get("placement"):
        out.append("# placement (" + cfg["ps_placement"] + "): " + ", ".join(
            f"ps {load['ps']}: {load['variables']} variables, {load['bytes'] / 2**20:.1f} MiB" for load in record["placement"]))
        out.append("# pull/push/ps_step: every worker at once; time = each worker's own stamps (its transfer only), "
                   "averaged over workers")
    if record["status"] != "ok":
        out.append(f"# status: {record['status']}: {record['error']['message']}")
    else:
        out.append(f"# results checked on every rank: {'all correct' if record['correct'] else 'WRONG'}")
    return out


def render(record: dict, stream: TextIO) -> None:
    stream.write("\n".join(lines(record)) + "\n")
    stream.flush()
