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
    ScheduleOutcome,
    WorkflowState,
    _models,
)
from tether_client._errors import ERRORS_BY_CODE, error_from

PKG = Path(__file__).resolve().parent.parent
DOC: Dict[str, Any] = json.loads(
    Path(os.environ.get("TETHER_OPENAPI_PATH") or PKG / "../../docs/openapi.json").read_text()
)
SCHEMAS: Dict[str, Any] = DOC["components"]["schemas"]

# What the SDK calls a wire field: every duration is seconds (or a
# timedelta) under the name without `_ms`.
SDK_NAME = {
    "delay_ms": "delay",
    "timeout_ms": "timeout",
    "lease_ttl_ms": "lease_ttl",
    "default_lease_ttl_ms": "default_lease_ttl",
    "wait_ms": "wait",
    "retry_after_ms": "retry_after",
    "base_ms": "base",
    "cap_ms": "cap",
    "period_ms": "period",
}


# What the server's document gained while this SDK change was written, and
# the stable server the tests run against does not have yet: no method (or
# field) until one can be tested. Each entry must go once the SDK has it.
NOT_YET: Set[str] = set()
NOT_YET_FIELDS: Dict[str, Set[str]] = {}


def sdk_names(wire: Set[str]) -> Set[str]:
    return {SDK_NAME.get(name, name) for name in wire}


# The models and the schema each reads: (schema, fields of the schema the
# model leaves out, fields the model has that the schema does not).
MODELS = {
    # `created`: the enqueue's answer (new or existing job), kept on the job.
    "Job": ("Job", NOT_YET_FIELDS.get("Job", set()), {"created"}),
    "ClaimedJob": ("ClaimedJob", NOT_YET_FIELDS.get("Job", set()), {"created"}),
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
    "Throughput": ("ThroughputResponse", set(), set()),
    "ThroughputMinute": ("ThroughputMinute", set(), set()),
    "Percentiles": ("Percentiles", set(), set()),
    "WorkerInfo": ("WorkerInfo", NOT_YET_FIELDS.get("WorkerInfo", set()), set()),
    # `PUT /v1/schedules/{name}` (`ensure_schedule`).
    "EnsuredSchedule": ("PutScheduleResponse", set(), set()),
}

