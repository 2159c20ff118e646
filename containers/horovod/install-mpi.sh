#!/bin/sh
# The MPI of a Horovod image, from Debian: openmpi (openmpi-bin libopenmpi-dev) or mpich (mpich
# libmpich-dev, and no Open MPI at all: HPC runtimes such as Shifter/Sarus swap the MPICH-ABI libmpi
# for the host's). Run by the image's final stage and by its build stage, which has the compilers.
set -eu
case "${1:-}" in
    openmpi) pkgs="openmpi-bin libopenmpi-dev" ;;
    mpich) pkgs="mpich libmpich-dev" ;;
    *) echo "MPI must be openmpi or mpich, not '${1:-}'" >&2; exit 2 ;;
esac
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
rm -rf /var/lib/apt/lists/*
