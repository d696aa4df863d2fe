"""The reads behind the review console (migration 0010): one memory's journal, its
evidence and outcomes, and finding memories in any lifecycle state. node_journal and
node_evidence run on both engines; node_outcomes and find_nodes are PostgreSQL's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from prme_pg import InvalidInput, MemoryClient, NotFoundError, migrations, testing
from prme_pg.journal import checksum, verify_records

from .conformance_backends import Engine, engine_fixture, memory_fixture  # noqa: F401
from .live_server import serve
from .test_http import Api, _problem

ALICE = "alice"
BOB = "bob"


# -- both engines ----------------------------------------------------------------------


def test_node_journal_is_one_chain_with_its_head(engine: Engine, memory: MemoryClient) -> None:
    node = memory.add_node("prefers tea", user_id=ALICE)
    other = memory.add_node("prefers coffee", user_id=ALICE)
    for _ in range(3):
        memory.reinforce(node.id, user_id=ALICE)
    memory.reinforce(other.id, user_id=ALICE)

    records, head = memory.node_journal(node.id, user_id=ALICE)
    assert [r.node_version for r in records] == [1, 2, 3, 4]
    assert {r.node_id for r in records} == {node.id}
    assert [r.op for r in records] == ["create", "reinforce", "reinforce", "reinforce"]
    assert (head.node_id, head.version, head.last_checksum) == (node.id, 4, records[-1].checksum)
    assert verify_records(records, [head]) == []
    # Exactly what the owner-wide export holds for this node.
    everything, _ = memory.journal_records(user_id=ALICE)
    assert records == [r for r in everything if r.node_id == node.id]

    first_two, head = memory.node_journal(node.id, user_id=ALICE, max_count=2)
    assert [r.node_version for r in first_two] == [1, 2] and head.version == 4
    assert verify_records(first_two) == []

    engine.set_record(node.id, 3, records[2].record.replace('"op":"reinforce"', '"op":"archive"'))
    tampered, head = memory.node_journal(node.id, user_id=ALICE)
    problems = {(i.node_version, i.problem) for i in verify_records(tampered, [head])}
    assert (3, "checksum_mismatch") in problems and (3, "column_mismatch") in problems


def test_node_journal_refuses_what_is_not_the_owners(memory: MemoryClient) -> None:
    node = memory.add_node("prefers tea", user_id=ALICE)
    with pytest.raises(NotFoundError):
        memory.node_journal(node.id, user_id=BOB)
    with pytest.raises(NotFoundError):
        memory.node_journal(uuid.uuid4(), user_id=ALICE)
    for bad in (0, 10001):
        with pytest.raises(InvalidInput):
            memory.node_journal(node.id, user_id=ALICE, max_count=bad)


def test_node_evidence_lists_each_cited_event_once(memory: MemoryClient) -> None:
    node = memory.add_node("prefers tea", user_id=ALICE)
    said = memory.add_event("I drink tea every morning", user_id=ALICE)
    again = memory.add_event("tea, please", user_id=ALICE)
    memory.add_event("unrelated", user_id=ALICE)
    memory.reinforce(node.id, said.id, user_id=ALICE)
    memory.reinforce(node.id, said.id, user_id=ALICE)
    memory.reinforce(node.id, again.id, user_id=ALICE)

    evidence = memory.node_evidence(node.id, user_id=ALICE)
    assert [e.id for e in evidence] == [said.id, again.id]
    assert evidence[0].content == "I drink tea every morning"
    assert [e.id for e in memory.node_evidence(node.id, user_id=ALICE, max_count=1)] == [said.id]
    assert memory.node_evidence(memory.add_node("uncited", user_id=ALICE).id, user_id=ALICE) == []
    with pytest.raises(NotFoundError):
        memory.node_evidence(node.id, user_id=BOB)
    with pytest.raises(InvalidInput):
        memory.node_evidence(node.id, user_id=ALICE, max_count=0)


# -- PostgreSQL only ---------------------------------------------------------------------


def test_node_outcomes_newest_first_and_the_pack_refuses(db_dsn: str, tmp_path: Any) -> None:
    with MemoryClient(db_dsn) as memory:
        node = memory.add_node("prefers tea", user_id=ALICE)
        kinds = ["implicit_success", "explicit_correction", "neutral_exposure"]
        recorded = [memory.record_outcome(node.id, kind, user_id=ALICE, notes=kind) for kind in kinds]
        memory.reinforce(node.id, user_id=ALICE)
        outcomes = memory.node_outcomes(node.id, user_id=ALICE)
        assert [o.outcome for o in outcomes][1:] == kinds[::-1]
        assert outcomes[0].outcome == "explicit_reinforcement" and outcomes[0].recorded_by == "reinforce"
        assert outcomes[-1] == recorded[0]
        assert len(memory.node_outcomes(node.id, user_id=ALICE, max_count=2)) == 2
        with pytest.raises(NotFoundError):
            memory.node_outcomes(node.id, user_id=BOB)
        with pytest.raises(InvalidInput):
            memory.node_outcomes(node.id, user_id=ALICE, max_count=10001)
    with MemoryClient(str(tmp_path / "pack")) as pack:
        node = pack.add_node("prefers tea", user_id=ALICE)
        assert pack.node_outcomes(node.id, user_id=ALICE) == []
        assert [n.id for n in pack.find_nodes(user_id=ALICE)] == [node.id]


def test_find_nodes_matches_like_recall_in_every_state_and_filters(db_dsn: str) -> None:
    # By words alone (no embedder): tests/test_find_nodes.py adds meaning.
    with MemoryClient(db_dsn, embedder=False) as memory:
        tea = memory.add_node("Drinks green tea in the morning", user_id=ALICE, stability="stable")
        coffee = memory.add_node("Drinks coffee at work", user_id=ALICE, scope="work")
        archived = memory.add_node("Drank black tea years ago", user_id=ALICE)
        memory.archive_node(archived.id, user_id=ALICE)
        memory.add_node("Drinks tea too", user_id=BOB)

        def ids(*args: Any, **kwargs: Any) -> list[uuid.UUID]:
            return [n.id for n in memory.find_nodes(*args, user_id=ALICE, **kwargs)]

        # Every state, newest change first without words; recall leaves archived out.
        assert ids() == [archived.id, coffee.id, tea.id]
        assert archived.id not in [h.id for h in memory.recall("tea", user_id=ALICE)]
        # Words as recall matches them (plural endings removed, any word), most words first.
        assert ids("green tea") == [tea.id, archived.id]
        assert ids("drink") == [coffee.id, tea.id]
        assert ids("the of") == []
        assert ids("tea", lifecycle_states=["active"]) == [tea.id]
        assert ids(lifecycle_states=["archived", "contested"]) == [archived.id]
        assert ids(stabilities="stable") == [tea.id]
        assert ids(scopes=["work"]) == [coffee.id]
        assert ids(stabilities=["low"], scopes=["personal"]) == [archived.id]
        assert ids(max_count=1) == [archived.id]
        assert [n.content for n in memory.find_nodes("tea", user_id=BOB)] == ["Drinks tea too"]
        for bad in (
            {"stabilities": ["wobbly"]},
            {"stabilities": []},
            {"lifecycle_states": ["gone"]},
            {"scopes": ["Not A Scope"]},
            {"max_count": 0},
            {"max_count": 1001},
            {"query": "x" * 65537},
        ):
            with pytest.raises(InvalidInput):
                memory.find_nodes(user_id=ALICE, **bad)


def test_upgrading_from_0009_keeps_everything_and_reads_old_memories(pg_server: testing.Server) -> None:
    """0010 only adds functions: a database at 0009 keeps its rows, and the new reads
    see the memories written before the upgrade."""
    name = testing.create_database(pg_server, prefix="prme_upgrade")
    try:
        dsn = pg_server.dsn_for(name)
        every = migrations.load_migrations()
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrations.migrate(conn, [m for m in every if m.version < 10])
        with MemoryClient(dsn, embedder=False) as memory:  # 0009 has no vectors
            event = memory.add_event("I drink tea", user_id=ALICE)
            node = memory.add_node("Drinks tea", user_id=ALICE)
            memory.reinforce(node.id, event.id, user_id=ALICE)
            memory.record_outcome(node.id, "implicit_success", user_id=ALICE)
        tables = ("nodes", "events", "journal", "outcomes", "node_maintenance")
        dump = " UNION ALL ".join(f"SELECT '{t}', to_jsonb(t)::text FROM prme.{t} AS t" for t in tables)
        with psycopg.connect(dsn, autocommit=True) as conn:
            before = sorted(conn.execute(dump.encode()).fetchall())
            assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= 10])] == [10]
            assert sorted(conn.execute(dump.encode()).fetchall()) == before
        with MemoryClient(dsn, embedder=False) as memory:  # 0010's find_nodes takes no vector
            records, head = memory.node_journal(node.id, user_id=ALICE)
            assert verify_records(records, [head]) == [] and len(records) == 2
            assert [e.id for e in memory.node_evidence(node.id, user_id=ALICE)] == [event.id]
            outcomes = memory.node_outcomes(node.id, user_id=ALICE)
            assert [o.outcome for o in outcomes] == ["implicit_success", "explicit_reinforcement"]
            assert [n.id for n in memory.find_nodes("tea", user_id=ALICE)] == [node.id]
    finally:
        testing.drop_database(pg_server, name)


# -- over HTTP ---------------------------------------------------------------------------


@pytest.fixture
def api(db_dsn: str) -> Iterator[Api]:
    with MemoryClient(db_dsn) as memory:
        alice = memory.create_api_token(ALICE)
        bob = memory.create_api_token(BOB)
    with serve(db_dsn, max_size=4) as base:
        yield Api(base, db_dsn, alice, bob)


def test_http_journal_is_verified_record_by_record(api: Api) -> None:
    with MemoryClient(api.dsn) as memory:
        node = memory.add_node("prefers tea", user_id=ALICE, confidence_base="0.6")
        for _ in range(3):
            memory.reinforce(node.id, user_id=ALICE)
    with api.client(api.alice) as http:
        journal = http.get(f"/v1/nodes/{node.id}/journal").json()
        assert journal["verified"] and journal["complete"] and journal["problems"] == []
        assert (journal["node_id"], journal["version"]) == (str(node.id), 4)
        records = journal["records"]
        assert [r["node_version"] for r in records] == [1, 2, 3, 4]
        assert [r["confidence_base"] for r in records] == [0.6, 0.65, 0.7, 0.75]
        assert [r["reinforcement_boost"] for r in records] == [0, 0.15, 0.3, 0.45]
        assert records[1]["prev_checksum"] == records[0]["checksum"] == checksum(records[0]["record"])
        assert records[-1]["checksum"] == journal["last_checksum"]
        assert all(r["verified"] and r["recorded_at"].endswith("Z") for r in records)

        page = http.get(f"/v1/nodes/{node.id}/journal", params={"limit": 2}).json()
        assert not page["complete"] and page["verified"] and len(page["records"]) == 2

        with psycopg.connect(api.dsn, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")
            where = " WHERE node_id = %s AND node_version = %s"
            conn.execute("UPDATE prme.journal SET record = 'not json'" + where, (node.id, 2))
            conn.execute("DELETE FROM prme.journal" + where, (node.id, 4))
        broken = http.get(f"/v1/nodes/{node.id}/journal").json()
        assert not broken["verified"] and broken["complete"]
        by_version = {r["node_version"]: r for r in broken["records"]}
        assert sorted(by_version) == [1, 2, 3]
        assert {p["problem"] for p in by_version[2]["problems"]} == {"checksum_mismatch", "malformed_record"}
        assert by_version[2]["confidence_base"] is None and by_version[2]["record"] == "not json"
        assert by_version[1]["verified"] and not by_version[3]["verified"]  # v3's before has no after to match
        heads = [p for p in broken["problems"] if p["problem"] == "head_mismatch"]
        assert heads == [{"node_version": 4, "problem": "head_mismatch", "detail": heads[0]["detail"]}]


def test_http_review_reads_are_the_owners_only_and_bounded(api: Api) -> None:
    with MemoryClient(api.dsn) as memory:
        said = memory.add_event("I drink tea", user_id=ALICE)
        node = memory.add_node("Drinks tea", user_id=ALICE, stability="stable")
        memory.reinforce(node.id, said.id, user_id=ALICE)
        coffee = memory.add_node("Drinks coffee", user_id=ALICE)
        memory.add_node("Drinks tea too", user_id=BOB)
    with api.client(api.alice) as http:
        found = http.get("/v1/nodes", params={"q": "tea"}).json()["nodes"]
        # The word's match first, then the owner's other memory by meaning; never bob's.
        assert [n["content"] for n in found] == ["Drinks tea", "Drinks coffee"]
        stable = http.get("/v1/nodes", params={"stability": "stable"}).json()["nodes"]
        assert [n["id"] for n in stable] == [str(node.id)]
        either = http.get("/v1/nodes", params=[("stability", "stable"), ("stability", "low"), ("limit", "1")])
        assert [n["id"] for n in either.json()["nodes"]] == [str(coffee.id)]  # the newest change
        assert len(http.get("/v1/nodes").json()["nodes"]) == 2
        assert http.get("/v1/nodes", params={"lifecycle_state": "archived"}).json() == {"nodes": []}
        assert [e["id"] for e in http.get(f"/v1/nodes/{node.id}/evidence").json()["events"]] == [str(said.id)]
        outcomes = http.get(f"/v1/nodes/{node.id}/outcomes").json()["outcomes"]
        assert [o["outcome"] for o in outcomes] == ["explicit_reinforcement"]
        for params in ({"stability": "wobbly"}, {"lifecycle_state": "gone"}, {"limit": "0"}, {"limit": "1001"}):
            _problem(http.get("/v1/nodes", params=params), 422, "PR422")
        _problem(http.get(f"/v1/nodes/{node.id}/journal", params={"limit": "5001"}), 422, "PR422")
        _problem(http.get("/v1/nodes/not-a-uuid/journal"), 422, "PR422")
    with api.client(api.bob) as http:
        for path in ("journal", "evidence", "outcomes"):
            _problem(http.get(f"/v1/nodes/{node.id}/{path}"), 404, "PR404")
        assert [n["content"] for n in http.get("/v1/nodes", params={"q": "tea"}).json()["nodes"]] == ["Drinks tea too"]
    with api.client(None) as http:
        for path in ("/v1/nodes", f"/v1/nodes/{node.id}/journal"):
            assert http.get(path).status_code == 401
