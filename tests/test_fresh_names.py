"""Fresh names: never one the module uses, never one handed out before in the same rewrite."""

from __future__ import annotations

from amprewrite.analysis.names import FreshNames


def test_the_first_free_candidate_then_numbered_ones() -> None:
    names = FreshNames({"loss", "loss_2"})
    assert names.fresh(("loss", "amp_loss")) == "amp_loss"
    assert names.fresh(("loss", "amp_loss")) == "loss_3"  # amp_loss is now taken too
    assert names.fresh(("scaler",)) == "scaler"
    assert names.fresh(("scaler",)) == "scaler_2"


def test_the_module_names_are_not_changed() -> None:
    taken = {"x"}
    FreshNames(taken).fresh(("x",))
    assert taken == {"x"}
