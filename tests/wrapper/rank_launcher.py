#!/usr/bin/env python3
"""rank_launcher.py: a stand-in for multi-process launchers (python -m torch.distributed.run,
mpirun, srun): starts N copies of a program, each with its rank in the environment, and
waits for all of them.

Usage: rank_launcher.py [--nproc N] [--style torch|mpi|slurm|local] [--stagger] -- PROGRAM [ARGS...]
  --style    which variables carry the rank: torch (RANK, LOCAL_RANK, WORLD_SIZE; default),
             mpi (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE), slurm (SLURM_PROCID,
             SLURM_NTASKS), local (LOCAL_RANK only)
  --stagger  start rank 0 only after every other rank has exited: its traces are written
             before rank 0 even starts (what a fixed output name must survive)
Children are started with fork+exec (subprocess) and inherit the launcher's environment,
LD_PRELOAD included. Prints "rank=R pid=P status=S" per rank; exits with the first non-zero
status (like torchrun), else 0.
"""
import argparse
import os
import subprocess
import sys

STYLES = {
    "torch": lambda r, n: {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n)},
    "mpi": lambda r, n: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(n)},
    "slurm": lambda r, n: {"SLURM_PROCID": str(r), "SLURM_NTASKS": str(n)},
    "local": lambda r, n: {"LOCAL_RANK": str(r)},
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--style", choices=sorted(STYLES), default="torch")
    parser.add_argument("--stagger", action="store_true")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program")
    children = []
    for rank in range(args.nproc):
        env = dict(os.environ)
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                     "SLURM_PROCID"):
            env.pop(name, None)
        env.update(STYLES[args.style](rank, args.nproc))
        if args.stagger and rank == 0:
            children.append(None)  # started last, below
            continue
        children.append(subprocess.Popen(program, env=env))
    statuses = [None] * args.nproc
    for rank, child in enumerate(children):
        if child is not None:
            statuses[rank] = child.wait()
    if args.stagger:
        env = dict(os.environ)
        env.update(STYLES[args.style](0, args.nproc))
        children[0] = subprocess.Popen(program, env=env)
        statuses[0] = children[0].wait()
    for rank, child in enumerate(children):
        print(f"rank={rank} pid={child.pid} status={statuses[rank]}", flush=True)
    bad = [s for s in statuses if s != 0]
    return (128 - bad[0] if bad[0] < 0 else bad[0]) if bad else 0


if __name__ == "__main__":
    sys.exit(main())
