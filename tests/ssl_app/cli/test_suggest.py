"""'Did you mean …' (``ssl_app.cli.suggest``): the closest known name, and the registry an option's classes come from."""

from __future__ import annotations

import ssl_app.registry as registries
from ssl_app.cli.suggest import REGISTRY_OF_OPTION, class_path_problem, class_suggestion, closest, did_you_mean


def test_the_closest_name_alone_and_nothing_when_none_is_close():
    """Catches a list of three guesses where one is right, a case-only slip missed, and a guess for a word
    that resembles nothing."""
    assert closest("los", ["loss", "optim", "compile"]) == ["loss"]
    assert closest("infonce", ["InfoNCE", "HCL", "DCL"]) == ["InfoNCE"]
    assert closest("zzz", ["fit", "validate"]) == []
    assert did_you_mean("fti", ["fit", "validate", "test"]) == "; did you mean fit?"
    assert did_you_mean("fit", ["fit"]) == ""  # the name itself is no suggestion


def test_each_registry_is_found_by_the_option_that_selects_its_entries():
    """Catches a registry whose option changed while the map that picks the registry for a misspelled class
    still names the old one (the suggestion would then come from no registry, or the wrong one)."""
    for option, name in REGISTRY_OF_OPTION.items():
        assert getattr(registries, name).option == option


def test_a_misspelled_class_path_says_why_and_what_was_meant():
    """Catches a wrong class or module passing as a class, and a suggestion that is not the registered path."""
    assert class_path_problem("ssl_app.losses.InfoNCE") is None
    assert class_path_problem("0.5") is None and class_path_problem("cosine:0.1-1") is None  # not class paths
    assert class_path_problem("ssl_app.losses.InfoNCe") == "ssl_app.losses has no class InfoNCe"
    assert class_path_problem("ssl_app.loses.InfoNCE") == "no module named ssl_app.loses"
    loss = "--model.init_args.loss"
    assert class_suggestion(loss, "ssl_app.losses.InfoNCe") == "; did you mean ssl_app.losses.InfoNCE?"
    assert class_suggestion(loss, "ssl_app.loses.InfoNCE") == "; did you mean ssl_app.losses.InfoNCE?"
    assert class_suggestion("--model.init_args.loss.init_args.temperature", "ssl_app.temperature.Cosin") == (
        "; did you mean ssl_app.temperature.Cosine?"
    )
