"""ldptut._validate: the one home of the primitive rules (an integer, a finite real, a fraction, a bool, a string, one
of a set), and the agreement of its callers on them: the computing functions' checks, a chapter's validators
(:class:`ldptut.params.P`) and a run configuration's normalisation (:func:`ldptut.runconfig._normalise`)."""
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from ldptut import _validate as v
from ldptut.params import P, ParameterError, check_parameters
from ldptut.runconfig import _normalise

BIG = 10 ** 400  # an int beyond the float range: an integer, not a finite real

# value, is an integer, is a finite real, is a fraction in (0, 1], is a bool, is a string
TABLE = [
    (0, True, True, False, False, False),
    (1, True, True, True, False, False),
    (-2, True, True, False, False, False),
    (np.int64(5), True, True, False, False, False),
    (BIG, True, False, False, False, False),
    (True, False, False, False, True, False),
    (False, False, False, False, True, False),
    (0.5, False, True, True, False, False),
    (1.0, False, True, True, False, False),
    (3.0, False, True, False, False, False),
    (-0.0, False, True, False, False, False),
    (1e-300, False, True, True, False, False),
    (np.float32(0.25), False, True, True, False, False),
    (Fraction(1, 2), False, True, True, False, False),
    (math.nan, False, False, False, False, False),
    (np.float64("nan"), False, False, False, False, False),
    (math.inf, False, False, False, False, False),
    (-math.inf, False, False, False, False, False),
    (1 + 0j, False, False, False, False, False),
    ("3", False, False, False, False, True),
    ("0.5", False, False, False, False, True),
    ("", False, False, False, False, True),
    (None, False, False, False, False, False),
    ([1], False, False, False, False, False),
]


def _accepts(check, *args, **kwargs) -> bool:
    try:
        check(*args, **kwargs)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("value, integer, finite, fraction, boolean, string", TABLE, ids=[repr(r[0]) for r in TABLE])
def test_validate_params_and_runconfig_agree_on_the_rules(value, integer, finite, fraction, boolean, string):
    # an integer: the same everywhere; a run configuration also takes an int-valued float (its deliberate conversion)
    assert _accepts(v.integer, value, "x") == _accepts(P.integer, value) == integer
    int_valued = finite and float(value).is_integer()
    assert _accepts(_normalise, value, int, "C.x") == (integer or int_valued)
    # a finite real (P also bounds the magnitude by REAL_MAX: no value of the table is beyond it)
    assert _accepts(v.real, value, "x") == _accepts(P.real, value) == _accepts(_normalise, value, float, "C.x") == finite
    assert _accepts(v.real, value, "x", positive=True) == _accepts(P.pos_float, value) == (finite and value > 0)
    assert _accepts(v.real, value, "x", nonneg=True) == (finite and value >= 0)
    assert _accepts(v.epsilon, value) == (finite and value > 0)
    # a fraction in (0, 1], a δ in (0, 1)
    assert _accepts(v.fraction, value, "x") == _accepts(P.fraction, value) == fraction
    assert _accepts(v.delta, value) == (fraction and value < 1)
    # a bool: a run configuration also takes 0 and 1 (its deliberate conversion)
    assert _accepts(v.boolean, value, "x") == _accepts(P.boolean, value) == boolean
    assert _accepts(_normalise, value, bool, "C.x") == (boolean or (integer and value in (0, 1)))
    # a string
    assert _accepts(v.string, value, "x") == _accepts(P.string, value) == _accepts(_normalise, value, str, "C.x") == string


def test_the_values_returned_are_plain_python():
    assert v.real(np.float32(0.25), "x") == 0.25 and type(v.real(np.float32(0.25), "x")) is float
    assert type(v.real(3, "x")) is float and type(v.integer(np.int64(5), "x")) is int
    assert _normalise(3.0, int, "C.x") == 3 and type(_normalise(3.0, int, "C.x")) is int
    assert _normalise(1, bool, "C.x") is True and _normalise(np.int64(0), bool, "C.x") is False
    assert _normalise([1, 2.0], tuple[int, ...], "C.x") == (1, 2)


@pytest.mark.parametrize("t, number", [(torch.tensor(0.5), 0.5), (torch.tensor([3]), 3), (torch.tensor(2.0), 2.0)])
def test_a_one_element_tensor_is_read_as_its_number_except_by_params(t, number):
    """The computing functions' checks and a run configuration convert a one-element tensor to its number; a chapter's
    validator keeps the value as given, so it refuses a tensor (the parameter would stay a tensor)."""
    assert v.real(t, "x") == number and type(v.real(t, "x")) is float
    assert _normalise(t, float, "C.x") == number
    if not t.dtype.is_floating_point:
        assert v.integer(t, "x") == number and type(v.integer(t, "x")) is int and v.pos_int(t, "x") == number
    with pytest.raises(ValueError, match="must be a finite real number, got tensor"):
        P.real(t)
    with pytest.raises(ValueError, match="must be an integer, got tensor"):
        P.integer(t)
    with pytest.raises(ValueError, match="must be a real number in \\(0, 1\\], got tensor"):
        P.fraction(t)
    with pytest.raises(ValueError, match="must be a real number in \\(0, 1\\], got tensor"):
        v.fraction(t, "x", tensor=False)


