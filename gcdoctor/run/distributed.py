"""A diagnose run on several processes: a launch under torchrun (found in the environment), or
`gcdoctor diagnose --nproc N` (which starts the workers itself, with torchrun's environment), one
rank per device.

Every rank runs the same probes, so every collective of the sharded model has all its
participants; ranks agree on what each measurement found (an OOM on one rank is an OOM of the
step) and rank 0 gathers every rank's numbers into its facts. Run directory (docs/distributed.md):

    OUT/                       rank 0: config.json, facts.json (every rank's numbers), report.*
    OUT/rank-<r>/              rank r >= 1: its own facts.json, events.jsonl, telemetry.csv
    OUT/traces/<key>/rank-<r>.pt.trace.json.gz
                               every rank's trace of each profiled variant, one folder per variant
                               (`gcdoctor analyze OUT/traces/<key>` compares the ranks)

torch is imported inside the functions: `gcdoctor diagnose --nproc N` starts its workers without
importing torch in the parent process.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gcdoctor.errors import UserError

# torchrun (torch.distributed.elastic) sets this for every worker; DeepSpeed's one-process
# initialisation (probes/_deepspeed.py) sets RANK and WORLD_SIZE too, but never this
ELASTIC_KEY = "TORCHELASTIC_RUN_ID"
LAUNCH_KEY = "GCDOCTOR_LAUNCH"  # `gcdoctor diagnose --nproc N` sets it for its workers
# How long a rank waits in a collective before the run fails instead of hanging: a rank that died
# or went its own way (an OOM on one rank only) must not hold the others forever.
COLLECTIVE_TIMEOUT_S = 600
# the process-group backend between devices of a kind: NCCL for CUDA, MCCL for MUSA (torch_musa
# registers "mccl"; its README initialises with dist.init_process_group("mccl")), gloo on the CPU
COLLECTIVE_BACKEND = {"cuda": "nccl", "musa": "mccl"}
NPROC_MAX = 64


@dataclass(frozen=True)
class Launch:
    """Where this process sits in the job, as the launcher's environment says."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _int_env(env: dict[str, str], key: str) -> int | None:
    v = env.get(key)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise UserError(f"environment {key}={v!r}: not an integer (a broken distributed launch?)") from None


def launch_from_env(env: dict[str, str] | None = None) -> Launch | None:
    """The distributed launch this process belongs to, or None (a single-process run).

    A launch is RANK and WORLD_SIZE set with either more than one process or a launcher's
    marker (torchrun's, or gcdoctor's own for --nproc): a lone RANK=0/WORLD_SIZE=1 left behind by a one-process DeepSpeed initialisation in
    the same process is not one.
    """
    env = dict(os.environ if env is None else env)
    rank, world = _int_env(env, "RANK"), _int_env(env, "WORLD_SIZE")
    if rank is None or world is None:
        return None
    if world < 1 or not 0 <= rank < world:
        raise UserError(f"environment RANK={rank} WORLD_SIZE={world}: not a valid rank of the job")
    if world == 1 and ELASTIC_KEY not in env and LAUNCH_KEY not in env:
        return None
    local = _int_env(env, "LOCAL_RANK")
    local_world = _int_env(env, "LOCAL_WORLD_SIZE")
    return Launch(rank, world, rank if local is None else local, world if local_world is None else local_world)


# -- the process group ----------------------------------------------------------------------------

