"""The machine's limits, and the configuration checked against them before the agent starts.

``robotctl serve`` (``--check`` too) refuses a configuration that cannot run here, with the estimate:

- ``refit.max_samples``: the sample rings, the refit's copy of the window and the fit's working arrays
  grow with it (:data:`BYTES_PER_SAMPLE`);
- ``queue.capacity``: every refit solves the fitted model exactly; the fitted model has at most two
  arrival phases, ``fit.options.max_service_order`` service phases and one obsolescence phase, batches up to
  ``fit.options.max_batch`` pages, and the modes of ``policy.modes`` (the estimate is
  :func:`robotctl.model.solve_size`, an upper bound of what the solve holds);
- the file limit (``RLIMIT_NOFILE``) bounds ``server.max_connections`` (:func:`connection_limit`).

``robotctl solve`` and ``optimise`` check a model file the same way (:func:`check_solve_memory`).
"""

from __future__ import annotations

import contextlib
import os
import resource
from pathlib import Path

from robotctl import InputError
from robotctl.model import QueueModel, format_bytes, model_solve_size, solve_size

from .config import AgentConfig

#: Memory per ``refit.max_samples``: the delivery ring (t, client time, bytes: 8 bytes each; pages 4;
#: mode 2), the completion ring (three 8-byte columns), the refit's scratch copy of the delivery columns
#: (30), and the worker's copy and working arrays during a fit (about 14 arrays of 8 bytes).
BYTES_PER_SAMPLE = 30 + 24 + 30 + 14 * 8
#: Of the memory available, the share the agent may plan to use (the rest: the interpreter, the worker
#: process's own libraries, the page cache the delivery log lives in).
MEMORY_SHARE = 0.5
#: File descriptors kept for other things than client connections (log files, the worker, the loop).
RESERVED_FDS = 64

_MEMINFO = Path("/proc/meminfo")
_CGROUP_V2 = Path("/sys/fs/cgroup")
_CGROUP_V1 = Path("/sys/fs/cgroup/memory")


def available_memory_bytes() -> float:
    """Memory this process may still use: the smaller of the kernel's MemAvailable and what the cgroup's
    limit leaves (v2 ``memory.max - memory.current``, v1 ``limit_in_bytes - usage_in_bytes``); physical
    memory when neither can be read."""
    found: list[float] = []
    with contextlib.suppress(OSError, ValueError):
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(float(line.split()[1]) * 1024)
    for limit_name, usage_name, base in (("memory.max", "memory.current", _CGROUP_V2),
                                         ("memory.limit_in_bytes", "memory.usage_in_bytes", _CGROUP_V1)):
        with contextlib.suppress(OSError, ValueError):
            limit = (base / limit_name).read_text().strip()
            if limit != "max" and float(limit) < 2**60:
                found.append(float(limit) - float((base / usage_name).read_text().strip()))
    if not found:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            found.append(float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")))
    return max(0.0, min(found)) if found else float("inf")


def check_solve_memory(model: QueueModel, *, field: str = "model.capacity", approx: bool = False,
                       available: float | None = None) -> None:
    """Refuse a model that cannot be evaluated in the memory available, with the estimate.

    An exact evaluation (a solve, or an optimisation over a chain small enough to be exact) needs
    :func:`~robotctl.model.model_solve_size` of the reduced model; a chain too large for the exact solver
    (``SolveSize.exact``) is the solver's to refuse (it points at the approximation). Any evaluation, the
    approximate ones (``approx``) included, walks K + 1 levels: their floor must fit too (K = 10^9 does not).
    """
    avail = available_memory_bytes() if available is None else available
    size = model_solve_size(model)
    exact = not approx and size.exact
    need = size if exact else model_solve_size(model, floor=True)
    if need.bytes <= avail:
        return
    R = 1 if model.obsolescence is None else model.obsolescence.order
    hint = "lower the capacity"
    if exact and R > 1:
        hint += f", use one obsolescence phase (rate: x): with {R} the top level has R^(K-1) states, or --approx"
    what = "solving" if exact else "even an approximate evaluation (K + 1 levels)"
    raise InputError(field, f"is {model.capacity}: {what} needs about {format_bytes(need.bytes)} of memory "
                     f"({need.n_states:.3g} states, {need.largest_level:.3g} in the top level), more than the "
                     f"{format_bytes(avail)} available", hint)


def check_config_memory(config: AgentConfig, *, available: float | None = None) -> None:
    """Refuse ``refit.max_samples`` or ``queue.capacity`` when the agent could not hold them (module docstring)."""
    avail = (available_memory_bytes() if available is None else available) * MEMORY_SHARE
    samples = float(config.refit.max_samples) * BYTES_PER_SAMPLE
    if samples > avail:
        raise InputError("refit.max_samples", f"is {config.refit.max_samples}: its samples need about "
                         f"{format_bytes(samples)} of memory, more than the {format_bytes(avail)} the agent may use "
                         f"(half of what is available)", f"keep it at most {int(avail // BYTES_PER_SAMPLE)}")
    options = config.fit.options
    max_batch = options.get("max_batch", 256)
    service = options.get("max_service_order", 10)
    if not (isinstance(max_batch, int) and isinstance(service, int)) or max_batch < 1 or service < 1:
        return  # fitting's own checks name these options at the first refit
    modes = len(config.policy.modes) if config.policy.modes is not None else len(config.all_modes)
    size = solve_size(2, service, 1, config.capacity, max_batch=max_batch, modes=modes)
    if samples + size.bytes > avail:
        raise InputError("queue.capacity", f"is {config.capacity}: a refit's solve may need about "
                         f"{format_bytes(size.bytes)} of memory ({size.n_states:.3g} states, batches up to "
                         f"{max_batch} pages, {service} service phases, {modes} modes), more than the "
                         f"{format_bytes(avail - samples)} the agent may use",
                         "lower queue.capacity, or bound the fitted model: fit.options.max_batch, "
                         "fit.options.max_service_order, policy.modes")


def connection_limit(configured: int) -> int:
    """``server.max_connections`` held below the process's file limit (``RLIMIT_NOFILE``), so that the agent
    can always open its log and accept a health check."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, int(soft) - RESERVED_FDS))
