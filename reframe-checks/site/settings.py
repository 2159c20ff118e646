"""An example ReFrame site configuration for dlbench's checks: this machine, the `local`
scheduler and a Slurm partition (README, "In your ReFrame suite", says what a site edits).

    reframe -C reframe-checks/site/settings.py -c reframe-checks/dlbench_checks.py -r

Per partition, dlbench reads:
- `features`: the container runtimes it has (dlbench's runtime names: docker, apptainer,
  podman-hpc, ...) and `horovod` where Horovod runs; a training test with a container runtime
  runs only on partitions listing it;
- `container_platforms`: the runtimes ReFrame starts itself (Docker, Apptainer, Singularity, Sarus,
  Shifter: dlbench's shifter-ng); a one-rank test on such a runtime uses it, every other test goes
  through `benchrun --runtime`;
- `extras`: `dlbench_launcher` (benchrun's launcher for several ranks: `local` on one node,
  `srun` under Slurm, `mpirun`, ...), `dlbench_images` ({runtime: {framework: image}}, default
  dlbench-<framework>:latest; benchrun's --image where benchrun runs it), `dlbench_container_options`
  ({runtime: [options]}, for ReFrame's platforms: a read-only data mount goes here).
"""

site_configuration = {
    'systems': [
        {
            'name': 'dlbench-example',
            'descr': 'one host: the local scheduler, and a Slurm partition named debug',
            'hostnames': ['.*'],
            'modules_system': 'nomod',
            'partitions': [
                {
                    'name': 'local',
                    'descr': 'runs on this host, no scheduler',
                    'scheduler': 'local',
                    'launcher': 'local',
                    'environs': ['builtin'],
                    'max_jobs': 1,
                    'features': ['docker'],
                    'container_platforms': [{'type': 'Docker'}],
                    'extras': {'dlbench_launcher': 'local'},
                },
                {
                    'name': 'slurm',
                    'descr': 'Slurm partition debug; squeue polling (no accounting database needed)',
                    'scheduler': 'squeue',
                    'launcher': 'local',  # benchrun starts the ranks itself, with srun (dlbench_launcher)
                    'access': ['--partition=debug'],
                    'environs': ['builtin'],
                    'max_jobs': 2,
                    'features': [],
                    'extras': {'dlbench_launcher': 'srun'},
                },
            ],
        },
    ],
}
