"""The refit's worker: runs :func:`agent.compute.compute_refit` off the event loop.

:class:`RefitWorker` owns one executor of one worker, a thread or a spawned process:

- a **thread** runs at a lower priority, and while it computes the interpreter's switch interval is
  shortened (:data:`THREAD_SWITCH_INTERVAL_S`), so that the event loop's turns at the GIL stay short;
- a **process** (``refit.executor: process``) is spawned once at nice 19, gets the window's arrays
  through shared memory blocks reused from refit to refit (:class:`SharedBlocks`: the event loop pays a
  copy, not a pickle of the window), and ends itself when the agent that started it is gone (a
  watch on its parent: a pool worker would otherwise wait on its task queue forever);
- :meth:`RefitWorker.warm_up` starts the worker and imports the fitting and optimisation code in it, so
  that the first refit does not pay for that; a process that cannot start falls back to a thread;
- the computation runs with BLAS and LAPACK on **one thread** (threadpoolctl; for a thread executor the
  limit is the process's while the refit runs): its matrices are small (levels of 1 to a few hundred
  states), where OpenBLAS's thread pool costs more than it gives (a cold-start refit of the demo crawl,
  16 robots at K = 50: 4.6 s of CPU with the pool, 1.7 s on one thread, the same policy, at load 4-5 on
  2 cores), and a second BLAS thread would take the core the event loop needs;
- ``inline`` runs the computation in the caller, on the event loop, which it blocks: for a replay on a
  simulated clock (``robotctl replay``), where nothing else waits and each refit must finish before
  simulated time moves on;
- what a worker process logs (a refit's warnings: targets not met, a misfit) travels back with its
  outcome (:class:`_CapturedLog`, ``RefitOutcome.log_records``) and is logged by the agent's loggers,
  under their levels and handlers: a spawned process has no handler of its own, and Python's last
  resort printed its warnings raw on standard error, past a Scrapy crawl's log and the sidecar's format;
- :meth:`RefitWorker.run` waits at most ``timeout_s`` for a result (``asyncio.timeout``, not
  ``asyncio.wait_for``: on Python 3.11 ``wait_for`` can swallow a cancellation that arrives as the
  refit finishes, and the agent's shutdown then waits forever); a refit over its time is abandoned
  and reported as a :class:`~agent.compute.RefitOutcome` with stage ``timeout``, a worker process
  that died as one with stage ``fit``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from multiprocessing import shared_memory
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .compute import RefitInput, RefitOutcome, RefitStage, compute_refit

LOG = logging.getLogger("robotctl.agent.refit")

#: Array fields of :class:`RefitInput` that go to a worker process through shared memory.
ARRAY_FIELDS = ("delivery_times", "pages", "modes", "service_times", "sizes_bytes")
#: Niceness added to the refit worker: the refit is background work, acknowledgements come first.
WORKER_NICE = 19
#: The interpreter's switch interval while a refit runs in a thread (the default is 5 ms).
THREAD_SWITCH_INTERVAL_S = 0.0002

Compute = Callable[[RefitInput], RefitOutcome]


@dataclass(frozen=True)
class SharedArray:
    """An array handed to the worker process through a shared memory block: only this travels."""

    block: str
    dtype: str
    size: int

    def load(self) -> NDArray[Any]:
        """A private copy of the array (in the worker)."""
        # the worker shares the agent's resource tracker (it was spawned by the agent), where the block is
        # registered already: attaching registers it again (a no-op there), and only the agent unlinks it
        shm = shared_memory.SharedMemory(name=self.block)
        try:
            return np.ndarray(self.size, dtype=np.dtype(self.dtype), buffer=shm.buf).copy()
        finally:
            shm.close()


class SharedBlocks:
    """One shared memory block per array field, reused from refit to refit (grown when too small), so that
    a refit in a worker process costs the event loop a copy, not a pickle of the whole window."""

    def __init__(self) -> None:
        self.blocks: dict[str, shared_memory.SharedMemory] = {}

    def share(self, field: str, arr: NDArray[Any]) -> SharedArray:
        arr = np.ascontiguousarray(arr)
        block = self.blocks.get(field)
        if block is None or block.size < arr.nbytes:
            if block is not None:
                block.close()
                block.unlink()
            block = self.blocks[field] = shared_memory.SharedMemory(create=True, size=max(arr.nbytes, 1 << 16))
        np.ndarray(arr.size, dtype=arr.dtype, buffer=block.buf)[:] = arr
        return SharedArray(block.name, arr.dtype.str, int(arr.size))

    def share_input(self, inp: RefitInput) -> RefitInput:
        changes: dict[str, Any] = {}
        for name in ARRAY_FIELDS:
            value = getattr(inp, name)
            if isinstance(value, np.ndarray):
                changes[name] = self.share(name, value)
        return replace(inp, **changes)

    def close(self) -> None:
        for block in self.blocks.values():
            with contextlib.suppress(OSError):
                block.close()
                block.unlink()
        self.blocks.clear()


def _loaded(inp: RefitInput) -> RefitInput:
    changes = {name: getattr(inp, name).load() for name in ARRAY_FIELDS
               if isinstance(getattr(inp, name), SharedArray)}
    return replace(inp, **changes) if changes else inp


class _CapturedLog(logging.Handler):
    """In a worker process, on the ``robotctl`` logger: the records of the refit under way, each made
    picklable (message formatted, traceback as text), to go back with its outcome."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        self.records.append(record)


