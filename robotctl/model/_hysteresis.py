"""Hysteresis policies and their exact evaluation (issue 24; paper 000's chain with the fleet in the state).

A **hysteresis policy** is a pair of non-increasing vectors ``park`` = r_park(0..K) and ``resume`` =
r_resume(0..K) with r_resume <= r_park. After every event, with i pages in the system and r robots active,
the controller parks robots down to r_park(i) when r > r_park(i) and resumes robots up to r_resume(i) when
r < r_resume(i); otherwise nothing changes. The plain threshold policy r(i) of paper 000 is the special case
r_resume = r_park = r. One robot parked or resumed is one **command**.

The number of active robots r becomes part of the Markov state: level i holds (r, nu, m, r_1..r_{i-1}) for
the r values the policy can reach at level i (module ``model._levels`` for the rest of the state). The
generator blocks of paper 000's Lemma under mode r, Q^(r)_{i,j}, move (i, r) to (j, clamp_j(r)) with
clamp_j(r) = min(max(r, r_resume(j)), r_park(j)); transitions inside a level never change r (r already lies
in [r_resume(i), r_park(i)]). The chain is still skip-free downwards with batch jumps upwards, so the
stationary vector follows from the paper's Section 3 algorithm on the augmented blocks:

    Pi_{j -> l} = Pi_{j -> l+1} G_l (first entry into level l from level j > l; Pi_{l -> l} = I),
    Qbar_{i,l} = sum_{j >= l} Q_{i,j} Pi_{j -> l},   G_{l-1} = (-Qbar_{l,l})^{-1} Q_{l,l-1},
    p_0 Qbar_{0,0} = 0,   p_l = (sum_{i<l} p_i Qbar_{i,l}) (-Qbar_{l,l})^{-1},  then sum p = 1.

The measures are the paper's (Section 4, eqs. (5)-(15); Section 5 through the tagged page, whose fate does
not depend on later arrivals), summed over the augmented states with the rate columns of the state's own
mode, and the **command rate** C = sum over level changes of (rate) x |clamp_j(r) - r| per second;
``commands_per_robot_min`` = 60 C / N with N the fleet (the largest mode of the arrivals).

**Which states.** The chain starts empty with r_park(0) robots active; the states kept are the (level,
robots) pairs reachable from there that the chain cannot leave (its closed class). A policy whose reachable
part holds more than one closed class has no single long-run behaviour and is refused.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._levels import LevelChain
from ._matrices import fast_kron, to_dense
from ._measures import CostBreakdown, Measures, cost_of
from ._model import Costs, QueueModel
from ._policy import QueueLengthPolicy

Array = NDArray[np.float64]

#: Seconds per minute: ``commands_per_robot_min`` = commands per second x 60 / N.
PER_MINUTE = 60.0


def per_robot_minute(commands_per_s: float, fleet: int) -> float:
    """Commands per robot per minute from commands per second and the fleet size N."""
    return commands_per_s * PER_MINUTE / fleet if fleet > 0 else float("nan")


def fleet_size(model: QueueModel) -> int:
    """N: the largest number of robots the arrivals define."""
    return max(model.modes)


def _parse_vector(name: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x != "")
    except ValueError as exc:
        raise InputError(name, f"{text!r} is not a comma-separated list of integers",
                         "write e.g. 3,3,3,1,1,1 (robots at queue length 0..K)") from exc


@dataclass(frozen=True)
class HysteresisPolicy:
    """Park down to ``park[i]`` above it, resume up to ``resume[i]`` below it (module docstring).

    Attributes
    ----------
    park : tuple of int
        r_park(0..K), non-increasing, entries >= 0.
    resume : tuple of int
        r_resume(0..K), non-increasing, ``resume[i] <= park[i]``.
    """

    park: tuple[int, ...]
    resume: tuple[int, ...]

    def __post_init__(self) -> None:
        park, resume = tuple(self.park), tuple(self.resume)
        for name, vec in (("park", park), ("resume", resume)):
            if len(vec) < 2:
                raise InputError(name, f"needs K + 1 >= 2 entries (levels 0..K), got {len(vec)}",
                                 "give one robot count per queue length 0..K, e.g. 3,3,3,1,1,1 for K = 5")
            for i, x in enumerate(vec):
                if isinstance(x, bool) or not isinstance(x, int | np.integer) or x < 0:
                    raise InputError(f"{name}[{i}]", f"must be a whole number of robots >= 0, got {x!r}",
                                     "use integers")
            for i in range(1, len(vec)):
                if vec[i] > vec[i - 1]:
                    raise InputError(f"{name}[{i}]", f"is {vec[i]} > {vec[i - 1]} at level {i - 1}: "
                                     "not non-increasing", "a longer queue must never ask for more robots")
        if len(park) != len(resume):
            raise InputError("resume", f"has {len(resume)} levels but park has {len(park)}",
                             "give both vectors one entry per queue length 0..K")
        for i, (a, b) in enumerate(zip(park, resume)):
            if b > a:
                raise InputError(f"resume[{i}]", f"is {b} > park[{i}] = {a}",
                                 "resume up to at most the park level: resume <= park at every queue length")
        object.__setattr__(self, "park", tuple(int(x) for x in park))
        object.__setattr__(self, "resume", tuple(int(x) for x in resume))

    @classmethod
    def parse(cls, park: str, resume: str) -> HysteresisPolicy:
        """From "3,3,3,1,1,1" and "3,3,1,1,1,1"."""
        return cls(_parse_vector("park", park), _parse_vector("resume", resume))

    @classmethod
    def threshold(cls, policy: QueueLengthPolicy | Sequence[int]) -> HysteresisPolicy:
        """The plain threshold policy r(i) as the hysteresis policy r_resume = r_park = r."""
        r = tuple(policy.robots_at_level) if isinstance(policy, QueueLengthPolicy) else tuple(policy)
        return cls(r, r)

    @property
    def capacity(self) -> int:
        return len(self.park) - 1

    @property
    def is_threshold(self) -> bool:
        return self.park == self.resume

    @property
    def modes(self) -> tuple[int, ...]:
        """Every robot count the policy may run, largest first (the reachable ones are a subset)."""
        return tuple(range(self.park[0], self.resume[-1] - 1, -1))

    @property
    def start(self) -> int:
        """Robots active when the queue starts empty: r_park(0)."""
        return self.park[0]

    def next_robots(self, queue_length: int, robots: int) -> int:
        """Robots active after an event that leaves ``queue_length`` pages with ``robots`` active."""
        return min(max(robots, self.resume[queue_length]), self.park[queue_length])

    def check(self, model: QueueModel) -> None:
        """Raise InputError unless the policy fits the model (K + 1 levels, modes defined)."""
        if self.capacity != model.capacity:
            raise InputError("park", f"has {len(self.park)} levels but K = {model.capacity} needs "
                             f"{model.capacity + 1}", "give one robot count per queue length 0..K")
        defined = set(model.modes)
        for name, vec in (("park", self.park), ("resume", self.resume)):
            unknown = sorted(set(vec) - defined)
            if unknown:
                raise InputError(name, f"uses mode(s) {unknown} that the arrivals do not define "
                                 f"(defined: {sorted(defined)})", "use defined modes or add them under model.arrivals")

    def to_dict(self) -> dict[str, list[int]]:
        return {"park": list(self.park), "resume": list(self.resume)}

    def __str__(self) -> str:
        return f"park {','.join(map(str, self.park))} resume {','.join(map(str, self.resume))}"


def closed_class(edges: dict[tuple[int, int], set[tuple[int, int]]],
                 start: tuple[int, int]) -> list[tuple[int, int]]:
    """The nodes of the single closed class reachable from ``start`` in a small directed graph (InputError
    when there are several)."""
    seen = {start}
    stack = [start]
    while stack:
        for nxt in edges[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    # strongly connected components; the closed classes are those no edge leaves
    nodes = sorted(seen)
    at = {s: k for k, s in enumerate(nodes)}
    rows = [at[s] for s in nodes for _ in edges[s]]
    cols = [at[t] for s in nodes for t in edges[s]]
    graph = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(nodes), len(nodes)))
    _, labels = csgraph.connected_components(graph, directed=True, connection="strong")
    leaving = {int(labels[r]) for r, c in zip(rows, cols) if labels[r] != labels[c]}
    members: dict[int, list[tuple[int, int]]] = {}
    for s in nodes:
        members.setdefault(int(labels[at[s]]), []).append(s)
    classes = [m for lab, m in members.items() if lab not in leaving]
    if len(classes) != 1:
        raise InputError("resume", f"the policy has {len(classes)} closed classes of (queue length, robots) "
                         "reachable from an empty queue, so its long-run behaviour depends on chance",
                         "use vectors where every robot count can be reached back, e.g. resume(0) >= park(K)")
    return sorted(classes[0])


@dataclass(frozen=True, eq=False)
class HysteresisSolution:
    """Exact stationary solution of a hysteresis policy.

    Attributes
    ----------
    policy : HysteresisPolicy
    measures : Measures
        The paper's measures; ``commands_per_s`` included.
    fleet : int
        N, the fleet size (largest mode).
    robots_at_level : tuple of tuple of int
        The robot counts kept at each level (the closed class), increasing.
    level_vectors : tuple of ndarray
        p_i over (robots, inner state), robots outermost in the order of ``robots_at_level[i]``.
    n_states, residual, seconds
        States of the augmented chain, max |p Q| (and |sum p - 1|), wall time.
    """

    policy: HysteresisPolicy
    measures: Measures
    fleet: int
    robots_at_level: tuple[tuple[int, ...], ...]
    level_vectors: tuple[Array, ...]
    n_states: int
    residual: float
    seconds: float

    @property
    def commands_per_s(self) -> float:
        return self.measures.commands_per_s

    @property
    def commands_per_robot_min(self) -> float:
        return self.measures.commands_per_robot_min

    def cost(self, costs: Costs) -> CostBreakdown:
        return cost_of(self.measures, costs)


class HysteresisChain:
    """The policy-independent pieces of the augmented chain of one model, shared by many evaluations.

    Parameters
    ----------
    model : QueueModel
    level_chain : LevelChain, optional
        Default: the exact chain of ``model._levels`` (full depth).
    """

    def __init__(self, model: QueueModel, level_chain: LevelChain | None = None) -> None:
        self.model = model
        #: the level chain of ``model._levels``: exact by default; an ordered-head chain of depth h makes
        #: every measure the approximation of that chain (``exact`` False)
        self.chain = LevelChain(model) if level_chain is None else level_chain
        self.exact = self.chain.exact
        self.K = model.capacity
        self.W = self.chain.W
        self.fleet = fleet_size(model)
        self._blocks: dict[tuple[str, int, int, int], Array] = {}
        self._jumps: dict[tuple[int, int], tuple[int, ...]] = {}

    # -- blocks of the base chain under one mode -------------------------------------------------
    def jumps(self, mode: int, i: int) -> tuple[int, ...]:
        """The numbers of admitted pages a > 0 with a positive rate at level i under ``mode``."""
        key = (mode, i)
        if key not in self._jumps:
            arr = self.chain.arrivals(mode, i)
            self._jumps[key] = tuple(a for a in range(1, len(arr)) if arr[a].any())
        return self._jumps[key]

    def block(self, kind: str, i: int, mode: int, a: int = 0) -> Array:
        """Q^(mode)_{i,i} (``diag``), Q_{i,i+a} (``up``) or Q_{i,i-1} (``down``), dense."""
        key = (kind, i, mode if kind != "down" else -1, a)
        hit = self._blocks.get(key)
        if hit is not None:
            return hit
        c = self.chain
        inner = c.inner_dim(i)
        if kind == "diag":
            arr0 = c.arrivals(mode, i)[0]
            out = fast_kron(arr0, np.eye(inner))
            if i > 0:
                out = out + fast_kron(np.eye(self.W), to_dense(c.A(i)))
        elif kind == "up":
            out = fast_kron(c.arrivals(mode, i)[a], to_dense(c.up(i, a)))
        else:
            out = fast_kron(np.eye(self.W), to_dense(c.down(i)))
        self._blocks[key] = out
        return out

    def level_rates(self, mode: int, i: int) -> tuple[Array, Array]:
        """On the states of level i under ``mode``: the rate of going down one level (service or
        obsolescence), and for each a of :meth:`jumps` the rate of a batch admitting a pages (columns)."""
        key = ("rates", i, mode, 0)
        hit = self._blocks.get(key)
        if hit is None:
            cols = self.columns(mode, i)
            inner = self.chain.inner_dim(i)
            arr = self.chain.arrivals(mode, i)
            ups = [np.repeat(arr[a].sum(axis=1), inner) for a in self.jumps(mode, i)]
            hit = np.column_stack([cols[:, 4] + cols[:, 5], *ups])
            self._blocks[key] = hit
        return hit[:, 0], hit[:, 1:]

    def columns(self, mode: int, i: int) -> Array:
        """Rate columns of ``LevelChain.rate_columns`` (starvation, robots, offered, lost, served, obsolete,
        will_serve, will_expire, served_time, obsolete_time, queue_length)."""
        return np.asarray(self.chain.rate_columns(mode, i))

    # -- the policy's states -----------------------------------------------------------------------
    def states(self, policy: HysteresisPolicy) -> tuple[tuple[int, ...], ...]:
        K = self.K
        edges: dict[tuple[int, int], set[tuple[int, int]]] = {}

        def out(node: tuple[int, int]) -> set[tuple[int, int]]:
            i, r = node
            s: set[tuple[int, int]] = set()
            if i > 0:
                s.add((i - 1, policy.next_robots(i - 1, r)))
            for a in self.jumps(r, i):
                s.add((i + a, policy.next_robots(i + a, r)))
            return s

        start = (0, policy.start)
        todo = [start]
        while todo:
            node = todo.pop()
            if node in edges:
                continue
            edges[node] = out(node)
            todo.extend(n for n in edges[node] if n not in edges)
        nodes = closed_class(edges, start)
        per_level: list[list[int]] = [[] for _ in range(K + 1)]
        for i, r in nodes:
            per_level[i].append(r)
        return tuple(tuple(sorted(x)) for x in per_level)


def solve_hysteresis(model: QueueModel, policy: HysteresisPolicy, *,
                     chain: HysteresisChain | None = None) -> HysteresisSolution:
    """Exact stationary measures of ``model`` under the hysteresis ``policy`` (module docstring).

    Parameters
    ----------
    model : QueueModel
    policy : HysteresisPolicy
    chain : HysteresisChain, optional
        The shared blocks of ``model`` (pass one when evaluating many policies of one model).

    Examples
    --------
    >>> from robotctl.model import HysteresisPolicy, fleet_model, solve_hysteresis
    >>> model, costs = fleet_model(4, 6)
    >>> sol = solve_hysteresis(model, HysteresisPolicy((4, 4, 3, 2, 2, 1, 1), (4, 2, 2, 1, 1, 1, 1)))
    >>> round(sum(sol.measures.queue_length_distribution), 12), sol.commands_per_robot_min > 0
    (1.0, True)
    """
    start_time = time.perf_counter()
    if chain is None or chain.model is not model:
        chain = HysteresisChain(model)
    policy.check(model)
    K = model.capacity
    robots = chain.states(policy)
    inner = [chain.chain.dim(i) for i in range(K + 1)]
    dims = [len(robots[i]) * inner[i] for i in range(K + 1)]
    pos = [{r: k for k, r in enumerate(robots[i])} for i in range(K + 1)]
    # augmented blocks Q_{i,j}, dense
    Q: dict[tuple[int, int], Array] = {}

    def put(i: int, j: int, r: int, r2: int, blk: Array) -> None:
        mat = Q.get((i, j))
        if mat is None:
            mat = Q[i, j] = np.zeros((dims[i], dims[j]))
        a, b = pos[i][r] * inner[i], pos[j][r2] * inner[j]
        mat[a:a + inner[i], b:b + inner[j]] += blk

    kmax = 0
    for i in range(K + 1):
        for r in robots[i]:
            put(i, i, r, r, chain.block("diag", i, r))
            if i > 0:
                put(i, i - 1, r, policy.next_robots(i - 1, r), chain.block("down", i, r))
            for a in chain.jumps(r, i):
                kmax = max(kmax, a)
                put(i, i + a, r, policy.next_robots(i + a, r), chain.block("up", i, r, a))
    # backward pass: Pi[j, l] for l < j <= l + kmax, Qbar row blocks
    Pi: dict[tuple[int, int], Array] = {}
    lus: list[tuple[Array, NDArray[np.int32]] | None] = [None] * (K + 1)
    G: list[Array] = [np.zeros((0, 0))] * (K + 1)

    def qbar(i: int, l: int) -> Array | None:
        """Qbar_{i,l} = sum_{j >= l} Q_{i,j} Pi_{j -> l} (None when zero)."""
        acc: Array | None = None
        for j in range(l, min(K, i + kmax) + 1):
            q = Q.get((i, j))
            if q is None:
                continue
            term = q if j == l else q @ Pi[j, l]
            acc = term.copy() if acc is None else acc + term
        return acc

    for l in range(K, 0, -1):
        diag = qbar(l, l)
        assert diag is not None
        lus[l] = la.lu_factor(-diag, check_finite=False)
        G[l - 1] = la.lu_solve(lus[l], Q[l, l - 1], check_finite=False)
        Pi[l, l - 1] = G[l - 1]
        for j in range(l + 1, min(K, l - 1 + kmax) + 1):
            Pi[j, l - 1] = Pi[j, l] @ G[l - 1]
    q00 = qbar(0, 0)
    assert q00 is not None
    A = q00.T.copy()
    A[0, :] = 1.0
    rhs = np.zeros(dims[0])
    rhs[0] = 1.0
    p: list[Array] = [np.asarray(np.linalg.solve(A, rhs), dtype=float)]
    # inflow[j]: the flow sum_{i < l} p_i Q_{i,j} into level j >= l from the levels already solved, so that
    # sum_{i<l} p_i Qbar_{i,l} = sum_{j >= l} inflow[j] Pi_{j -> l}: vectors only, O(K k_max) products
    inflow: dict[int, Array] = {}

    def spill(i: int) -> None:
        for j in range(i + 1, min(K, i + kmax) + 1):
            q = Q.get((i, j))
            if q is not None:
                inflow[j] = inflow[j] + p[i] @ q if j in inflow else p[i] @ q

    spill(0)
    for l in range(1, K + 1):
        acc = np.zeros(dims[l])
        for j in range(l, min(K, l - 1 + kmax) + 1):
            flow = inflow.get(j)
            if flow is not None:
                acc += flow if j == l else flow @ Pi[j, l]
        inflow.pop(l, None)
        lu = lus[l]
        assert lu is not None
        p.append(la.lu_solve(lu, acc, trans=1, check_finite=False))
        spill(l)
    total = sum(float(x.sum()) for x in p)
    p = [x / total for x in p]
    residual = abs(sum(float(x.sum()) for x in p) - 1.0)
    for j in range(K + 1):
        acc = np.zeros(dims[j])
        for i in range(max(0, j - kmax), min(K, j + 1) + 1):
            q = Q.get((i, j))
            if q is not None:
                acc += p[i] @ q
        residual = max(residual, float(np.abs(acc).max()))
    measures = _measures(chain, policy, robots, p, inner)
    fleet = chain.fleet
    return HysteresisSolution(policy, measures, fleet, robots, tuple(p), sum(dims), residual,
                              time.perf_counter() - start_time)


def _measures(chain: HysteresisChain, policy: HysteresisPolicy, robots: tuple[tuple[int, ...], ...],
              p: list[Array], inner: list[int]) -> Measures:
    K = chain.K
    totals = np.zeros(11)
    level = np.zeros(K + 1)
    dist: dict[int, float] = {}
    commands = 0.0
    for i in range(K + 1):
        for k, r in enumerate(robots[i]):
            x = p[i][k * inner[i]:(k + 1) * inner[i]]
            cols = chain.columns(r, i)
            totals += x @ cols
            mass = float(x.sum())
            level[i] += mass
            dist[r] = dist.get(r, 0.0) + mass
            # level changes: down one page (service or obsolescence), up by a admitted pages
            down, ups = chain.level_rates(r, i)
            if i > 0:
                commands += abs(policy.next_robots(i - 1, r) - r) * float(x @ down)
            jumps = chain.jumps(r, i)
            if jumps:
                moved = np.array([abs(policy.next_robots(i + a, r) - r) for a in jumps], dtype=float)
                if moved.any():
                    commands += float((x @ ups) @ moved)
    (starvation, robots_mean, offered, lost, served, obsolete, _will_serve, _will_expire, served_time,
     obsolete_time, queue_length) = (float(v) for v in totals)
    p_succ, p_obs = served / offered, obsolete / offered
    v1 = served_time / served if served > 0 else float("nan")
    v2 = obsolete_time / obsolete if obsolete > 0 else 0.0
    return Measures(arrival_rate=offered, p_loss=lost / offered, p_obsolete=p_obs, p_success=p_succ,
                    p_starvation=starvation, mean_active_robots=robots_mean,
                    active_robots_distribution=tuple(sorted(dist.items(), reverse=True)),
                    queue_length_distribution=tuple(float(v) for v in level), mean_queue_length=queue_length,
                    mean_response_served=v1, mean_sojourn_obsolete=v2, mean_sojourn=v1 * p_succ + v2 * p_obs,
                    commands_per_s=commands, commands_per_robot_min=per_robot_minute(commands, chain.fleet))
