"""Make gcdoctor's virtual environment so that it sees the torch this machine already has.

    python3 tools/mkvenv.py .venv

`python3 -m venv --system-site-packages` only sees the *base* interpreter's packages. Where a vendor
ships torch in an environment of its own (a venv or conda env that `python3` runs from, such as
/opt/torch/.venv on the lent H200 machines), a plain venv made from it would not see that torch,
and the set-up would install a CPU torch over it. This script makes the venv with the system site
packages and, when `python3` is itself inside an environment, adds that environment's
site-packages to the new venv through a `.pth` file, after the venv's own: the vendor's torch,
CUDA/MUSA libraries and all, is then importable and pip counts it as installed, so nothing that
gcdoctor installs replaces it. An existing venv is kept (re-running is harmless).

`--browser` installs Chromium where none is found and apt-get can (root, or sudo without a password):
the HTML-report tests open report.html in it. It says in one line what it did and never fails the
set-up (without a browser those tests skip, and pytest's summary says which and how to include them).

`--cpu-adam` prints 1 where DeepSpeed's CPU Adam op should be built at install time (a GPU is
visible and a C++ compiler exists), else 0: the value of DS_BUILD_CPU_ADAM for the set-up command.
`--cpu-adam --tests` prints 1 wherever a C++ compiler and torch exist: the tests run the ZeRO-Offload
variant on the CPU too, so the test set-up builds the op with DeepSpeed instead of inside the tests.
Stdlib only: it runs before anything is installed.
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "_gcdoctor_outer_env.pth"


def outer_site_packages() -> list[str]:
    """The site-packages of the environment this interpreter runs in, when it is not the base one."""
    if sys.prefix == sys.base_prefix:
        return []  # a plain interpreter: --system-site-packages already sees its packages
    paths = []
    for p in [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]:
        if p not in paths and os.path.isdir(p):
            paths.append(p)
    return paths


def make_venv(target: Path) -> Path:
    if not (target / "pyvenv.cfg").is_file():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(target)], check=True)
    py = target / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    outer = outer_site_packages()
    pth = Path(purelib) / PTH_NAME
    if outer:
        pth.write_text("".join(f"{p}\n" for p in outer))
        print(f"{target}: sees the packages of {sys.prefix} ({', '.join(outer)})")
    elif pth.exists():
        pth.unlink()
    return target


def want_cpu_adam(tests: bool = False) -> str:
    """'1' where building DeepSpeed's CPU Adam at install time pays: a GPU and a compiler (for the
    tests: a compiler)."""
    if not (shutil.which("c++") or shutil.which("g++")):
        return "0"
    try:
        import torch  # noqa: PLC0415 - optional: only asked where torch is installed
    except ImportError:
        return "0"
    if tests:
        return "1"
    musa = getattr(torch, "musa", None)
    gpu = torch.cuda.is_available() or bool(musa is not None and musa.is_available())
    return "1" if gpu else "0"


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def install_browser() -> str:
    """Chromium for the HTML-report tests: found, installed with apt-get, or why not (one line)."""
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found:
        return f"browser: {found}"
    if not shutil.which("apt-get"):
        return "browser: no Chromium and no apt-get: the HTML-report tests will skip (install Chromium)"
    prefix: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo") or subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
            return "browser: no Chromium, and apt-get needs root: sudo apt-get install -y chromium"
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        r = subprocess.run(prefix + cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["no message"])[-1]
            return f"browser: `{' '.join(cmd)}` failed ({last}): the HTML-report tests will skip"
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    return f"browser: installed {found}" if found else "browser: apt-get installed no chromium binary"


def main(argv: list[str]) -> int:
    if argv in (["--cpu-adam"], ["--cpu-adam", "--tests"]):
        print(want_cpu_adam(tests=argv[1:] == ["--tests"]))
        return 0
    if argv[:1] == ["--browser"]:
        print(install_browser())
        return 0
    if len(argv) != 1:
        print("usage: python3 tools/mkvenv.py VENV_DIR | --browser | --cpu-adam [--tests]", file=sys.stderr)
        return 2
    make_venv(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
