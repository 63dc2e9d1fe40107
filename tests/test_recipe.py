"""The design space and its registry."""

import pytest

from regmem.recipe import Recipe, Regressor, Solver, Weights, entries, find, format_table, get


def test_every_entry_names_an_op_and_a_ttr_source():
    names = [e.name for e in entries()]
    assert len(names) == len(set(names))
    assert {"linear_attn", "retnet", "mamba2", "gla", "gated_linear_attn"} <= set(names)
    for e in entries():
        assert e.op and e.source and isinstance(e.recipe, Recipe)


def test_find_returns_every_model_at_a_point():
    point = Recipe(Weights("scalar_decay"), Regressor("linear"), Solver("gd_step"))
    assert {e.name for e in find(point)} == {"gated_linear_attn", "mamba2"}


def test_recipes_are_frozen_values():
    a = Recipe(Weights("uniform"), Regressor("linear"), Solver("gd_step"))
    assert a == get("linear_attn").recipe
    with pytest.raises(AttributeError):
        a.weights = Weights("scalar_decay")


@pytest.mark.parametrize(
    "make",
    [
        lambda: Weights("exponential"),
        lambda: Regressor("cubic"),
        lambda: Regressor("local_polynomial"),
        lambda: Regressor("linear", degree=1),
        lambda: Solver("adam"),
        lambda: Solver("gd_steps", steps=0),
    ],
)
def test_invalid_coordinates_raise(make):
    with pytest.raises(ValueError):
        make()


def test_unknown_name_raises():
    with pytest.raises(ValueError, match="unknown recipe"):
        get("transformer-xl")


def test_table_has_a_row_per_entry():
    table = format_table()
    assert table.count("\n") == len(entries()) + 1
    assert "| gla | diagonal_decay | linear | gd_step |" in table
