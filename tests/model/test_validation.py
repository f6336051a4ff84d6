"""Invalid input raises InputError naming the field, the value and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from robotctl.model import (
    BMAP,
    PH,
    InputError,
    ModeArrivals,
    QueueModel,
    ThresholdPolicy,
    model_from_dict,
    model_to_dict,
)

GOOD = {
    "capacity": 3,
    "arrivals": {"per_mode": {1: [[[-2.0]], [[2.0]]], 2: [[[-4.0]], [[3.0]], [[1.0]]]}},
    "service": {"rate": 1.5},
    "obsolescence": {"gamma": [0.5, 0.5], "Gamma": [[-1.0, 0.5], [0.0, -0.5]]},
}


def with_change(path: tuple, value: object) -> dict:
    import copy

    d = copy.deepcopy(GOOD)
    node = d
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return d


@pytest.mark.parametrize(("path", "value", "field"), [
    (("capacity",), 0, "model.capacity"),
    (("capacity",), "five", "model.capacity"),
    (("capacity",), KeyError, "model.capacity"),
    (("service", "rate"), -1.0, "model.service.rate"),
    (("service",), {"beta": [1.0], "S": [[-1.0, 0.0]]}, "model.service.S"),
    (("service",), {"beta": [0.5, 0.6], "S": [[-1.0, 0.0], [0.0, -1.0]]}, "model.service.beta"),
    (("service",), {"beta": [1.0], "S": [[1.0]]}, "model.service.S"),
    (("obsolescence",), {"gamma": [1.0, 0.0], "Gamma": [[-1.0, -0.5], [0.0, -1.0]]}, "model.obsolescence.Gamma"),
    (("arrivals", "per_mode", 1), [[[-2.0]], [[1.0]]], "model.arrivals.per_mode.1"),
    (("arrivals", "per_mode", 1), [[[-2.0]], [[-2.0]]], "model.arrivals.per_mode.1.D_1"),
    (("arrivals", "per_mode", 1), [[[-2.0, 2.0]], [[0.0]]], "model.arrivals.per_mode.1.D_0"),
    (("arrivals", "per_mode", 2), [[[-2.0, 1.0], [1.0, -2.0]], [[1.0, 0.0], [0.0, 1.0]]],
     "model.arrivals.per_mode.2"),
    (("arrivals",), {"per_mod": {}}, "model.arrivals"),
    (("admission",), "drop-tail", "model.admission"),
    (("colour",), "blue", "model.colour"),
])
def test_bad_model_names_the_field(path: tuple, value: object, field: str) -> None:
    with pytest.raises(InputError) as info:
        model_from_dict(with_change(path, value))
    assert info.value.field.startswith(field), info.value.field
    assert str(info.value).startswith(info.value.field)
    assert info.value.hint


def test_reducible_arrival_process_is_rejected() -> None:
    with pytest.raises(InputError, match="irreducible"):
        BMAP((np.array([[-1.0, 1.0], [0.0, -1.0]]), np.array([[0.0, 0.0], [0.0, 1.0]])))


def test_phase_that_never_exits_is_rejected() -> None:
    with pytest.raises(InputError, match="phase 1 can never be left"):
        PH(np.array([1.0, 0.0]), np.array([[-1.0, 0.0], [0.0, 0.0]]))


def test_good_model_round_trips() -> None:
    model = model_from_dict(GOOD)
    again = model_from_dict(model_to_dict(model))
    assert again.capacity == model.capacity
    for mode in model.modes:
        assert again.arrivals[mode].allclose(model.arrivals[mode])
    assert again.service.allclose(model.service)
    assert model.obsolescence is not None and again.obsolescence is not None
    assert again.obsolescence.allclose(model.obsolescence)


def test_caller_arrays_are_not_changed_and_results_are_frozen() -> None:
    S = np.array([[-2.0, 1.0], [0.0, -1.0]])
    beta = np.array([0.5, 0.5])
    law = PH(beta, S)
    S[0, 0] = -99.0
    assert law.S[0, 0] == -2.0
    with pytest.raises(ValueError):
        law.S[0, 0] = 1.0


@pytest.mark.parametrize(("text", "field"), [("3,4,1", "policy[1]"), ("3,x", "policy"), ("3", "policy"),
                                              ("2,-1", "policy[1]")])
def test_bad_policy(text: str, field: str) -> None:
    with pytest.raises(InputError) as info:
        ThresholdPolicy.parse(text)
    assert info.value.field == field


def test_policy_must_fit_the_model() -> None:
    model = model_from_dict(GOOD)
    with pytest.raises(InputError, match="K = 3 needs 4"):
        model.check_policy(ThresholdPolicy.parse("2,2,1,1,1"))
    with pytest.raises(InputError, match=r"mode\(s\) \[3\]"):
        model.check_policy(ThresholdPolicy.parse("3,2,1,1"))


def test_modes_must_share_the_arrival_order() -> None:
    with pytest.raises(InputError, match="same number of phases"):
        ModeArrivals.per_mode({1: BMAP.poisson(1.0), 2: BMAP((np.array([[-2.0, 1.0], [1.0, -2.0]]), np.eye(2)))})


def test_thresholds_round_trip() -> None:
    policy = ThresholdPolicy.from_thresholds((4, 3, 2, 1), (0, 2, 2), 5)
    assert policy.robots_at_level == (4, 3, 3, 1, 1, 1)
    assert policy.thresholds_for((4, 3, 2, 1)) == (0, 2, 2)
    assert policy.modes == (4, 3, 1) and policy.thresholds == (0, 2)
    with pytest.raises(InputError, match=r"0\.\.K-1"):
        ThresholdPolicy.from_thresholds((3, 1), (5,), 5)


def test_queue_model_rejects_bad_capacity() -> None:
    arrivals = ModeArrivals.per_mode({1: BMAP.poisson(1.0)})
    with pytest.raises(InputError, match=r"model\.capacity"):
        QueueModel(0, arrivals, PH.exponential(1.0))
