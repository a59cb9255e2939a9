"""Measure commands in separate processes: wall time, peak RSS, ratios to a floor command.

Each run is its own process, reaped with ``os.wait4`` so its peak RSS is its own
(``getrusage(RUSAGE_CHILDREN)`` only ever reports the largest child seen so far). Runs are
spawned by a small helper process, because a child's peak RSS starts at its parent's
high-water mark (see `_Spawner`). Python
callables run through `python_call`, which loads a module by path in a fresh interpreter, calls
a function with JSON keyword arguments and reads back the dict it returns (e.g. ``work_s``,
the time spent after imports).

File cache: every run starts warm. Before each run the model files are read through
(`warm_cache`; cheap when they are already cached) and their page-cache residency, measured
with ``mincore``, is recorded with the trial; dirty pages left by the previous run are flushed
with ``os.sync()``. None of this is timed. (Some VMs drop clean page cache within seconds, so
warming once per model is not enough.)

Drift: `measure_against_floor` runs, for every repetition, the floor and then each job (in an
order rotated per repetition), and reports per-job medians of the ratios to the floor of the
same repetition.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import mmap
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

RESULT_MARK = "__BENCH_RESULT__ "

_CALL_SNIPPET = f"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("_bench_child", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
result = getattr(module, sys.argv[2])(**json.loads(sys.argv[3]))
print("\\n{RESULT_MARK}" + json.dumps(result or {{}}), flush=True)
"""


@dataclass(frozen=True)
class Job:
    """A command to measure.

    Attributes:
        name: Label in reports (e.g. the tool).
        argv: The command line.
        env: Extra environment variables for the child.
        cwd: Working directory of the child (None: inherit).
        output: Where the job writes its result, for checks and clean-up by the caller.
    """

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    output: str | None = None


@dataclass(frozen=True)
class RunResult:
    """One measured run.

    Attributes:
        ok: The process exited with status 0 (and did not time out).
        wall_s: Wall time from spawn to reap, interpreter start-up and imports included.
        peak_mb: Peak resident set size of the process (and its reaped children), MiB.
        returncode: Exit status; negative for a signal.
        result: The dict a `python_call` function returned, if any.
        error: Last line of the child's error output when it failed.
    """

    ok: bool
    wall_s: float
    peak_mb: float
    returncode: int
    result: Mapping[str, object] = field(default_factory=dict)
    error: str | None = None

    @property
    def work_s(self) -> float | None:
        """Time the child reported for its work (after imports), if it reported one."""
        value = self.result.get("work_s")
        return float(value) if isinstance(value, (int, float)) else None


def child_env(repo_root: Path) -> dict[str, str]:
    """The environment a benchmarked child gets on top of ours: graphkit importable from the source
    tree, and bytecode caching allowed. Installed tools (onnx, polygraphy, ...) import from the
    bytecode pip compiled for them; graphkit's first run then caches its bytecode too, as installing
    it would, instead of compiling every module in every run when the environment sets
    PYTHONDONTWRITEBYTECODE."""
    path = os.environ.get("PYTHONPATH")
    return {
        "PYTHONPATH": str(repo_root) + (os.pathsep + path if path else ""),
        "PYTHONDONTWRITEBYTECODE": "",
    }


def python_call(module: Path, function: str, **kwargs: object) -> tuple[str, ...]:
    """Command line that calls ``function(**kwargs)`` of the module file ``module`` in a new interpreter.

    The function should import what it needs itself (so the child pays only for its own
    imports) and return a JSON-serializable dict.
    """
    return (sys.executable, "-c", _CALL_SNIPPET, str(module), function, json.dumps(kwargs))


def _last_line(*texts: str) -> str:
    for text in texts:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return ""


def _parse_result(stdout: str) -> dict[str, object]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            parsed = json.loads(line[len(RESULT_MARK) :])
            return parsed if isinstance(parsed, dict) else {}
    return {}


def run(job: Job, *, timeout: float | None = None) -> RunResult:
    """Run ``job`` once and measure it; a failure or timeout is reported, not raised.

    The job is started by the spawner process (see `_Spawner`), not by this one.
    """
    reply = _spawner().request(
        {"argv": list(job.argv), "env": dict(job.env), "cwd": job.cwd, "timeout": timeout}
    )
    returncode = int(reply["returncode"])
    stdout, stderr = str(reply["stdout"]), str(reply["stderr"])
    ok = returncode == 0 and not reply["timed_out"]
    error = None
    if reply["timed_out"]:
        error = f"timed out after {timeout:.0f} s"
    elif not ok:
        error = _last_line(stderr, stdout) or f"exit status {returncode}"
    peak_mb = float(reply["maxrss_kb"]) / 1024
    return RunResult(ok, float(reply["wall_s"]), peak_mb, returncode, _parse_result(stdout), error)


