"""POST /v1/nodes:batch (docs/IMPORT.md): add_nodes over HTTP."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from prme_pg import MemoryClient

from .live_server import serve
from .test_http import Api, _problem


@pytest.fixture
def api(db_dsn: str) -> Iterator[Api]:
    with MemoryClient(db_dsn) as memory:
        alice = memory.create_api_token("alice", label="test")
        bob = memory.create_api_token("bob")
    with serve(db_dsn, max_size=4) as base:
        yield Api(base, db_dsn, alice, bob)


def test_a_batch_is_created_then_replayed(api: Api) -> None:
    ids = [str(uuid.uuid4()) for _ in range(3)]
    items = [
        {"content": "alice prefers tabs", "node_id": ids[0]},
        {"content": "no schedule", "node_id": ids[1], "next_review_at": None, "created_at": "2024-01-02T03:04:05Z"},
        {"content": "by cadence", "node_id": ids[2], "scope": "work"},
    ]
    with api.client(api.alice) as http:
        first = http.post("/v1/nodes:batch", json={"items": items})
        assert first.status_code == 200, first.text
        body = first.json()
        assert (body["created"], body["replayed"]) == (3, 0)
        assert [i["node"]["id"] for i in body["items"]] == ids
        assert body["items"][1]["node"]["next_review_at"] is None
        assert body["items"][1]["node"]["created_at"] == "2024-01-02T03:04:05Z"
        assert body["items"][2]["node"]["next_review_at"] is not None
        again = http.post("/v1/nodes:batch", json={"items": items}).json()
        assert (again["created"], again["replayed"]) == (0, 3)
        assert {i["status"] for i in again["items"]} == {"replayed"}
    with api.client(api.bob) as http:  # another owner's ids are its own
        assert http.get(f"/v1/nodes/{ids[0]}").status_code == 404


def test_a_bad_item_is_a_problem_naming_it_and_nothing_is_written(api: Api) -> None:
    items = [{"content": "fine"}, {"content": "fine too"}, {"content": "   "}]
    with api.client(api.alice) as http:
        problem = _problem(http.post("/v1/nodes:batch", json={"items": items}), 422, "PR422")
        assert problem["detail"].startswith("items[2]: content must not be empty")
        problem = _problem(http.post("/v1/nodes:batch", json={"items": [{"content": "x", "colour": 1}]}), 422, "PR422")
        assert "items" in problem["detail"] and "colour" in problem["detail"]
        too_many = {"items": [{"content": "x"}] * 1001}
        _problem(http.post("/v1/nodes:batch", json=too_many), 422, "PR422")
    with MemoryClient(api.dsn) as memory:
        assert memory.list_nodes(user_id="alice") == []


def test_a_taken_node_id_with_other_content_is_409(api: Api) -> None:
    node_id = str(uuid.uuid4())
    with api.client(api.alice) as http:
        http.post("/v1/nodes:batch", json={"items": [{"content": "one", "node_id": node_id}]})
        items = [{"content": "new"}, {"content": "two", "node_id": node_id}]
        problem = _problem(http.post("/v1/nodes:batch", json={"items": items}), 409, "PR409")
        assert problem["detail"].startswith("items[1]: a node with this node_id already exists")
