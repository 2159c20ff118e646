"""The Strategy interface: what a --strategy means for processes, roles and results.

Everything outside a strategy's own file asks its object instead of comparing
its name: which frameworks have it, how many processes (workers, num_ps) take,
the role of a process, whether the chief measures and gathers every worker's
results itself, and whether replicas should end with identical parameters.
No framework is imported here: bench's CLI, the launchers and sweeps use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.errors import UsageError

WORKER = "worker"  # the role of a training process


@dataclass(frozen=True)
class Role:
    kind: str  # a role kind: "worker", or one of a strategy's own ("chief", "ps")
    index: int  # index among processes of that kind

    def as_dict(self) -> dict:
        return {"kind": self.kind, "index": self.index}


class Strategy:
    name: str
    summary: str  # what it is, in a few words (bench --help)
    frameworks: tuple[str, ...]
    uses_ps = False  # takes --num-ps parameter servers (and --ps-placement)
    gathers_at_chief = False  # the chief drives and times every worker; others only serve
    syncs_replicas = True  # replicas' parameters must end identical
    synchronous = True  # each step waits for every worker's (all-reduce): a straggler delays them all
    exchange = "all-reduce"  # how a step's gradients reach the others, as reports name it
    # The `bench comm` op that measures exactly one step's exchange of --model (reports predict with it;
    # None: none does, and reports predict nothing).
    exchange_op: str | None = "gradients"
    tf_cluster = False  # TensorFlow needs TF_CONFIG (a cluster spec) before it is imported
    # What `bench comm` measures under this strategy (empty: not a comm strategy), and the
    # transport the strategy brings itself, when it has one (parameter servers).
    comm_ops: tuple[str, ...] = ()
    comm_backend: str | None = None
    # A backend class per framework when this strategy needs more than the framework's own.
    backends: dict[str, str] = {}

    def processes(self, workers: int, num_ps: int) -> int:
        """Processes to start for `workers` training ranks."""
        return workers

    def workers(self, processes: int, num_ps: int) -> int:
        """Training ranks among `processes`."""
        return processes

    def role(self, rank: int, size: int, num_ps: int) -> Role:
        return Role(WORKER, rank)

    def serves_only(self, role: Role) -> bool:
        """True for processes that only host state for others and record nothing."""
        return False

    def measures_alone(self, rank: int, size: int) -> bool:
        """This process times every training rank's steps: a run of one, or the chief where it times every worker
        itself (gathers_at_chief). Stopped, it unwinds and keeps them in its own record (benchmarks/run/worker.py)."""
        return size == 1 or (self.gathers_at_chief and rank == 0)

    def supports(self, framework: str) -> bool:
        return framework in self.frameworks

    def num_ps_problem(self, num_ps: int, name=lambda option: "--" + option.replace("_", "-")) -> str | None:
        """Why `num_ps` parameter servers do not go with this strategy, or None; `name(option)`
        spells an option as the caller's input does (a flag; a sweep plan's key)."""
        if num_ps < 0:
            return f"{name('num_ps')} must be 0 or more, got {num_ps}"
        if self.uses_ps and num_ps < 1:
            return f"{name('strategy')} {self.name} needs {name('num_ps')} 1 or more"
        if not self.uses_ps and num_ps:
            takers = " or ".join(kind.name for kind in _defined(Strategy) if kind.uses_ps)
            return f"{name('num_ps')} {num_ps} needs {name('strategy')} {takers}"
        return None

    def check_num_ps(self, num_ps: int) -> None:
        problem = self.num_ps_problem(num_ps)
        if problem:
            raise UsageError(problem)

    def check_processes(self, size: int, num_ps: int) -> None:
        """Refuse a world too small for this strategy (one line)."""
        if self.workers(size, num_ps) < 1:
            raise UsageError(f"--strategy {self.name} needs at least {self.processes(1, num_ps)} processes, got {size}")


def _defined(cls: type) -> list[type]:
    """Every subclass of `cls` defined so far, in definition order: the strategies the package's registry
    imports, known here without importing the registry (which imports this module)."""
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_defined(sub)]
    return found
