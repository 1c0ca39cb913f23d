"""The SDK against the server's OpenAPI document (docs/openapi.json of the
repository, or ``TETHER_OPENAPI_PATH``): the error classes, the routes the
clients call, and the fields of the models. No server needed.

Each check fails when the document and the SDK disagree, in either
direction: a route, code or field added to the server and not to the SDK
(or on purpose left out, which the tables below then say), or one the SDK
keeps after the server dropped it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, Set, get_args

from tether_client import (
    AsyncClient,
    AsyncEventStream,
    Client,
    DependencyFailure,
    EventStream,
    RetryMode,
    WorkflowState,
    _models,
)
from tether_client._errors import ERRORS_BY_CODE, error_from

PKG = Path(__file__).resolve().parent.parent
DOC: Dict[str, Any] = json.loads(
    Path(os.environ.get("TETHER_OPENAPI_PATH") or PKG / "../../docs/openapi.json").read_text()
)
SCHEMAS: Dict[str, Any] = DOC["components"]["schemas"]

# Documented routes the Python clients do not call yet. Adding a method for
# one means taking it out of here; a new route in the document means adding
# a method or putting it here.
NOT_CALLED: Set[str] = {
    "POST /v1/jobs/cancel",
    "POST /v1/jobs/replay",
    "DELETE /v1/queues/{}",
    "GET /v1/queues/{}/throughput",
    "GET /v1/workers",
}

# Routes the clients call before the committed document has them.
AHEAD: Set[str] = {"GET /v1/whoami"}

# The models and the schema each reads: (schema, fields of the schema the
# model leaves out, fields the model has that the schema does not).
MODELS = {
    "Backoff": ("Backoff", set(), set()),
    # `created`: the enqueue's answer (new or existing job), kept on the job.
    "Job": ("Job", set(), {"created"}),
    "ClaimedJob": ("ClaimedJob", set(), {"created"}),
    "JobEvent": ("JobEvent", set(), set()),
    # One message of `GET /v1/events` (`stream_events`).
    "FeedEvent": ("FeedEventData", set(), set()),
    "DependencyJob": ("DependencyJob", set(), set()),
    "StateCounts": ("StateCounts", set(), set()),
    "Queue": ("Queue", set(), set()),
    # A schedule's upcoming and recent runs: `schedule_runs` reads the runs.
    "Schedule": ("Schedule", {"next_runs", "recent_runs"}, set()),
    "ScheduleRun": ("ScheduleRun", set(), set()),
    "Tenant": ("Tenant", set(), set()),
    "ApiKey": ("ApiKey", set(), set()),
    "Workflow": ("Workflow", set(), set()),
    # `GET /v1/workflows/{id}`: the workflow's fields and its graph.
    "WorkflowDetail": ("WorkflowResponse", set(), set()),
    "WorkflowJob": ("WorkflowJob", set(), set()),
    "WorkflowCancel": ("WorkflowCancelResponse", set(), set()),
    "WorkflowRetry": ("WorkflowRetryResponse", set(), set()),
}


def _documented_routes() -> Set[str]:
    routes = set()
    for path, ops in DOC["paths"].items():
        for method in ops:
            if method in ("get", "post", "patch", "put", "delete"):
                routes.add(f"{method.upper()} {re.sub(r'{[^}]*}', '{}', path)}")
    return routes


def _called_routes(source: str) -> Set[str]:
    """The routes a routes module calls: `self._call("METHOD", f"/path..."`
    (its path parameters written `{seg(x)}`), and the streams a client
    opens: `http.stream("GET", "/v1/events", ...)`."""
    found = set()
    pattern = r'(?:_call|\.stream)\(\s*"([A-Z]+)",\s*f?"(/[^"]*)"'
    for method, path in re.findall(pattern, source):
        found.add(f"{method} {re.sub(r'{[^}]*}', '{}', path)}")
    for route in re.findall(r'_probe\(\s*"([a-z]+)"', source):
        found.add(f"GET /{route}")
    return found


def test_one_error_class_per_documented_error_code() -> None:
    assert set(ERRORS_BY_CODE) == set(SCHEMAS["ErrorCode"]["enum"])


def test_one_error_class_per_status_of_a_single_code() -> None:
    """The codes the document lists with their statuses (``ErrorCode``'s
    description): each reads as its class, and a status that only one code
    has reads as that class without a code (an answer not from tether)."""
    listed = re.findall(r"`([a-z_]+)` \((\d{3})\)", SCHEMAS["ErrorCode"]["description"])
    assert {code for code, _ in listed} == set(SCHEMAS["ErrorCode"]["enum"])
    codes_of: Dict[int, Set[str]] = {}
    for code, status in listed:
        codes_of.setdefault(int(status), set()).add(code)
        assert type(error_from(code, "m", int(status))) is ERRORS_BY_CODE[code]
    for status, codes in codes_of.items():
        if len(codes) == 1:
            assert error_from(None, "m", status).code == next(iter(codes)), status


def test_every_documented_route_is_called_or_listed_as_not_called() -> None:
    documented = _documented_routes()
    # Each client: its routes module, and the methods written in _client.py
    # (the event stream, which is no `_call`).
    for module, classes in (
        ("_routes_sync.py", (Client, EventStream)),
        ("_routes_async.py", (AsyncClient, AsyncEventStream)),
    ):
        source = (PKG / "src/tether_client" / module).read_text()
        called = _called_routes(source + "".join(inspect.getsource(c) for c in classes))
        assert called, f"no calls found in {module}: the pattern no longer matches the code"
        missing = documented - called - NOT_CALLED
        assert not missing, f"{module}: documented routes neither called nor in NOT_CALLED"
        extra = called - documented - AHEAD
        assert not extra, f"{module}: routes called that the document does not have"
        stale = NOT_CALLED & called
        assert not stale, f"{module}: routes in NOT_CALLED that are called now"
    unknown = NOT_CALLED - documented
    assert not unknown, "NOT_CALLED names routes the document does not have"


def test_the_sync_and_async_clients_have_the_same_methods() -> None:
    def public(cls: type) -> Set[str]:
        return {n for n in dir(cls) if not n.startswith("_")}

    # Closing is `close` in one and `aclose` in the other, as in httpx.
    assert public(Client) - {"close"} == public(AsyncClient) - {"aclose"}


def test_models_have_the_documented_fields() -> None:
    for model, (schema, left_out, ahead) in MODELS.items():
        cls = getattr(_models, model)
        fields = {f.name for f in dataclasses.fields(cls)} - {"raw"}
        props = set(SCHEMAS[schema].get("properties", {}))
        for parent in SCHEMAS[schema].get("allOf", []):
            ref = parent.get("$ref", "")
            if ref:
                props |= set(SCHEMAS[ref.rsplit("/", 1)[1]].get("properties", {}))
            props |= set(parent.get("properties", {}))
        assert props - fields == left_out, f"{model}: fields of {schema} the model lacks"
        assert fields - props == ahead, f"{model}: fields the document's {schema} does not have"


def test_the_dependency_failure_values_are_the_documented_ones() -> None:
    assert set(get_args(DependencyFailure)) == set(SCHEMAS["DependencyFailure"]["enum"])


def test_the_workflow_enums_are_the_documented_ones() -> None:
    assert set(get_args(WorkflowState)) == set(SCHEMAS["WorkflowState"]["enum"])
    assert set(get_args(RetryMode)) == set(SCHEMAS["RetryMode"]["enum"])


def test_a_batch_entry_has_the_documented_enqueue_fields() -> None:
    """Every field of an enqueue (and a batch entry) is an argument of
    ``batch_entry`` (``enqueue`` takes the same, minus ``depends_on_entries``),
    and the batch body the workflow builder sends has the documented fields."""
    import inspect

    from tether_client import WorkflowBuilder, batch_entry

    params = set(inspect.signature(batch_entry).parameters) - {"extra"}
    assert params == set(SCHEMAS["EnqueueRequest"]["properties"])
    enqueue = set(inspect.signature(Client.enqueue).parameters) - {"self", "extra"}
    assert enqueue == params - {"depends_on_entries"}
    wf = WorkflowBuilder("w", idempotency_key="k")
    wf.add("q", "k")
    body = wf.to_request()
    assert set(body) == set(SCHEMAS["BatchEnqueueRequest"]["properties"])
    assert set(body["workflow"]) == set(SCHEMAS["NewWorkflowBody"]["properties"])