# The classes a user makes, whose durations are seconds: (schema, fields
# the class leaves out).
SECONDS_MODELS = {
    "Backoff": ("Backoff", set()),
    "RateLimit": ("RateLimit", set()),
    "HeartbeatItem": ("HeartbeatItem", set()),
    "FailItem": ("FailItem", set()),
    "CompleteItem": ("CompleteItem", set()),
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


def test_every_documented_route_has_a_method_of_each_client() -> None:
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
        missing = documented - called - NOT_YET
        assert not missing, f"{module}: documented routes without a method: {sorted(missing)}"
        assert not NOT_YET & called, f"{module}: routes in NOT_YET that have a method now"
        extra = called - documented
        assert not extra, f"{module}: routes called that the document does not have: {extra}"
    assert NOT_YET <= documented, "NOT_YET names routes the document does not have"


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


def test_the_schedule_outcomes_are_the_documented_ones() -> None:
    assert set(get_args(ScheduleOutcome)) == set(SCHEMAS["PutOutcome"]["enum"])


def _keywords(fn: Any, *leave_out: str) -> Set[str]:
    return set(inspect.signature(fn).parameters) - {"self", *leave_out}


def test_a_batch_entry_has_the_documented_enqueue_fields() -> None:
    """Every field of an enqueue (and a batch entry) is a keyword of
    ``batch_entry`` (durations in seconds, without ``_ms``); ``enqueue`` and
    ``enqueue_and_wait`` take the same, minus ``depends_on_entries``, and
    the batch body the workflow builder sends has the documented fields."""
    from tether_client import WorkflowBuilder, batch_entry

    params = _keywords(batch_entry)
    wire = set(SCHEMAS["EnqueueRequest"]["properties"])
    assert NOT_YET_FIELDS.get("EnqueueRequest", set()) <= wire
    assert params == sdk_names(wire - NOT_YET_FIELDS.get("EnqueueRequest", set()))
    for client in (Client, AsyncClient):
        assert _keywords(client.enqueue) == params - {"depends_on_entries"}
        # Its `timeout` is how long it waits; the job's is `job_timeout`.
        waited = _keywords(client.enqueue_and_wait) - {"job_timeout"}
        assert waited == params - {"depends_on_entries"}
    add = _keywords(WorkflowBuilder.add) - {"after"}
    assert add == params - {"depends_on", "depends_on_entries", "workflow_id"}
    wf = WorkflowBuilder("w", idempotency_key="k")
    wf.add("q", "k")
    body = wf.to_request()
    assert set(body) == set(SCHEMAS["BatchEnqueueRequest"]["properties"])
    assert set(body["workflow"]) == set(SCHEMAS["NewWorkflowBody"]["properties"])


def test_every_body_field_and_query_parameter_is_a_keyword() -> None:
    """No catch-all ``**kwargs``: each field of these bodies and queries is
    an explicit keyword (so mypy catches a typo), named as the SDK names
    durations."""
    query = {
        p: {x["name"] for x in DOC["paths"][p]["get"].get("parameters", [])}
        for p in ("/v1/jobs", "/v1/queues/{queue}/throughput")
    }
    for client in (Client, AsyncClient):
        body = set(SCHEMAS["QueueConfigBody"]["properties"])
        assert _keywords(client.configure, "queue") == sdk_names(body)
        body = set(SCHEMAS["PatchScheduleBody"]["properties"])
        assert _keywords(client.patch_schedule, "schedule_id") == body
        body = set(SCHEMAS["PutScheduleBody"]["properties"])
        assert _keywords(client.ensure_schedule, "name") == body
        body = set(SCHEMAS["AnnounceWorkerBody"]["properties"])
        assert _keywords(client.announce_worker, "worker_id") == body
        assert _keywords(client.list) == query["/v1/jobs"]
        assert _keywords(client.iter_jobs) == query["/v1/jobs"]
        assert _keywords(client.throughput) == query["/v1/queues/{queue}/throughput"]
        body = set(SCHEMAS["ClaimBody"]["properties"]) - {"complete", "fail"}
        claim = _keywords(client.claim, "queue", "completions", "failures")
        assert claim == sdk_names(body)
        body = set(SCHEMAS["ReplayIdsBody"]["properties"]) - {"ids"}
        assert _keywords(client.replay_jobs, "jobs") == body


def test_no_keyword_of_the_sdk_is_in_milliseconds() -> None:
    """Every duration a user passes is seconds (or a timedelta): no public
    function or class of the package takes a ``*_ms`` keyword."""
    import tether_client

    found = []
    for name in tether_client.__all__:
        obj = getattr(tether_client, name)
        if not getattr(obj, "__module__", "").startswith("tether_client"):
            continue  # a type alias
        if isinstance(obj, type) and issubclass(obj, BaseException):
            continue
        fns = [obj] if inspect.isfunction(obj) else []
        if isinstance(obj, type):
            # A model read from an answer keeps the wire's names (`timeout_ms`).
            made_by_users = not hasattr(obj, "from_dict")
            fns = [obj] * made_by_users + [
                f for n, f in vars(obj).items() if callable(f) and not n.startswith("_")
            ]
        for fn in fns:
            try:
                params = inspect.signature(fn).parameters
            except (TypeError, ValueError):
                continue
            found += [f"{name}.{p}" for p in params if p.endswith("_ms")]
            kinds = {p.kind for p in params.values()}
            assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name}: takes **kwargs"
    for cls in (Client, AsyncClient):
        for n in dir(cls):
            fn = getattr(cls, n)
            if not n.startswith("_") and callable(fn):
                params = inspect.signature(fn).parameters
                found += [f"{cls.__name__}.{n}({p})" for p in params if p.endswith("_ms")]
                kinds = {p.kind for p in params.values()}
                assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{cls.__name__}.{n}"
    assert not found


def test_the_classes_a_user_makes_have_the_documented_fields_in_seconds() -> None:
    for model, (schema, left_out) in SECONDS_MODELS.items():
        cls = getattr(_models, model)
        fields = {f.name for f in dataclasses.fields(cls)} - {"raw"}
        props = set(SCHEMAS[schema]["properties"]) - left_out
        assert fields == sdk_names(props), model
