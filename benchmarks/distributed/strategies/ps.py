"""`ps`: TensorFlow ParameterServerStrategy, as in seed 000.

Process 0 is the chief (coordinator): it schedules every worker's steps and times
them (benchmarks/frameworks/tf_ps.py). Processes 1..N are workers and the last
num_ps are parameter servers, so a cyclic launch (`srun -m cyclic`) co-locates
PS with workers. Workers and PS only serve the chief; its record covers all.
"""

from __future__ import annotations

from ...core.errors import UsageError
from .base import WORKER, Role, Strategy

CHIEF = "chief"
PS = "ps"  # the role of a parameter server, and TensorFlow's job name for it


class PsStrategy(Strategy):
    name = "ps"
    summary = "TF ParameterServerStrategy"
    frameworks = ("tensorflow",)
    uses_ps = True
    gathers_at_chief = True
    synchronous = False  # TF2 ParameterServerStrategy: asynchronous updates, no worker waits for another
    exchange = "push/pull"
    exchange_op = "ps_step"
    tf_cluster = True
    comm_ops = ("pull", "push", "ps_step")
    comm_backend = PS  # push/pull through the parameter servers themselves
    backends = {"tensorflow": "benchmarks.frameworks.tf_ps:TensorFlowPsFramework"}

    def processes(self, workers: int, num_ps: int) -> int:
        return workers + num_ps + 1  # the chief and the parameter servers beside the workers

    def workers(self, processes: int, num_ps: int) -> int:
        return processes - 1 - num_ps

    def role(self, rank: int, size: int, num_ps: int) -> Role:
        self.check_processes(size, num_ps)
        num_workers = self.workers(size, num_ps)
        if rank == 0:
            return Role(CHIEF, 0)
        if rank <= num_workers:
            return Role(WORKER, rank - 1)
        return Role(PS, rank - 1 - num_workers)

    def serves_only(self, role: Role) -> bool:
        return role.kind != CHIEF

    def check_processes(self, size: int, num_ps: int) -> None:
        if self.workers(size, num_ps) < 1:
            raise UsageError(
                f"--strategy ps --num-ps {num_ps} needs at least {num_ps + 2} processes "
                f"(1 chief + {num_ps} PS + 1 worker), got {size}"
            )
