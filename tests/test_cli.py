"""Bad input: one line naming the problem and the choices, exit 2, nothing written."""

import inspect
import io
import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from infra.helpers import ROOT, bench

FAST = ["--framework", "torch", "--model", "resnet50"]


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (["--model", "resnet50"], {}, "no framework given"),
        (["--framework", "mxnet"], {}, "unknown framework 'mxnet' (choices: torch, tensorflow, pytorch, tf)"),
        (["--model", "resnet50"], {"BENCH_FRAMEWORK": "caffe2"}, "unknown framework 'caffe2'"),
        (["--framework", "torch", "--model", "vgg16"], {}, "unknown model 'vgg16' (choices: alexnet, resnet50"),
        (FAST + ["--batch-size", "0"], {}, "--batch-size must be a positive integer"),
        (FAST + ["--batch-size", "-3"], {}, "--batch-size must be a positive integer"),
        (FAST + ["--batch-size", "two"], {}, "expected an integer, got 'two'"),
        (FAST + ["--num-batches", "0"], {}, "--num-batches must be a positive integer"),
        (FAST + ["--image-size", "0"], {}, "--image-size must be a positive integer"),
        (FAST + ["--num-warmup-batches", "-1"], {}, "--num-warmup-batches must be zero or more"),
        (FAST + ["--repeats", "0"], {}, "--repeats must be a positive integer"),
        (["--framework", "torch", "--model", "inception3", "--image-size", "64"], {}, "too small for inception3 (minimum 75)"),
        (["--framework", "tf", "--model", "alexnet", "--image-size", "32"], {}, "too small for alexnet (minimum 63)"),
        (FAST + ["--precision", "fp8"], {}, "--precision 'fp8' is invalid (choices: fp32, tf32, amp-fp16, amp-bf16, amp)"),
        (FAST + ["--device", "tpu"], {}, "--device 'tpu' is invalid (choices: auto, cpu, gpu)"),
        (FAST + ["--data-format", "nhwc"], {}, "(choices: channels_first, channels_last)"),
        (FAST + ["--xla"], {}, "--xla applies to --framework tensorflow only"),
        (FAST + ["--step-timing", "events", "--device", "cpu"], {}, "--step-timing events needs a GPU"),
        (["--framework", "tf", "--step-timing", "events"], {}, "TensorFlow has no per-step device events (choices for it: sync)"),
        (FAST + ["--step-timing", "async"], {}, "--step-timing 'async' is invalid (choices: sync, events)"),
        (["--framework", "tf", "--data-format", "channels_first", "--device", "cpu"], {}, "support only channels_last"),
        (["--framework", "tf", "--strategy", "ddp"], {}, "--strategy ddp is not available for tensorflow (choices: none, "
                                                         "horovod, allreduce, ps)"),
        (["--framework", "tf", "--strategy", "ps"], {}, "--strategy ps needs --num-ps 1 or more"),
        (["--framework", "tf", "--strategy", "gossip"], {}, "unknown strategy 'gossip' (choices: none, ddp, horovod, allreduce, "
                                                            "ps, fsdp)"),
        (["--framework", "tf", "--strategy", "fsdp"], {}, "--strategy fsdp is not available for tensorflow (choices: none, "
                                                          "horovod, allreduce, ps)"),
        (["--framework", "tf", "--strategy", "ps", "--num-ps", "1", "--ps-placement", "random"], {}, "(choices: round-robin, "
                                                                                                     "greedy)"),
        (FAST + ["--timeout", "0"], {}, "--timeout must be positive"),
        (FAST + ["--data-dir", "/nonexistent/imagenet"], {}, "--data-dir '/nonexistent/imagenet' does not exist"),
        (FAST + ["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, env, expected):
    output = tmp_path / "out.jsonl"
    result = bench(*args, "--output", str(output), env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("bench: error: ")
    assert expected in lines[0]
    assert result.stdout == ""
    assert not output.exists()


def test_empty_data_dirs_are_rejected(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = bench(*FAST, "--data-dir", str(empty), timeout=60)
    assert result.returncode == 2 and "has no class sub-directories" in result.stderr
    (empty / "cats").mkdir()
    (empty / "cats" / "notes.txt").write_text("not an image")
    result = bench(*FAST, "--data-dir", str(empty), timeout=60)
    assert result.returncode == 2 and "has no images with extensions .jpg, .jpeg, .png" in result.stderr


def test_output_that_is_a_directory_is_rejected(tmp_path):
    result = bench(*FAST, "--output", str(tmp_path), timeout=60)
    assert result.returncode == 2 and "is a directory" in result.stderr


def bench_without(package: str, argv: list[str]) -> subprocess.CompletedProcess:
    """bench's main in an interpreter where `package` looks not installed: importlib's find_spec answers
    None for it (a stub package dir that fails find_spec is not possible)."""
    code = (
        "import sys, importlib.util as u; "
        "real = u.find_spec; "
        f"u.find_spec = lambda name, *a: None if name.split('.')[0] == {package!r} else real(name, *a); "
        f"from benchmarks.cli import main; sys.exit(main({argv!r}))"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_framework_not_installed_is_a_usage_error(tmp_path):
    result = bench_without("tensorflow", ["--framework", "tf", "--model", "resnet50"])
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "bench: error: framework 'tensorflow' is not installed in this environment "
        "(missing: tensorflow; installed: torch)"
    )


def test_help_and_version_import_no_framework():
    code = (
        "import sys, io, contextlib\n"
        "from benchmarks.cli import main\n"
        "for argv in (['--help'], ['--version'], ['make-dataset', '--help']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try: main(argv)\n"
        "        except SystemExit: pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'torchvision', 'tensorflow', 'keras', 'numpy', 'pydantic', 'rich', 'scipy', 'mlperf_logging'))\n"
        "print(heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_mllog_without_mlperf_logging_is_one_line_exit_2():
    result = bench_without("mlperf_logging", ["--framework", "torch", "--model", "resnet50", "--mllog"])
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("bench: error: --mllog needs MLCommons' mlperf-logging package")


def test_mllog_lines_are_written_by_mlperf_logging():
    """The package's own line (its key order, the caller's file and line in the metadata); our metadata kept."""
    from benchmarks.results.mllog import MLLogger

    stream = io.StringIO()
    logger = MLLogger(True, stream)
    logger.start("epoch_start", 0, repeat=0)
    called_at = inspect.currentframe().f_lineno - 1
    logger.event("tracked_stats", {"throughput": np.float32(2.5)})
    assert "mlperf_logging.mllog.mllog" in sys.modules
    first, second = [line.split(" ", 1) for line in stream.getvalue().splitlines()]
    assert first[0] == second[0] == ":::MLLOG"
    event = json.loads(first[1])
    assert list(event) == ["namespace", "time_ms", "event_type", "key", "value", "metadata"]
    assert event["event_type"] == "INTERVAL_START" and event["key"] == "epoch_start" and event["value"] == 0
    assert event["metadata"] == {"file": "tests/test_cli.py", "lineno": called_at, "repeat": 0}
    assert json.loads(second[1])["value"] == {"throughput": 2.5}  # numpy scalars encoded by the package
    silent = io.StringIO()
    MLLogger(False, silent).event("tracked_stats", 1)
    assert silent.getvalue() == ""


def test_help_and_version_are_fast():
    for flag in ("--help", "--version"):
        start = time.perf_counter()
        result = bench(flag, timeout=60)
        elapsed = time.perf_counter() - start
        assert result.returncode == 0
        assert elapsed < 1.0, f"bench {flag} took {elapsed:.2f} s"
    assert bench("--version").stdout.startswith("bench (dlbench) ")
    help_text = bench("--help").stdout
    for flag in ("--framework", "--model", "--batch-size", "--image-size", "--num-warmup-batches",
                 "--num-batches", "--repeats", "--precision", "--data-format", "--device", "--num-threads",
                 "--data-dir", "--output", "--json", "--mllog", "--seed", "--version", "--xla", "--timeout",
                 "make-dataset"):
        assert flag in help_text


HELPS = [["bench"], ["bench", "comm"], ["benchrun"]] + [
    ["benchrun", c] for c in ("launch", "run", "sweep", "compare-runtimes", "report", "compare", "export")]
DEVELOPER_NOTES = re.compile(r"\b(?:runners|benchmarks)\.[a-z_]+|\bissue \d+|\badd_parser\b|\bimported with\b")


@pytest.mark.parametrize("command", HELPS, ids=" ".join)
def test_every_help_is_a_user_text_with_an_example(command):
    """What the command does and how to call it, for a user: no module paths or project history
    (those live in the docstrings), and at least one indented example that calls it."""
    package = {"bench": "benchmarks", "benchrun": "runners"}[command[0]]
    shown = subprocess.run([sys.executable, "-m", package, *command[1:], "--help"], capture_output=True, text=True,
                           cwd=ROOT, timeout=60)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.split("\noptions:", 1)[0].split("\npositional arguments:", 1)[0]
    assert not DEVELOPER_NOTES.findall(text), text
    example = rf"^ {{2,}}{command[0]} " if len(command) == 1 else rf"^ {{2,}}(?:bench|benchrun) .*\b{command[-1]}\b"
    assert re.search(example, text, re.MULTILINE), text


def test_an_interval_over_too_few_repeats_says_why_it_is_wide():
    from benchmarks.results.output import interval_line

    assert interval_line("t-interval over repeats", 2) == (
        "interval: 95% t-interval over repeats (2 repeats: 1 degree of freedom, so wide whatever the spread; "
        "--repeats 5 or more narrows it)")
    assert "3 repeats: 2 degrees of freedom" in interval_line("t-interval over repeats", 3)
    assert interval_line("t-interval over repeats", 5) == "interval: 95% t-interval over repeats"
    assert interval_line("delta method on step times", 1) == "interval: 95% delta method on step times"