def test_tensors_that_are_no_single_real_number_are_refused():
    for t in (torch.tensor([1.0, 2.0]), torch.tensor(1 + 1j), torch.tensor(True), torch.tensor([])):
        with pytest.raises(ValueError, match="x must be a finite real number, got tensor"):
            v.real(t, "x")
    with pytest.raises(ValueError, match="x must be an integer, got tensor"):
        v.integer(torch.tensor(True), "x")
    with pytest.raises(ValueError, match="x must be an integer, got tensor"):
        v.integer(torch.tensor(3.0), "x")


@pytest.mark.parametrize("call, message", [
    (lambda: v.real("1", "lr"), "lr must be a finite real number, got '1' (str)"),
    (lambda: v.real(True, "lr"), "lr must be a finite real number, got True (bool)"),
    (lambda: v.real(math.nan, "lr"), "lr must be a finite real number, got nan (float)"),
    (lambda: v.real(-1, "lr", positive=True), "lr must be a finite real number > 0, got -1 (int)"),
    (lambda: v.real(-1.5, "lr", nonneg=True), "lr must be a finite real number >= 0, got -1.5 (float)"),
    (lambda: v.epsilon(math.inf), "epsilon must be a finite real number > 0, got inf (float)"),
    (lambda: v.delta(1.0), "delta must be a real number in (0, 1), got 1.0 (float)"),
    (lambda: v.fraction(0, "q"), "q must be a real number in (0, 1], got 0 (int)"),
    (lambda: v.pos_int(0, "rounds"), "rounds must be an integer >= 1, got 0 (int)"),
    (lambda: v.pos_int(2.0, "rounds"), "rounds must be an integer >= 1, got 2.0 (float)"),
    (lambda: v.integer(True, "seed", minimum=0), "seed must be an integer >= 0, got True (bool)"),
    (lambda: v.boolean(1, "flag"), "flag must be True or False, got 1 (int)"),
    (lambda: v.string(3, "name"), "name must be a string, got 3 (int)"),
    (lambda: v.one_of("x", "mode", ["a", "b"]), "mode must be one of 'a', 'b', got 'x' (str)"),
    (lambda: P.pos_int(0), "must be an integer >= 1, got 0 (int)"),
    (lambda: P.choice("a", "b")("x"), "must be one of 'a', 'b', got 'x' (str)"),
    (lambda: _normalise(10.5, int, "C.n"), "C.n must be an integer, got 10.5 (float)"),
    (lambda: _normalise(math.nan, float, "C.lr"), "C.lr must be a finite real number, got nan (float): a key must equal itself"),
    (lambda: _normalise(2, bool, "C.flag"), "C.flag must be True or False, got 2 (int)"),
])
def test_one_wording_names_the_parameter_what_was_expected_and_what_was_given(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == message


def test_what_each_caller_adds_stays_with_it():
    with pytest.raises(v.NotFiniteError):               # a caller can say why finiteness matters to it
        v.real(math.inf, "x")
    with pytest.raises(ValueError, match=r"must be a number of magnitude at most 1e\+30"):   # P: float32 chapters
        P.real(1e300)
    with pytest.raises(ParameterError, match=r"parameter 'seeds' must be an integer >= 0, got '\[1, 2\]' \(str\); "
                                             r"papermill's -p passes text"):
        check_parameters({"seeds": "[1, 2]"}, {"seeds": P.nonneg_int})
    with pytest.raises(ValueError, match=r"C.n: 2.5 fits none of .*C.n must be an integer, got 2.5"):
        _normalise(2.5, int | None, "C.n")


def test_the_other_callers_use_the_shared_wording():
    """The partitions' integers, the engine's and the configurations' flags, the personal trainer's flag and a
    mechanism's scalar range parameters say what the shared rules say (they had copies of their own)."""
    import torch

    from ldptut import fl, partition
    from ldptut.mechanisms import TwoPoint
    from ldptut.personal import PersonalizedLocalSGD

    with pytest.raises(ValueError, match=r"n_clients must be an integer >= 1, got 0 \(int\)"):
        partition.iid(10, 0, seed=0)
    with pytest.raises(ValueError, match=r"n_clients must be an integer >= 1, got 2.0 \(float\)"):
        partition.iid(10, 2.0, seed=0)
    with pytest.raises(ValueError, match=r"max_tries must be an integer >= 1"):
        partition.dirichlet(torch.arange(20) % 2, 2, alpha=1.0, seed=0, max_tries=0)
    with pytest.raises(ValueError, match=r"train_eval must be True or False, got 1 \(int\)"):
        fl.FLConfig(rounds=1, train_eval=1)
    with pytest.raises(ValueError, match=r"eval_personal must be True or False, got 'yes' \(str\)"):
        PersonalizedLocalSGD(eval_personal="yes")
    with pytest.raises(ValueError, match=r"radius must be a finite real number > 0, got nan \(float\)"):
        TwoPoint(epsilon=1.0, radius=float("nan"))
    with pytest.raises(ValueError, match=r"center must be a finite real number, got True \(bool\)"):
        TwoPoint(epsilon=1.0, center=True)
