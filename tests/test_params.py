"""ldptut.params: a chapter's frozen Params dataclass checks every field and the relations between them, reads as a
mapping of the chapter's names, and names every bad or unknown parameter."""
import dataclasses

import pytest

from ldptut.params import ChapterParams, P, ParameterError, chapter_params, param


@chapter_params
class Toy(ChapterParams):
    rounds: int = param(P.pos_int, 3)
    seeds: list[int] = param(P.list_of(P.nonneg_int), [0, 1])
    dataset: str = param(P.choice("mnist", "cifar10"), "mnist")

    def check(self) -> None:
        if self.dataset == "cifar10" and self.rounds < 2:
            raise ValueError("cifar10 needs rounds >= 2")


def test_defaults_fields_and_mapping_face():
    t = Toy()
    assert dict(t) == {"rounds": 3, "seeds": [0, 1], "dataset": "mnist"} == t and list(t) == ["rounds", "seeds", "dataset"]
    assert t["rounds"] == 3 and len(t) == 3 and repr(t) == "Toy()" and repr(t.replace(rounds=5)) == "Toy(rounds=5)"
    assert Toy().seeds is not Toy().seeds      # a list default is copied for every instance
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.rounds = 4
    with pytest.raises(KeyError):
        t["check"]
    assert Toy.spec() == {"rounds": P.pos_int, "seeds": Toy.spec()["seeds"], "dataset": Toy.spec()["dataset"]}


def test_bad_unknown_and_missing_names_are_all_named():
    with pytest.raises(ParameterError, match=r"parameter 'rounds' must be an integer >= 1, got 0"):
        Toy(rounds=0)
    with pytest.raises(ParameterError, match=r"item 1: must be an integer >= 0"):
        Toy(seeds=[0, -1])
    with pytest.raises(ParameterError) as e:
        Toy.of({"rounds": 2, "seeds": [0], "datset": "mnist"})
    assert "parameter 'dataset' is not defined" in str(e.value) and "unknown parameter 'datset' (did you mean 'dataset'?)" in str(e.value)
    with pytest.raises(ParameterError, match="cifar10 needs rounds >= 2"):   # check(): relations between fields
        Toy(dataset="cifar10", rounds=1)
    with pytest.raises(ParameterError, match="rounds"):
        Toy().replace(rounds=-1)                 # a copy is checked again


def test_of_takes_a_notebooks_names_a_mapping_or_params():
    import math

    t = Toy.of({"rounds": 4, "seeds": [2], "dataset": "cifar10", "math": math, "_hidden": 1, "f": len})
    assert t == {"rounds": 4, "seeds": [2], "dataset": "cifar10"} and Toy.of(t) is t
