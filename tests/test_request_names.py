"""Names that say what they are: a backend request is named for what it does (its verb
first), and no HTTP model or result type shares a name with one (or with each other), so
a reader never confuses them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

from pydantic import BaseModel

import prme_pg.http
from prme_pg import backends, models

# What a request can do to the engine; a new request starts with one of these (or adds one).
VERBS = {
    "Add",
    "Apply",
    "Archive",
    "Assemble",
    "Authenticate",
    "Create",
    "Find",
    "Get",
    "Index",
    "Is",
    "Link",
    "List",
    "Mark",
    "Publish",
    "Recall",
    "Record",
    "Register",
    "Reinforce",
    "Replay",
    "Reset",
    "Resolve",
    "Revoke",
    "Set",
    "Store",
    "Submit",
    "Verify",
}


def _request_classes() -> dict[str, type]:
    return {
        name: value
        for name, value in vars(backends).items()
        if inspect.isclass(value) and issubclass(value, backends.Request) and value is not backends.Request
    }


def _http_models() -> dict[str, str]:
    """Every pydantic model defined in prme_pg.http, by name, with its module."""
    models: dict[str, str] = {}
    for info in pkgutil.iter_modules(prme_pg.http.__path__, prefix="prme_pg.http."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseModel) and value.__module__ == module.__name__:
                models[name] = module.__name__
    return models


def test_every_request_is_exported_and_named_for_its_verb() -> None:
    requests = _request_classes()
    assert len(requests) > 30  # the lookup found them
    assert set(requests) <= set(backends.__all__)
    unnamed = {name for name in requests if re.findall(r"[A-Z][a-z]*", name)[0] not in VERBS}
    assert not unnamed, f"requests not named for their verb: {sorted(unnamed)}"


def test_no_http_model_shares_a_name_with_a_request() -> None:
    models = _http_models()
    assert {"NodeOut", "Problem", "Readiness", "ReceiptOut"} <= set(models)  # the lookup found them
    shared = set(models) & set(_request_classes())
    assert not shared, f"HTTP models named like backend requests: {sorted(shared)}"


def test_no_result_type_shares_a_name_with_a_request_or_an_http_model() -> None:
    """The third family of names: prme_pg.models' result types (what a request returns)."""
    results = {
        name
        for name, value in vars(models).items()
        if inspect.isclass(value) and value.__module__ == models.__name__ and not name.startswith("_")
    }
    assert {"Node", "OutcomeSummary", "Receipt"} <= results  # the lookup found them
    assert not results & set(_request_classes()), "result types named like backend requests"
    assert not results & set(_http_models()), "result types named like HTTP models"