#: the worker process's capture (:func:`_worker_init`); None in the agent's own process
_CAPTURE: _CapturedLog | None = None


def _capture_log() -> None:
    """Keep what this worker process logs for the outcome (:class:`_CapturedLog`), instead of its last resort."""
    global _CAPTURE
    _CAPTURE = _CapturedLog()
    logger = logging.getLogger("robotctl")
    logger.addHandler(_CAPTURE)
    logger.setLevel(logging.DEBUG)  # the agent's loggers decide (:func:`_log_in_agent`)
    logger.propagate = False


def _compute_loaded(compute: Compute, inp: RefitInput) -> RefitOutcome:
    """In the worker process: the arrays out of shared memory, then the computation, with what it logged."""
    if _CAPTURE is None:
        return _one_blas_thread(compute, _loaded(inp))
    _CAPTURE.records.clear()
    outcome = _one_blas_thread(compute, _loaded(inp))
    records, _CAPTURE.records = tuple(_CAPTURE.records), []
    return replace(outcome, log_records=records) if records else outcome


def _log_in_agent(outcome: RefitOutcome) -> RefitOutcome:
    """A worker process's records to the agent's loggers, each if its logger is enabled for its level."""
    records: tuple[logging.LogRecord, ...] = getattr(outcome, "log_records", ())
    for record in records:
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)
    return replace(outcome, log_records=()) if records else outcome


def _one_blas_thread(compute: Compute, inp: RefitInput) -> RefitOutcome:
    """``compute(inp)`` with BLAS and LAPACK on one thread (see the module docstring)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return compute(inp)


def _lower_priority() -> None:
    """Run the calling process (on Linux: the calling thread) at a lower CPU priority."""
    who = threading.get_native_id() if sys.platform == "linux" else 0
    with contextlib.suppress(OSError, AttributeError):  # not permitted, or no such call on this platform
        os.setpriority(os.PRIO_PROCESS, who, min(19, os.getpriority(os.PRIO_PROCESS, who) + WORKER_NICE))


def _import_refit_code() -> None:
    from robotctl import (
        fitting,  # noqa: F401
        policies,  # noqa: F401
    )


def _watch_parent(parent: int, every_s: float = 0.5) -> None:
    """End this worker process when the agent that started it is gone (killed with -9, say): a pool worker
    would otherwise wait on its task queue forever, and keep its semaphores alive."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    threading.Thread(target=watch, name="robotctl-parent-watch", daemon=True).start()


def _worker_init(parent: int) -> None:
    _lower_priority()
    _watch_parent(parent)
    _capture_log()


def _spawn_pool() -> concurrent.futures.ProcessPoolExecutor:
    return concurrent.futures.ProcessPoolExecutor(max_workers=1, initializer=_worker_init, initargs=(os.getpid(),),
                                                  mp_context=multiprocessing.get_context("spawn"))


def _thread_pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, initializer=_lower_priority,
                                                 thread_name_prefix="robotctl-refit")


