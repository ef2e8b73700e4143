"""A job's own Python environment on a node, over deepvm's: where `setup:`'s `$DEEPVM_PIP install PKG` puts
packages, and what the job's ranks import beside deepvm's environment.

Why: ranks run deepvm's interpreter (the image's, e.g. /opt/pytorch/bin/python), which the login user may not
write to and Debian's pip refuses to install into (externally managed), so a job could not add the package its
script imports. The job's environment is `python -m venv --without-pip` of deepvm's interpreter, with a .pth file
in its site-packages that names deepvm's site-packages: its python sees torch and all else deepvm's has; pip,
imported from there, installs into the job's environment (a virtual environment: never externally managed) and
takes what deepvm's has as installed, so torch is never installed twice.

Ranks are forks of the node's warm server (training.node.warm), which runs deepvm's interpreter: a trainer rank
calls use() before the job's code runs, which puts the job environment's site-packages ahead of deepvm's, as the
job environment's own python orders them. Modules the warm server imported before the fork (torch, yaml,
pydantic: training.node.warm's PRELOAD) stay deepvm's, so what ranks need of deepvm must be in deepvm's
environment; staging checks it there.

    python -m training.node.jobenv DIR    make the environment at DIR over this interpreter (idempotent)
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

BASE_PTH = "_deepvm_base.pth"  # in the environment's site-packages: the site-packages of deepvm's interpreter


def site_packages(env: Path) -> Path:
    """The site-packages of the virtual environment at `env` made by this interpreter: venv's own scheme (from
    Python 3.11; 3.10's venv uses posix_prefix's layout), whatever scheme this interpreter installs by (Debian's
    posix_local is not a venv's)."""
    scheme = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"
    return Path(sysconfig.get_path("purelib", scheme, vars={"base": str(env), "platbase": str(env)}))


def create(env: Path) -> None:
    """Make the job's environment at `env` over this interpreter unless it is there, and name this interpreter's
    site-packages in its .pth file (again each time: the file last, so an environment without it was never
    finished, and is made anew), and its own torchrun."""
    pth = site_packages(env) / BASE_PTH
    if not pth.exists():
        import venv  # only here: a rank that imports this module for use() never needs it

        venv.EnvBuilder(clear=True, symlinks=True, with_pip=False).create(env)
    _torchrun_here(env)
    pth.write_text("".join(f"{path}\n" for path in site.getsitepackages()))


def _torchrun_here(env: Path) -> None:
    """A `torchrun` of the job's environment: deepvm's own is a console script of deepvm's Python, whose workers
    would not import what setup installed there, and a `run.command` finds this one first on its PATH."""
    script = env / "bin" / "torchrun"
    script.write_text(
        f"#!{env / 'bin' / 'python'}\nimport sys\nfrom torch.distributed.run import main\n\nsys.exit(main())\n"
    )
    script.chmod(0o755)


def use(env: Path) -> None:
    """Import the packages of the job's environment at `env` in this process (deepvm's interpreter) as that
    environment's python would: its site-packages ahead of deepvm's, its .pth files run; and name its python in
    DEEPVM_PYTHON, for the processes the job starts."""
    env = env.resolve()  # the job's name for it is a link (training.control.staging): say where it is
    ours = str(site_packages(env))
    if ours not in sys.path:
        base = set(site.getsitepackages())
        at = next((i for i, path in enumerate(sys.path) if path in base), len(sys.path))
        sys.path.insert(at, ours)
    site.addsitedir(ours)  # its .pth files: deepvm's site-packages are on sys.path already, others are added
    os.environ["DEEPVM_PYTHON"] = str(env / "bin" / "python")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m training.node.jobenv DIR", file=sys.stderr)
        return 2
    create(Path(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