class _Spawner:
    """A small helper interpreter that starts and reaps the measured processes.

    On Linux a child's peak RSS (``ru_maxrss``) starts at its parent's high-water mark: exec
    records the old address space's peak, and after ``vfork`` (what subprocess uses) that is
    the parent's. A benchmark process that has loaded a model would therefore inflate every
    figure, so measured processes are spawned by this helper, which never grows beyond ~15 MB.
    It reads one JSON request per line on stdin and answers one JSON line on stdout.
    """

    def __init__(self) -> None:
        import subprocess

        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).resolve()), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def request(self, message: Mapping[str, object]) -> dict[str, Any]:
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(json.dumps(message) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the spawner process exited (status {self._proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()  # the spawner kills a running job's process group on SIGTERM
        self._proc.wait()


_SPAWNER: _Spawner | None = None


def _spawner() -> _Spawner:
    global _SPAWNER
    if _SPAWNER is None:
        import atexit

        _SPAWNER = _Spawner()
        atexit.register(_SPAWNER.close)
    return _SPAWNER


def shutdown() -> None:
    """Stop the spawner, and with it any job still running. Safe to call more than once."""
    global _SPAWNER
    if _SPAWNER is not None:
        _SPAWNER.close()
        _SPAWNER = None


def _serve() -> None:
    """The spawner's loop: run each requested command and answer with its measurements."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = _spawn_and_wait(request["argv"], request["env"], request["cwd"], request["timeout"])
        except OSError as err:  # could not start the command at all
            reply = {"wall_s": 0.0, "maxrss_kb": 0, "returncode": 127, "timed_out": False}
            reply.update(stdout="", stderr=f"{type(err).__name__}: {err}")
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def _spawn_and_wait(
    argv: Sequence[str], env: Mapping[str, str], cwd: str | None, timeout: float | None
) -> dict[str, object]:
    """Start ``argv`` in its own session, reap it with wait4 and return its figures."""
    import subprocess

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env={**os.environ, **env},
            cwd=cwd,
            start_new_session=True,
        )
        timed_out = threading.Event()
        timer = threading.Timer(timeout, _kill_group, (proc.pid, timed_out)) if timeout else None
        if timer:
            timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # the child runs in its own session: stop it before leaving
            _kill_group(proc.pid, timed_out)
            proc.wait()
            raise
        finally:
            if timer:
                timer.cancel()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        return {
            "wall_s": wall,
            "maxrss_kb": usage.ru_maxrss,
            "returncode": proc.returncode,
            "timed_out": timed_out.is_set(),
            "stdout": _tail(out),
            "stderr": _tail(err),
        }


def _tail(handle: IO[bytes], limit: int = 64 * 1024) -> str:
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(size - limit, 0))
    return handle.read().decode("utf-8", errors="replace")


def _kill_group(pid: int, flag: threading.Event) -> None:
    flag.set()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# File cache


@dataclass(frozen=True)
class CacheState:
    """Page-cache residency of a set of files.

    Attributes:
        size_mb: Total size of the files, MB (10^6 bytes).
        resident: Fraction of their pages in the page cache (None if mincore is unavailable).
        read_s: Time to read them all through, if they were read.
    """

    size_mb: float
    resident: float | None
    read_s: float | None = None


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL | None:
    global _LIBC
    if _LIBC is None and sys.platform.startswith("linux"):
        _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _LIBC.mmap.restype = ctypes.c_void_p
        _LIBC.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        _LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return _LIBC


def _resident_pages(path: Path) -> tuple[int, int] | None:
    """(resident, total) pages of ``path`` in the page cache, via mmap + mincore."""
    libc = _libc()
    size = path.stat().st_size
    if libc is None or size == 0:
        return None if libc is None else (0, 0)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            vec = ctypes.create_string_buffer(pages)
            if libc.mincore(addr, size, vec) != 0:
                return None
            return sum(byte & 1 for byte in vec.raw), pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def cache_state(paths: Sequence[Path]) -> CacheState:
    """Residency of ``paths`` in the page cache, without reading them."""
    counts = [_resident_pages(p) for p in paths]
    size = sum(p.stat().st_size for p in paths) / 1e6
    if any(c is None for c in counts):
        return CacheState(size, None)
    resident = sum(c[0] for c in counts if c)
    total = sum(c[1] for c in counts if c)
    return CacheState(size, resident / total if total else 1.0)


def warm_cache(paths: Sequence[Path], *, block: int = 16 * 1024 * 1024) -> CacheState:
    """Read ``paths`` through once so that every measured run starts with a warm cache."""
    start = time.perf_counter()
    buffer = bytearray(block)
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass
    read_s = time.perf_counter() - start
    state = cache_state(paths)
    return CacheState(state.size_mb, state.resident, read_s)


def available_memory_mb() -> float | None:
    """``MemAvailable`` from /proc/meminfo, MiB (None where unavailable)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


# ---------------------------------------------------------------------------------------------
# Repeated runs against the floor


@dataclass(frozen=True)
class Trial:
    """One run of a job, paired with the floor run of the same repetition.

    ``cached`` is the page-cache residency of the warmed files just before the run.
    """

    job: str
    repetition: int
    run: RunResult
    floor: RunResult
    cached: float | None = None


@dataclass(frozen=True)
class Summary:
    """Medians over the successful trials of one job.

    Attributes:
        job: Job name.
        runs: Number of trials; ``failures`` of them failed.
        wall_s, work_s, peak_mb: Medians of the job's own figures.
        time_ratio, mem_ratio: Medians of job / floor of the same repetition (None if the
            floor failed).
        error: The last failure's error line, if any failed.
    """

    job: str
    runs: int
    failures: int
    wall_s: float | None
    work_s: float | None
    peak_mb: float | None
    time_ratio: float | None
    mem_ratio: float | None
    error: str | None


def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that are not None (None if there are none)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(name: str, trials: Sequence[Trial]) -> Summary:
    """Fold ``trials`` of job ``name`` into medians and ratios to the floor."""
    mine = [t for t in trials if t.job == name]
    good = [t for t in mine if t.run.ok]
    paired = [t for t in good if t.floor.ok]
    errors = [t.run.error for t in mine if not t.run.ok]
    return Summary(
        job=name,
        runs=len(mine),
        failures=len(mine) - len(good),
        wall_s=median([t.run.wall_s for t in good]),
        work_s=median([t.run.work_s for t in good]),
        peak_mb=median([t.run.peak_mb for t in good]),
        time_ratio=median([t.run.wall_s / t.floor.wall_s for t in paired]),
        mem_ratio=median([t.run.peak_mb / t.floor.peak_mb for t in paired]),
        error=errors[-1] if errors else None,
    )


def measure_against_floor(
    floor: Callable[[], Job],
    jobs: Sequence[Callable[[], Job]],
    *,
    repeat: int = 1,
    timeout: float | None = None,
    warm: Sequence[Path] = (),
    after_run: Callable[[Job, RunResult], RunResult] | None = None,
    on_trial: Callable[[Trial], None] | None = None,
) -> list[Trial]:
    """Run the floor then every job, ``repeat`` times, rotating the jobs' order each time.

    Jobs are given as factories so that each run can get fresh paths (e.g. a new output
    folder). Before every run, ``os.sync()`` flushes the previous run's writes and the files in
    ``warm`` are read through (the page cache may have dropped some of them since). ``after_run``
    may inspect or clean up after a run and return an adjusted result (e.g. mark an invalid
    output as failed). None of this is timed.

    Returns:
        One `Trial` per job run, the floor's own runs included (as job ``floor.name``).
    """
    trials: list[Trial] = []
    for rep in range(repeat):
        floor_job = floor()
        floor_result, cached = _run_one(floor_job, timeout, warm, after_run)
        trials.append(Trial(floor_job.name, rep, floor_result, floor_result, cached))
        if on_trial:
            on_trial(trials[-1])
        shift = rep % len(jobs) if jobs else 0
        for make_job in [*jobs[shift:], *jobs[:shift]]:
            job = make_job()
            result, cached = _run_one(job, timeout, warm, after_run)
            trials.append(Trial(job.name, rep, result, floor_result, cached))
            if on_trial:
                on_trial(trials[-1])
    return trials


def _run_one(
    job: Job,
    timeout: float | None,
    warm: Sequence[Path],
    after_run: Callable[[Job, RunResult], RunResult] | None,
) -> tuple[RunResult, float | None]:
    os.sync()
    cached = warm_cache(warm).resident if warm else None
    result = run(job, timeout=timeout)
    return (after_run(job, result) if after_run else result), cached


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    _serve()
