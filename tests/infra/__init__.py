"""Reusable test infrastructure (local Slurm cluster, MPI launchers)."""