class RefitWorker:
    """Runs the refit computation in a thread or a worker process; see the module docstring.

    Parameters
    ----------
    compute : callable
        ``RefitInput -> RefitOutcome``; :func:`compute_refit` by default (picklable for a process).
    kind : str
        ``thread``, ``process`` or ``inline`` (no timeout: the caller waits for the result).
    timeout_s : float
        ``refit.timeout_s``: a refit that takes longer is abandoned.
    """

    def __init__(self, compute: Compute = compute_refit, *, kind: str = "thread", timeout_s: float = 120.0) -> None:
        if kind not in ("thread", "process", "inline"):
            raise ValueError(f"RefitWorker: kind = {kind!r}; use thread, process or inline")
        self.compute = compute
        self.kind = kind
        self.timeout_s = timeout_s
        self._executor: concurrent.futures.Executor | None = None
        self._blocks = SharedBlocks()

    def start(self) -> None:
        if self._executor is None and self.kind != "inline":
            self._executor = _spawn_pool() if self.kind == "process" else _thread_pool()

    def shutdown(self) -> None:
        """Stop the worker without waiting for a refit it may be running: a worker process is terminated
        (its result is not wanted any more), so that the agent exits at once on SIGTERM instead of waiting at
        interpreter exit for the computation to finish (up to ``refit.timeout_s``; 7.5 s were measured)."""
        if self._executor is not None:
            # ProcessPoolExecutor's worker processes (no public way to reach them before Python 3.14's
            # terminate_workers); a thread pool has none
            found = getattr(self._executor, "_processes", None)
            processes = list(found.values()) if isinstance(found, dict) else []
            self._executor.shutdown(wait=False, cancel_futures=True)
            for proc in processes:
                with contextlib.suppress(Exception):
                    proc.terminate()
            self._executor = None
        self._blocks.close()

    async def warm_up(self) -> None:
        """Start the worker and import the fitting and optimisation code in it, so that the first refit
        neither waits for that nor makes the event loop pay for starting a process mid-traffic."""
        self.start()
        if self.kind == "inline":
            _import_refit_code()
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, _import_refit_code)
        except BrokenProcessPool:
            # typically: the program's main module cannot be imported again by a spawned process (run from
            # standard input, or a script without `if __name__ == "__main__":`)
            LOG.warning("event=refit_worker_process_failed falling_back_to=thread hint=set refit.executor: thread")
            self.shutdown()
            self.kind = "thread"
            self.start()
        except Exception:  # a refit will report the problem properly
            LOG.exception("event=refit_warm_up_failed")

    async def run(self, inp: RefitInput) -> RefitOutcome:
        """The outcome of ``compute(inp)`` in the worker, or a failed outcome (timeout, dead worker)."""
        if self.kind == "inline":
            return _one_blas_thread(self.compute, inp)
        self.start()
        loop = asyncio.get_running_loop()
        switch = sys.getswitchinterval()
        try:
            if self.kind == "process":
                fut = loop.run_in_executor(self._executor, _compute_loaded, self.compute,
                                           self._blocks.share_input(inp))
            else:
                # the refit thread holds the GIL between switches: shorter turns while it runs keep the
                # event loop's waits short (the interval is the interpreter's, restored after)
                sys.setswitchinterval(min(switch, THREAD_SWITCH_INTERVAL_S))
                fut = loop.run_in_executor(self._executor, _one_blas_thread, self.compute, inp)
        except BrokenProcessPool as exc:
            self.shutdown()
            return RefitOutcome(False, RefitStage.FIT, f"the refit worker process died: {exc}; a new one "
                                "starts with the next refit")
        try:
            # asyncio.timeout, not wait_for: see the module docstring
            async with asyncio.timeout(self.timeout_s):
                return _log_in_agent(await asyncio.shield(fut))
        except TimeoutError:
            fut.cancel()
            return RefitOutcome(False, RefitStage.TIMEOUT, f"refit took longer than refit.timeout_s = "
                                f"{self.timeout_s:g} s and was abandoned",
                                deliveries=int(inp.delivery_times.size))
        except BrokenProcessPool as exc:
            self.shutdown()
            return RefitOutcome(False, RefitStage.FIT, f"the refit worker process died: {exc}")
        finally:
            sys.setswitchinterval(switch)


__all__ = [
    "ARRAY_FIELDS",
    "THREAD_SWITCH_INTERVAL_S",
    "WORKER_NICE",
    "RefitWorker",
    "SharedArray",
    "SharedBlocks",
]
