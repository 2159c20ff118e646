"""Check a `bench --json` record from a container run (read from stdin).

    ... | python3 check_record.py FRAMEWORK

Exit 0 with a one-line summary when the record says status ok, ran on
FRAMEWORK, detected Docker from inside and names its image; else exit 1 with
the reason. Used by `make compose-smoke` / ci.sh; tests/test_containers.py
makes the same checks with pytest.
"""

import json
import sys


def parse(text: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # Tolerate stray lines around a one-line record.
        for line in reversed(text.splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        raise


def problems(rec: dict, framework: str) -> list[str]:
    prov = rec.get("provenance") or {}
    fw = (prov.get("framework") or {}).get("name")
    out = []
    if rec.get("status") != "ok":
        out.append(f"status is {rec.get('status')!r}, error {rec.get('error')!r}")
    if prov.get("container_runtime") != "docker":
        out.append(f"container_runtime is {prov.get('container_runtime')!r}, not 'docker'")
    if not prov.get("image"):
        out.append("provenance.image is empty (BENCH_IMAGE not set in the image?)")
    if (rec.get("config") or {}).get("framework") != framework:
        out.append(f"config.framework is {(rec.get('config') or {}).get('framework')!r}, not {framework!r}")
    if fw is None:
        out.append("provenance.framework is missing")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("torch", "tensorflow"):
        print("usage: check_record.py {torch,tensorflow} < record.json", file=sys.stderr)
        return 2
    text = sys.stdin.read()
    if not text.strip():
        print(f"check_record: error: no record on stdin ({argv[0]} run failed?)", file=sys.stderr)
        return 1
    try:
        rec = parse(text)
    except json.JSONDecodeError as e:
        print(f"check_record: error: output is not a JSON record ({e}): {text[:200]!r}", file=sys.stderr)
        return 1
    bad = problems(rec, argv[0])
    if bad:
        print(f"check_record: error: {argv[0]} record: " + "; ".join(bad), file=sys.stderr)
        return 1
    thr = (rec.get("throughput") or {}).get("images_per_sec")
    prov = rec["provenance"]
    print(f"check_record: ok: {argv[0]} {prov['framework'].get('version')} "
          f"{rec['config'].get('model')} image={prov['image']} runtime={prov['container_runtime']} "
          f"images/sec={thr}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