class Group:
    """The job's process group as a diagnose run uses it: who we are, agreement, gathering."""

    def __init__(self, launch: Launch, device_kind: str) -> None:
        self.launch = launch
        self.rank, self.world_size = launch.rank, launch.world_size
        self.device_kind = device_kind
        self.backend = ""
        self.created = False  # we created the group (and destroy it at the end)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def start(self) -> "Group":
        """Join (or reuse) the default process group: NCCL between CUDA devices, MCCL between
        MUSA devices (torch_musa registers it as "mccl"), gloo otherwise."""
        import torch
        import torch.distributed as dist

        if self.device_kind in ("cuda", "musa"):
            getattr(torch, self.device_kind).set_device(self.launch.local_rank)
        if dist.is_initialized():
            if dist.get_world_size() != self.world_size or dist.get_rank() != self.rank:
                raise UserError(f"a process group of world size {dist.get_world_size()} exists, but the "
                                f"launch says rank {self.rank} of {self.world_size}")
        else:
            backend = COLLECTIVE_BACKEND.get(self.device_kind, "gloo")
            kwargs: dict[str, Any] = {"backend": backend, "timeout": timedelta(seconds=COLLECTIVE_TIMEOUT_S)}
            if backend == "nccl":
                kwargs["device_id"] = torch.device("cuda", self.launch.local_rank)
            dist.init_process_group(**kwargs)
            self.created = True
        self.backend = str(dist.get_backend())
        return self

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's value of `obj` on every rank."""
        import torch.distributed as dist
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj`, in rank order, on rank 0; None elsewhere."""
        import torch.distributed as dist
        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def agree(self, fits: bool, stop: bool = False) -> tuple[bool, bool]:
        """(the step fit on every rank, some rank was asked to stop): an OOM anywhere is an OOM of
        the sharded step, and a stop anywhere stops every rank at the same point."""
        import torch.distributed as dist
        flags: list[Any] = [None] * self.world_size
        dist.all_gather_object(flags, (bool(fits), bool(stop)))
        return all(f for f, _ in flags), any(s for _, s in flags)

    def barrier(self) -> None:
        import torch.distributed as dist
        dist.barrier()

    def close(self, meet: bool = True) -> None:
        """Destroy the group we created; with `meet`, after every rank got here (not after an
        interruption or an error, when a rank may never come)."""
        import torch.distributed as dist
        if self.created and dist.is_initialized():
            try:
                if meet:
                    dist.barrier()
            finally:
                dist.destroy_process_group()
        self.created = False


def rank_device(device: str | None, launch: Launch) -> str | None:
    """The device a rank uses: its LOCAL_RANK-th device of the kind asked for (auto, cuda, musa), or
    the CPU. An explicit index cannot be honoured by every rank, so it is refused."""
    kind, _, idx = (device or "auto").partition(":")
    if idx:
        raise UserError(f"--device {device}: under a distributed launch each rank uses the device of its "
                        "LOCAL_RANK; give the kind only (--device cuda)")
    if kind.lower() == "cpu":
        return "cpu"
    if kind.lower() == "auto":
        from gcdoctor.backends import detect_kind
        kind = detect_kind()
        if kind == "cpu":
            return "cpu"
    return f"{kind.lower()}:{launch.local_rank}"


# -- gcdoctor diagnose --nproc N --------------------------------------------------------------------

def strip_nproc(argv: list[str]) -> list[str]:
    """The diagnose arguments without --nproc (the workers must not start launchers of their own)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        out.append(a)
    return out


def worker_env(rank: int, nproc: int, port: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment torchrun gives a worker of a one-host job (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and gcdoctor's own launch marker."""
    env = dict(os.environ if base is None else base)
    env.update({"RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), LAUNCH_KEY: "1"})
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default for several workers on one host
    return env


def spawn(nproc: int, argv: list[str], out: str, grace_s: float = 10.0) -> int:
    """Run the diagnose on `nproc` processes of this host, one per device, with torchrun's
    environment (the workers take the same path as under torchrun). When a worker fails the others
    get `grace_s` to end on their own, then SIGTERM. Returns rank 0's exit code, or the first
    failure's."""
    import signal
    import socket
    import time

    if not 1 <= nproc <= NPROC_MAX:
        raise UserError(f"--nproc {nproc}: use 1 to {NPROC_MAX} processes (one per device)")
    if launch_from_env() is not None:
        raise UserError("--nproc under a distributed launch: the launcher already started the ranks")
    rest = strip_nproc(argv)
    if "--out" not in rest and not any(a.startswith("--out=") for a in rest):
        rest += ["--out", out]  # every rank must write into the same run directory
    if "--no-tui" not in rest:
        rest.append("--no-tui")  # N processes cannot share one terminal UI
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "gcdoctor", "diagnose", *rest]
    # the workers in a process group of their own: a Ctrl-C (or SIGTERM) reaches this launcher alone,
    # which passes one SIGTERM to each worker (gcdoctor's interrupt: the worker keeps what it
    # measured); a SIGINT would not do, background jobs inherit it ignored
    procs = [subprocess.Popen(cmd, env=worker_env(r, nproc, port), start_new_session=True) for r in range(nproc)]
    codes: list[int | None] = [None] * nproc
    failed_at: float | None = None
    try:
        while any(c is None for c in codes):
            for r, p in enumerate(procs):
                if codes[r] is None:
                    codes[r] = p.poll()
                    if codes[r] not in (None, 0) and failed_at is None:
                        failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > grace_s:
                for r, p in enumerate(procs):
                    if codes[r] is None:
                        p.send_signal(signal.SIGTERM)
                failed_at = float("inf")
            time.sleep(0.05)
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait()
        return 130
    if codes[0]:
        return int(codes[0])
    return next((int(c) for c in codes if c), 0)


# -- a diagnose session's side of it ----------------------------------------------------------------

def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in key.replace("/", "-"))


class DistributedRun:
    """What a diagnose Session does differently on rank r of N: its device, its run directory, the
    agreement on OOMs, the per-rank rows, and the gathering on rank 0."""

    def __init__(self, launch: Launch, device: str | None) -> None:
        self.launch = launch
        self.rank, self.world_size = launch.rank, launch.world_size
        self.device = device  # what get_backend gets
        self.group: Group | None = None
        self.base: Path | None = None  # rank 0's run directory

    @classmethod
    def from_env(cls, device: str | None) -> "DistributedRun | None":
        launch = launch_from_env()
        return None if launch is None else cls(launch, rank_device(device, launch))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def start(self, device_kind: str) -> None:
        self.group = Group(self.launch, device_kind).start()

    def run_dir(self, proposed: str | Path) -> Path:
        """This rank's run directory: rank 0's choice (broadcast, so a default with a time stamp is
        the same everywhere), and rank-<r> under it for the other ranks."""
        assert self.group is not None
        self.base = Path(self.group.broadcast(str(proposed)))
        return self.base if self.is_main else self.base / f"rank-{self.rank}"

    def trace_path(self, key: str) -> Path:
        """Every rank's trace of one profiled variant in one folder of rank 0's run directory (the
        layout of torch's tensorboard_trace_handler: `gcdoctor analyze` of the folder compares them)."""
        assert self.base is not None
        return self.base / "traces" / _safe(key) / f"rank-{self.rank}.pt.trace.json.gz"

    def relative(self, path: Path) -> str:
        """A path of this rank's output as rank 0's facts name it (relative to rank 0's directory)."""
        assert self.base is not None
        return os.path.relpath(path, self.base)

    def facts(self, backend: Any, env: Any) -> Any:
        from gcdoctor.facts.distributed import DistributedFacts, RankInfo
        assert self.group is not None
        launcher = "gcdoctor --nproc" if os.environ.get(LAUNCH_KEY) else (
            "torchrun" if os.environ.get(ELASTIC_KEY) else "an external launcher")
        f = DistributedFacts(world_size=self.world_size, backend=self.group.backend, launcher=launcher)
        f.ranks = [RankInfo(rank=self.rank, local_rank=self.launch.local_rank, host=env.host or "",
                            device=str(backend.device), device_name=env.device_name,
                            run_dir="." if self.is_main else f"rank-{self.rank}")]
        return f

    def configure(self, facts: Any, config: Any) -> None:
        """The user's sharded setup, as the sweep will run it."""
        facts.strategy = config.shard
        facts.reshard_after_forward = config.reshard_after_forward
        facts.checkpoint_impl = config.checkpoint_impl if config.shard == "fsdp2" else "deepspeed"
        facts.probe_batch = config.probe_batch

    def agree(self, fits: bool, stop: bool = False) -> tuple[bool, bool]:
        assert self.group is not None
        return self.group.agree(fits, stop)

    def gather(self, facts: Any) -> None:
        """Every rank's own rows to rank 0, which keeps its facts' distributed section complete.
        A collective: every rank calls it at the same point (after each probe)."""
        assert self.group is not None
        d = facts.distributed
        mine = (self.rank, [r for r in d.ranks if r.rank == self.rank],
                [m for m in d.measurements if m.rank == self.rank], [c for c in d.comm if c.rank == self.rank])
        everyone = self.group.gather(mine)
        if everyone is None:
            return
        ranks, rows, comm = [], [], []
        for _rank, info, meas, cm in sorted(everyone, key=lambda x: x[0]):
            ranks += info
            rows += meas
            comm += cm
        d.ranks, d.measurements, d.comm = ranks, rows, comm

    def close(self, meet: bool = True) -> None:
        if self.group is not None:
            self.group.close(meet)
            self.group = None
