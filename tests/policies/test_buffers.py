"""The search for renovation's q and RED's parameters, and the comparison of buffer policies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robotctl.agent import load_model_file
from robotctl.model import (
    BufferPolicy,
    Conflict,
    Costs,
    InputError,
    PreparedBuffer,
    QueueModel,
    Renovation,
    ThresholdPolicy,
    buffer_cost,
    cost_of,
    solve,
)
from robotctl.policies import (
    compare_buffers,
    optimise_red,
    optimise_renovation,
    red_candidates,
    simplex_pattern_search,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
OPTIMUM = ThresholdPolicy.parse("3,3,3,1,1,1")
#: response time weighs heavily: renovation pays off on the paper's traffic
RESPONSIVE = Costs(loss=5, obsolescence=10, response=30, robot=20, starvation=30)


@pytest.fixture(scope="module")
def example() -> tuple[QueueModel, Costs]:
    return load_model_file(str(EXAMPLE))


def neighbours(x: tuple[float, ...], mesh: float) -> list[np.ndarray]:
    out = []
    for a in range(len(x)):
        for b in range(len(x)):
            if a != b and x[a] >= mesh - 1e-12:
                y = np.array(x)
                y[a] -= mesh
                y[b] += mesh
                out.append(np.clip(y, 0.0, 1.0))
    return out


@pytest.mark.parametrize("target", [(0.13, 0.52, 0.05, 0.30), (-0.2, 0.7, 0.5), (0.9, 0.1)])
def test_pattern_search_finds_the_projection(target: tuple[float, ...]) -> None:
    """Minimising |x - t|^2 over the simplex gives the Euclidean projection of t (by sorting, Held et al.)."""
    t = np.array(target)

    def f(x: np.ndarray) -> float:
        return float(((x - t) ** 2).sum())

    found = simplex_pattern_search(f, t.size, tol=1 / 512)
    u = np.sort(t)[::-1]
    css = np.cumsum(u) - 1.0
    k = max(j for j in range(1, t.size + 1) if u[j - 1] - css[j - 1] / j > 0)
    projection = np.maximum(t - css[k - 1] / k, 0.0)
    assert found.stationary and found.mesh < 2 / 512
    np.testing.assert_allclose(found.x, projection, atol=2 * found.mesh)
    assert all(f(y) >= found.value for y in neighbours(found.x, found.mesh))


def test_q_n_adds_nothing(example: tuple[QueueModel, Costs]) -> None:
    """The search's reduction: q_N acts as q_{N-1} under Option 1 and as q_0 under Option 2."""
    model, costs = example
    prep = PreparedBuffer(model, OPTIMUM, BufferPolicy(False))

    def cost(q: tuple[float, ...], option: Conflict) -> float:
        return buffer_cost(prep.solve(Renovation(q, option)).measures, costs).total

    with_top = (0.2, 0.1, 0.3, 0.1, 0.3)
    assert cost(with_top, Conflict.KEEP_ONE) == pytest.approx(cost((0.2, 0.1, 0.3, 0.4), Conflict.KEEP_ONE), rel=1e-12)
    assert cost(with_top, Conflict.SKIP) == pytest.approx(cost((0.5, 0.1, 0.3, 0.1), Conflict.SKIP), rel=1e-12)


def test_renovation_optimum_is_mesh_stationary_and_beats_random_laws(example: tuple[QueueModel, Costs]) -> None:
    """The q found is no worse than any of 300 random laws (an independent, if crude, route) and no
    neighbour on its final mesh is better (checked here, outside the search)."""
    model, _ = example
    found = optimise_renovation(model, RESPONSIVE, OPTIMUM)
    assert found.success
    best = found.best
    prep = PreparedBuffer(model, OPTIMUM, BufferPolicy(False))
    option = best.buffer.renovation.conflict  # type: ignore[union-attr]

    def cost(x: np.ndarray, option: Conflict = option) -> float:
        return buffer_cost(prep.solve(Renovation(tuple(x / x.sum()), option)).measures, RESPONSIVE).total

    rng = np.random.default_rng(3)
    random_best = min(cost(rng.dirichlet(np.ones(4)), opt) for opt in Conflict for _ in range(150))
    assert best.cost.total <= random_best + 1e-9
    search = dict(found.by_option)[option]
    assert search.stationary
    assert all(cost(y) >= search.value - 1e-12 for y in neighbours(search.x, search.mesh))
    timers = cost_of(solve(model, OPTIMUM).measures, RESPONSIVE).total
    assert best.cost.total < timers  # renovation pays off when response time is expensive


def test_red_search_covers_its_grid(example: tuple[QueueModel, Costs]) -> None:
    model, _ = example
    candidates = red_candidates(5, 10)
    assert len({d.probabilities for d in candidates}) == len(candidates)
    assert (0.0,) * 5 in {d.probabilities for d in candidates}  # no early drop is among them
    best = optimise_red(model, RESPONSIVE, OPTIMUM, levels=4)
    none = buffer_cost(PreparedBuffer(model, OPTIMUM, BufferPolicy(False)).solve(None).measures, RESPONSIVE)
    assert best.cost.total <= none.total
    assert best.buffer.red is not None and best.buffer.red.parameters is not None


def test_comparison_on_the_paper_example(example: tuple[QueueModel, Costs]) -> None:
    model, costs = example
    c = compare_buffers(model, costs, OPTIMUM, red_levels=4)
    assert c.success
    names = [x.name for x in c.choices]
    assert names == ["timers", "renovation", "red", "none"]
    by = {x.name: x for x in c.choices}
    assert by["timers"].cost.total == pytest.approx(63.5425477, abs=1e-6)  # paper 000's J
    assert c.best.cost.total == min(x.cost.total for x in c.choices)
    # renovation and RED can always fall back to dropping nothing
    assert by["renovation"].cost.total <= by["none"].cost.total + 1e-12
    assert by["red"].cost.total <= by["none"].cost.total + 1e-12


def test_input_errors() -> None:
    with pytest.raises(InputError, match=r"^tol"):
        simplex_pattern_search(lambda x: 0.0, 3, tol=0.0)
    with pytest.raises(InputError, match=r"^dim"):
        simplex_pattern_search(lambda x: 0.0, 0)


def test_a_huge_grid_is_lowered_to_the_finest_within_the_limit_at_once() -> None:
    """Issue 23, defect 7: the grid was lowered one step at a time (a billion steps for --grid 1000000000)."""
    def f(x: np.ndarray) -> float:
        return float(np.sum((x - np.array([0.2, 0.3, 0.5])) ** 2))

    huge = simplex_pattern_search(f, 3, grid=10**9, tol=1 / 64)
    finest = simplex_pattern_search(f, 3, grid=14, tol=1 / 64)  # C(16, 2) = 120 points, the limit
    assert huge.grid == finest.grid == 14
    assert huge.x == finest.x
