"""``python -m spmdlab doctor``: see ``spmdlab.doctor``."""

import sys

USAGE = """usage: python -m spmdlab doctor

Run it as the job will run: mpiexec -n 4 python -m spmdlab doctor (or srun ...).
It prints the MPI library, thread level, node layout, shared memory, GPUs, versions
and launcher variables, then a verdict; exit status 0 when all is well."""


def main(argv):
    if argv[1:] != ["doctor"]:
        print(USAGE, file=sys.stderr if argv[1:] not in (["-h"], ["--help"]) else sys.stdout)
        return 0 if argv[1:] in (["-h"], ["--help"]) else 2
    from .doctor import main as doctor

    return doctor()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
