"""One method per API route, over a blocking ``_call``.

``_routes_async.py`` is generated from this file by ``scripts/gen_async.py``
(every method becomes ``async`` and every ``_call`` awaited): edit this one
and regenerate.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, TypeVar, Union

from ._duration import Duration, opt_ms, to_ms
from ._models import (
    JSON,
    ApiKey,
    Backoff,
    BulkReplay,
    ClaimResult,
    CompleteItem,
    CreatedKey,
    CreatedTenant,
    DependencyFailure,
    DependencyJob,
    EnqueueResult,
    EnsuredSchedule,
    EventPage,
    FailItem,
    HeartbeatAck,
    HeartbeatItem,
    ItemResult,
    Job,
    JobPage,
    JobResult,
    Queue,
    RateLimit,
    RetryMode,
    Schedule,
    ScheduleRun,
    Tenant,
    Throughput,
    WhoAmI,
    WorkerInfo,
    WorkflowCancel,
    WorkflowDetail,
    WorkflowPage,
    WorkflowRetry,
    WorkflowState,
)
from ._task import Task, TaskJob
from ._tracing import traced, traced_all
from ._util import (
    UNSET,
    BatchEntry,
    Time,
    _Unset,
    claim_result,
    enqueue_body,
    enqueued,
    item_results,
    job_ids,
    job_results,
    pick,
    seg,
    time_str,
)
from ._workflow import EnqueuedWorkflow, WorkflowBuilder

T = TypeVar("T")
R = TypeVar("R")


class SyncRoutes:
    """The API routes of :class:`tether_client.Client`."""

    def _call(
        self,
        method: str,
        path: str,
        parse: Callable[[Any], T],
        *,
        json: Any = UNSET,
        params: Optional[Dict[str, Any]] = None,
        retry: bool = False,
        timeout: Optional[float] = None,
    ) -> T:
        raise NotImplementedError

    # ---- producing -------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        kind: str,
        payload: JSON = None,
        *,
        priority: Optional[int] = None,
        run_at: Optional[Time] = None,
        delay: Optional[Duration] = None,
        max_attempts: Optional[int] = None,
        timeout: Optional[Duration] = None,
        idempotency_key: Optional[str] = None,
        unique_key: Optional[str] = None,
        tags: Optional[Iterable[str]] = None,
        expires_at: Optional[Time] = None,
        backoff: Optional[Backoff] = None,
        concurrency_key: Optional[str] = None,
        depends_on: Optional[Iterable[Union[str, Job]]] = None,
        dependency_failure: Optional[DependencyFailure] = None,
        workflow_id: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> Job:
        """Enqueues a job (``POST /v1/jobs``). The answer's ``created`` is False
        when an existing job with the same idempotency or active unique key was
        answered instead.

        Durations are seconds (``int``/``float``) or ``timedelta``, sent as
        whole milliseconds (a negative one raises ``ValueError``): ``delay``
        runs it that much later (or ``run_at``: an instant; not both),
        ``timeout`` bounds one run (the worker enforces it), ``backoff`` is
        ``Backoff(base, cap)``. ``priority`` is -100..100, higher first;
        ``max_attempts`` and ``backoff`` default to the queue's.
        ``concurrency_key`` groups the job for its queue's
        ``key_max_running`` and ``fair`` claims; ``expires_at`` fails it
        ``expired`` if it is still queued then.

        ``depends_on`` (job ids, or :class:`Job` objects) makes it wait for
        those jobs: it is created ``waiting`` and queued once they all
        succeeded; ``dependency_failure`` says what it does when one fails or
        is cancelled: ``"cancel"`` (the default: it is cancelled too) or
        ``"run"`` (it runs once they all ended). An unknown id raises
        ``InvalidArgument`` and enqueues nothing.

        ``workflow_id`` adds the job to that running workflow (a handler
        fanning out at run time passes ``ctx.workflow_id``); its
        ``depends_on`` may name any job. A finished workflow raises
        ``InvalidState``, an unknown one ``InvalidArgument``.

        ``headers`` (string to string; at most 32, names of ``A-Z a-z 0-9
        _ . -``) travel with the job unchanged: its handler reads them as
        ``ctx.headers``. When OpenTelemetry is installed and a span is
        current, its W3C trace context (``traceparent``, ``tracestate``) is
        added to them (a header given here wins), so the handler's span
        continues this trace. Every enqueue does the same: typed tasks,
        batches and workflows.

        Retried on transport errors and ``unavailable`` only when
        ``idempotency_key`` is given."""
        body = enqueue_body(
            queue,
            kind,
            payload,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            timeout=timeout,
            idempotency_key=idempotency_key,
            unique_key=unique_key,
            tags=tags,
            expires_at=expires_at,
            backoff=backoff,
            concurrency_key=concurrency_key,
            depends_on=depends_on,
            dependency_failure=dependency_failure,
            workflow_id=workflow_id,
            headers=headers,
        )
        retry = idempotency_key is not None
        return self._call("POST", "/v1/jobs", enqueued, json=traced(body), retry=retry)

    def _enqueue_task(self, task: Task[Any, R], body: Dict[str, Any]) -> TaskJob[R]:
        """The enqueue of a typed task's job (``task.enqueue(client, ...)``
        makes the body): its answer as a :class:`TaskJob`."""
        return self._call(
            "POST",
            "/v1/jobs",
            lambda d: TaskJob.of(enqueued(d), task),
            json=traced(body),
            retry=body.get("idempotency_key") is not None,
        )

    def enqueue_batch(self, entries: Iterable[BatchEntry]) -> List[EnqueueResult]:
        """Enqueues 1 to 1000 jobs at once (``POST /v1/jobs/batch``), all or
        nothing; each entry is made by :func:`tether_client.batch_entry`
        (the arguments of :meth:`enqueue`). An entry's ``depends_on_entries``
        names earlier entries of the same batch (by index) it waits for, so
        a whole graph is enqueued at once. One bad entry refuses the whole
        batch. Retried only when every entry has an idempotency key."""
        bodies = []
        for e in entries:
            if not isinstance(e, BatchEntry):
                raise TypeError(f"enqueue_batch takes batch_entry(...) items, not {e!r}")
            bodies.append(e.body)
        retry = bool(bodies) and all(b.get("idempotency_key") for b in bodies)
        return self._call(
            "POST",
            "/v1/jobs/batch",
            lambda d: [EnqueueResult.from_dict(r) for r in d["results"]],
            json={"jobs": traced_all(bodies)},
            retry=retry,
        )

    def enqueue_workflow(self, workflow: WorkflowBuilder) -> EnqueuedWorkflow:
        """Enqueues a :class:`tether_client.WorkflowBuilder`'s jobs as one new
        workflow (``POST /v1/jobs/batch`` with ``workflow``), all or nothing;
        answers an :class:`tether_client.EnqueuedWorkflow`: the
        ``workflow_id``, and ``job(entry)`` for the job each entry became.
        With the builder's ``idempotency_key`` already used, answers that
        workflow (``created`` False) and writes nothing. Retried when the
        builder has an idempotency key (or every entry has one)."""
        body = workflow.to_request()
        if not body["jobs"]:
            raise ValueError(f"workflow {workflow.name!r} has no jobs: add() at least one")
        body["jobs"] = traced_all(body["jobs"])
        retry = workflow.idempotency_key is not None or all(
            e.get("idempotency_key") for e in body["jobs"]
        )
        return self._call("POST", "/v1/jobs/batch", workflow._answer, json=body, retry=retry)

    # ---- reading and managing jobs ----------------------------------------

    def get(self, job_id: str, *, wait: Optional[Duration] = None) -> Job:
        """A job by id (``GET /v1/jobs/{id}``). With ``wait`` (seconds or a
        ``timedelta``, up to 30 s, the server's longest wait) the server
        answers once the job has finished (``succeeded``, ``failed`` or
        ``cancelled``) or when the wait runs out, whichever is first, with
        the job as it is then; :meth:`wait` waits longer than that."""
        wait_ms = opt_ms(wait, "wait")
        return self._call(
            "GET",
            f"/v1/jobs/{seg(job_id)}",
            lambda d: Job.from_dict(d["job"]),
            params=pick(wait_ms=wait_ms),
            retry=True,
            timeout=None if not wait_ms else wait_ms / 1000 + 30,
        )

    def list(
        self,
        *,
        queue: Optional[str] = None,
        state: Optional[str] = None,
        kind: Optional[str] = None,
        tag: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        depends_on: Optional[str] = None,
        workflow_id: Optional[str] = None,
        id_prefix: Optional[str] = None,
        created_after: Optional[Time] = None,
        created_before: Optional[Time] = None,
    ) -> JobPage:
        """One page of jobs, newest first (``GET /v1/jobs``); pass the page's
        ``next_cursor`` as ``cursor`` for the next one, or use ``iter_jobs``.
        ``state="failed"`` is the dead-letter queue; ``depends_on=id`` lists
        the jobs that wait (or waited) directly for job ``id``;
        ``workflow_id`` the jobs of a workflow; ``id_prefix`` the jobs whose
        id starts with those hex digits; ``created_after`` (inclusive) and
        ``created_before`` (exclusive) bound their creation. Every filter
        narrows."""
        params = pick(
            queue=queue,
            state=state,
            kind=kind,
            tag=tag,
            limit=limit,
            cursor=cursor,
            depends_on=depends_on,
            workflow_id=workflow_id,
            id_prefix=id_prefix,
            created_after=time_str(created_after),
            created_before=time_str(created_before),
        )
        return self._call("GET", "/v1/jobs", JobPage.from_dict, params=params, retry=True)

    def dependencies(self, job_id: str) -> List[DependencyJob]:
        """A job's dependencies, in the order it named them, with their states
        and results (``GET /v1/jobs/{id}/dependencies``): what a handler reads
        to use its parents' results (a worker's handler has
        ``ctx.dependencies()``). One removed by retention is left out."""
        return self._call(
            "GET",
            f"/v1/jobs/{seg(job_id)}/dependencies",
            lambda d: [DependencyJob.from_dict(j) for j in d["jobs"]],
            retry=True,
        )

    def events(
        self, job_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> EventPage:
        """One page of a job's history, oldest first (``GET /v1/jobs/{id}/events``);
        use ``iter_events`` for all of it."""
        return self._call(
            "GET",
            f"/v1/jobs/{seg(job_id)}/events",
            EventPage.from_dict,
            params=pick(limit=limit, cursor=cursor),
            retry=True,
        )

    def cancel(self, job_id: str) -> Job:
        """Cancels a job: a queued one at once, a running one is asked to stop
        (``cancel_requested``); a finished one raises ``InvalidState``."""
        return self._call(
            "POST", f"/v1/jobs/{seg(job_id)}/cancel", lambda d: Job.from_dict(d["job"])
        )

    def replay(self, job_id: str, *, expires_at: Optional[Time] = None) -> Job:
        """Queues a finished job (failed, cancelled or succeeded) again with attempt 0."""
        body = pick(expires_at=time_str(expires_at))
        return self._call(
            "POST",
            f"/v1/jobs/{seg(job_id)}/replay",
            lambda d: Job.from_dict(d["job"]),
            json=body,
        )

    def cancel_jobs(self, jobs: Iterable[Union[str, Job]]) -> List[JobResult]:
        """Cancels 1 to 500 jobs (ids or :class:`Job` objects), each as
        :meth:`cancel` would (``POST /v1/jobs/cancel``); answers one
        :class:`JobResult` per job, in order: ``ok`` and the job, or the
        ``error`` :meth:`cancel` would have raised (one that cannot be
        cancelled does not stop the others)."""
        return self._call(
            "POST", "/v1/jobs/cancel", job_results, json={"ids": job_ids(jobs)}
        )

    def replay_jobs(
        self, jobs: Iterable[Union[str, Job]], *, expires_at: Optional[Time] = None
    ) -> List[JobResult]:
        """Replays 1 to 500 finished jobs (ids or :class:`Job` objects), each
        as :meth:`replay` would (``POST /v1/jobs/replay``), every one with
        ``expires_at`` (or none); answers one :class:`JobResult` per job, in
        order."""
        body = pick(ids=job_ids(jobs), expires_at=time_str(expires_at))
        return self._call("POST", "/v1/jobs/replay", job_results, json=body)

    def replay_queue(
        self,
        queue: str,
        *,
        state: Optional[str] = None,
        kind: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        expires_at: Optional[Time] = None,
    ) -> BulkReplay:
        """Bulk replay of a queue's dead letters (``failed`` by default, or
        ``cancelled``): one round of at most ``limit`` jobs; follow
        ``next_cursor`` for the next round."""
        body = pick(
            state=state, kind=kind, limit=limit, cursor=cursor, expires_at=time_str(expires_at)
        )
        return self._call(
            "POST", f"/v1/queues/{seg(queue)}/replay", BulkReplay.from_dict, json=body
        )

    # ---- workflows -----------------------------------------------------------

    def list_workflows(
        self,
        *,
        state: Optional[WorkflowState] = None,
        name: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> WorkflowPage:
        """One page of workflows, newest first (``GET /v1/workflows``); pass the
        page's ``next_cursor`` as ``cursor`` for the next one, or use
        ``iter_workflows``. With ``state`` a page may hold fewer than
        ``limit`` (even none) and still have a ``next_cursor``."""
        params = pick(state=state, name=name, limit=limit, cursor=cursor)
        return self._call(
            "GET", "/v1/workflows", WorkflowPage.from_dict, params=params, retry=True
        )

    def get_workflow(
        self, workflow_id: str, *, wait: Optional[Duration] = None
    ) -> WorkflowDetail:
        """A workflow and its whole graph (``GET /v1/workflows/{id}``): its
        ``jobs`` oldest first, each with ``depends_on``, jobs added at run
        time included. With ``wait`` (seconds or a ``timedelta``, up to 30 s)
        the server answers once the workflow has finished (any state but
        ``running``) or when the wait runs out, whichever is first;
        ``wait_workflow`` waits longer."""
        wait_ms = opt_ms(wait, "wait")
        return self._call(
            "GET",
            f"/v1/workflows/{seg(workflow_id)}",
            WorkflowDetail.from_dict,
            params=pick(wait_ms=wait_ms),
            retry=True,
            timeout=None if not wait_ms else wait_ms / 1000 + 30,
        )

    def cancel_workflow(self, workflow_id: str) -> WorkflowCancel:
        """Cancels every unfinished job of a workflow: waiting and queued ones
        at once, running ones cooperatively (``cancel_requested``). A finished
        workflow changes nothing. Retried: a resend cancels nothing more."""
        return self._call(
            "POST",
            f"/v1/workflows/{seg(workflow_id)}/cancel",
            WorkflowCancel.from_dict,
            retry=True,
        )

    def retry_workflow(self, workflow_id: str, mode: RetryMode) -> WorkflowRetry:
        """Replays a workflow's failed jobs (attempt 0, result cleared); with
        ``mode="failed_and_downstream"`` also every finished job downstream
        of them (what their failure cancelled, or ran anyway), which waits
        for them again. Succeeded jobs not downstream are left alone. A job
        whose unique key another active job holds raises ``InvalidState``
        and nothing changes."""
        return self._call(
            "POST",
            f"/v1/workflows/{seg(workflow_id)}/retry",
            WorkflowRetry.from_dict,
            json={"mode": mode},
        )

    # ---- queues ------------------------------------------------------------

    def queues(self) -> List[Queue]:
        """Every queue of the tenant with its counts and settings."""
        return self._call(
            "GET", "/v1/queues", lambda d: [Queue.from_dict(q) for q in d["queues"]], retry=True
        )

    def get_queue(self, queue: str) -> Queue:
        """One queue (any valid name: an unused one reads as empty)."""
        return self._call(
            "GET", f"/v1/queues/{seg(queue)}", lambda d: Queue.from_dict(d["queue"]), retry=True
        )

    def pause(self, queue: str) -> Queue:
        """Pauses a queue: claims hand out nothing until it is resumed."""
        return self._call(
            "POST",
            f"/v1/queues/{seg(queue)}/pause",
            lambda d: Queue.from_dict(d["queue"]),
            retry=True,
        )

    def resume(self, queue: str) -> Queue:
        """Resumes a paused queue."""
        return self._call(
            "POST",
            f"/v1/queues/{seg(queue)}/resume",
            lambda d: Queue.from_dict(d["queue"]),
            retry=True,
        )

    def configure(
        self,
        queue: str,
        *,
        max_attempts: Optional[int] = None,
        backoff: Optional[Backoff] = None,
        default_lease_ttl: Optional[Duration] = None,
        max_running: Union[int, _Unset, None] = UNSET,
        rate_limit: Union[RateLimit, _Unset, None] = UNSET,
        key_max_running: Union[int, _Unset, None] = UNSET,
        fair: Optional[bool] = None,
    ) -> Queue:
        """Changes a queue's settings (``PATCH /v1/queues/{queue}``); what is
        left out stays as it is. ``max_attempts``, ``backoff`` and
        ``default_lease_ttl`` (seconds or a ``timedelta``, 1 to 3600) apply
        to jobs enqueued afterwards. The flow-control limits apply at once:
        ``max_running``, ``rate_limit`` (``RateLimit(count, period)``) and
        ``key_max_running`` take ``None`` to remove the limit; ``fair`` takes
        a bool."""
        body: Dict[str, Any] = pick(
            max_attempts=max_attempts,
            backoff=None if backoff is None else backoff.to_dict(),
            default_lease_ttl_ms=opt_ms(default_lease_ttl, "default_lease_ttl"),
            fair=fair,
        )
        if max_running is not UNSET:
            body["max_running"] = max_running
        if rate_limit is not UNSET:
            body["rate_limit"] = None if rate_limit is None else rate_limit.to_dict()
        if key_max_running is not UNSET:
            body["key_max_running"] = key_max_running
        return self._call(
            "PATCH",
            f"/v1/queues/{seg(queue)}",
            lambda d: Queue.from_dict(d["queue"]),
            json=body,
            retry=True,
        )

    def delete_queue(self, queue: str) -> None:
        """Removes a queue's row (its pause flag, its settings, its entry in
        :meth:`queues`) when it holds no job in any state
        (``DELETE /v1/queues/{queue}``): for a name made by a typo. A queue
        holding jobs raises ``InvalidState``; one without a row ``NotFound``."""
        self._call("DELETE", f"/v1/queues/{seg(queue)}", lambda d: None)

    def throughput(self, queue: str, *, minutes: Optional[int] = None) -> Throughput:
        """A queue's last ``minutes`` (1 to 1440, default 60) minute by
        minute, and the wait and run time percentiles of the jobs that
        finished in them (``GET /v1/queues/{queue}/throughput``)."""
        return self._call(
            "GET",
            f"/v1/queues/{seg(queue)}/throughput",
            Throughput.from_dict,
            params=pick(minutes=minutes),
            retry=True,
        )

    # ---- the worker protocol -----------------------------------------------

    def claim(
        self,
        queue: str,
        worker_id: str,
        *,
        limit: Optional[int] = None,
        lease_ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        completions: Optional[Iterable[CompleteItem]] = None,
        failures: Optional[Iterable[FailItem]] = None,
    ) -> ClaimResult:
        """Claims up to ``limit`` ready jobs, each with a lease of
        ``lease_ttl`` (seconds or a ``timedelta``, 1 to 3600; default the
        queue's); with ``wait`` (up to 30 s) an empty queue holds the request
        until a job is ready or the wait ends. Never retried here (a lost
        answer's jobs come back when their lease lapses).

        The claim may carry the previous batch's reports: ``completions`` and
        ``failures`` (together at most 1000) are applied first, completions
        then failures, each in order, in the claim's own transaction. The
        answer is a :class:`ClaimResult`: the list of claimed jobs, whose
        ``reports`` has one :class:`ItemResult` per carried report in that
        order (a refused one never fails the claim). Reports are answered
        only with the claim, so a claim that carries them should not
        ``wait``. A request bad as a whole (over 1000 reports, a bad item)
        raises ``InvalidArgument`` and changes nothing."""
        wait_ms = opt_ms(wait, "wait")
        body = pick(
            worker_id=worker_id,
            limit=limit,
            lease_ttl_ms=opt_ms(lease_ttl, "lease_ttl"),
            wait_ms=wait_ms,
        )
        complete = [i.to_dict() for i in completions or ()]
        fail = [i.to_dict() for i in failures or ()]
        if complete:
            body["complete"] = complete
        if fail:
            body["fail"] = fail
        timeout = None if not wait_ms else wait_ms / 1000 + 30
        return self._call(
            "POST",
            f"/v1/queues/{seg(queue)}/claim",
            claim_result,
            json=body,
            timeout=timeout,
        )

    def heartbeat(
        self,
        job_id: str,
        lease_token: str,
        *,
        lease_ttl: Optional[Duration] = None,
        progress: JSON = None,
    ) -> HeartbeatAck:
        """Extends a lease, by ``lease_ttl`` (seconds or a ``timedelta``) or
        else the claim's, and records ``progress`` when given."""
        body = pick(
            lease_token=lease_token,
            lease_ttl_ms=opt_ms(lease_ttl, "lease_ttl"),
            progress=progress,
        )
        return self._call(
            "POST", f"/v1/jobs/{seg(job_id)}/heartbeat", HeartbeatAck.from_dict, json=body
        )

    def heartbeat_batch(self, items: Iterable[HeartbeatItem]) -> List[ItemResult]:
        """Extends many leases in one round trip (``POST /v1/jobs/heartbeat``);
        answers one ``ItemResult`` per item, in order, with its ``ack``."""
        body = {"items": [i.to_dict() for i in items]}
        return self._call(
            "POST", "/v1/jobs/heartbeat", lambda d: item_results(d, heartbeat=True), json=body
        )

    def complete(self, job_id: str, lease_token: str, result: JSON = None) -> Job:
        """Marks a job succeeded with ``result``."""
        body = pick(lease_token=lease_token, result=result)
        return self._call(
            "POST",
            f"/v1/jobs/{seg(job_id)}/complete",
            lambda d: Job.from_dict(d["job"]),
            json=body,
        )

    def complete_batch(self, items: Iterable[CompleteItem]) -> List[ItemResult]:
        """Completes many jobs in one round trip (``POST /v1/jobs/complete``);
        answers one ``ItemResult`` per item, in order."""
        body = {"items": [i.to_dict() for i in items]}
        return self._call(
            "POST", "/v1/jobs/complete", lambda d: item_results(d, heartbeat=False), json=body
        )

    def fail(
        self,
        job_id: str,
        lease_token: str,
        error: str,
        *,
        retry_after: Optional[Duration] = None,
        fatal: Optional[bool] = None,
        cancelled: Optional[bool] = None,
    ) -> Job:
        """Fails the attempt: queued again with backoff (exactly
        ``retry_after`` later when given: seconds or a ``timedelta``),
        ``failed`` when ``fatal`` or out of attempts, ``cancelled`` with
        ``cancelled=True``."""
        body = pick(
            lease_token=lease_token,
            error=error,
            retry_after_ms=opt_ms(retry_after, "retry_after"),
            fatal=fatal,
            cancelled=cancelled,
        )
        return self._call(
            "POST", f"/v1/jobs/{seg(job_id)}/fail", lambda d: Job.from_dict(d["job"]), json=body
        )

    def snooze(self, job_id: str, lease_token: str, delay: Duration = 0) -> Job:
        """Puts the job back in the queue for ``delay`` (seconds or a
        ``timedelta``) with the attempt given back: "not now, not my fault"."""
        body = {"lease_token": lease_token, "delay_ms": to_ms(delay, "delay")}
        return self._call(
            "POST",
            f"/v1/jobs/{seg(job_id)}/snooze",
            lambda d: Job.from_dict(d["job"]),
            json=body,
        )

    # ---- schedules -----------------------------------------------------------

    def create_schedule(
        self,
        name: str,
        cron: str,
        queue: str,
        kind: str,
        payload: JSON = None,
        *,
        timezone: Optional[str] = None,
        enabled: Optional[bool] = None,
        overlap: Optional[str] = None,
    ) -> Schedule:
        """Creates a cron schedule (5 fields, or 6 with seconds first)."""
        body = pick(
            name=name,
            cron=cron,
            queue=queue,
            kind=kind,
            payload=payload,
            timezone=timezone,
            enabled=enabled,
            overlap=overlap,
        )
        return self._call(
            "POST", "/v1/schedules", lambda d: Schedule.from_dict(d["schedule"]), json=body
        )

    def ensure_schedule(
        self,
        name: str,
        cron: str,
        queue: str,
        kind: str,
        payload: JSON = None,
        *,
        timezone: Optional[str] = None,
        enabled: Optional[bool] = None,
        overlap: Optional[str] = None,
    ) -> EnsuredSchedule:
        """Makes the tenant's schedule ``name`` exactly this
        (``PUT /v1/schedules/{name}``): the way to declare schedules in code
        and apply them on every deploy. A new name is created (``outcome``
        ``"created"``); an existing schedule keeps its id and runs and takes
        this definition, its next run worked out again from now
        (``"updated"``); one that already is exactly this is not written
        (``"unchanged"``). What is left out takes its default, as at
        creation (``timezone`` UTC, ``enabled`` true, ``overlap``
        ``"allow"``, a ``null`` payload). Answers an
        :class:`EnsuredSchedule`: the schedule as it now stands, and the
        outcome. Safe to repeat, so retried like a read (a retry after a
        lost answer reads ``"unchanged"``)."""
        body = pick(
            cron=cron,
            timezone=timezone,
            queue=queue,
            kind=kind,
            payload=payload,
            enabled=enabled,
            overlap=overlap,
        )
        return self._call(
            "PUT",
            f"/v1/schedules/{seg(name)}",
            EnsuredSchedule.from_dict,
            json=body,
            retry=True,
        )

    def get_schedule(self, schedule_id: str) -> Schedule:
        """A schedule by id."""
        return self._call(
            "GET",
            f"/v1/schedules/{seg(schedule_id)}",
            lambda d: Schedule.from_dict(d["schedule"]),
            retry=True,
        )

    def list_schedules(self) -> List[Schedule]:
        """Every schedule of the tenant, by name."""
        return self._call(
            "GET",
            "/v1/schedules",
            lambda d: [Schedule.from_dict(s) for s in d["schedules"]],
            retry=True,
        )

    def patch_schedule(
        self,
        schedule_id: str,
        *,
        name: Optional[str] = None,
        cron: Optional[str] = None,
        timezone: Optional[str] = None,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        payload: Union[JSON, _Unset] = UNSET,
        enabled: Optional[bool] = None,
        overlap: Optional[str] = None,
    ) -> Schedule:
        """Changes the fields given (those of :meth:`create_schedule`); what is
        left out stays as it is (``payload=None`` sets a ``null`` payload).
        ``next_run_at`` is computed again from now."""
        body = pick(
            name=name,
            cron=cron,
            timezone=timezone,
            queue=queue,
            kind=kind,
            enabled=enabled,
            overlap=overlap,
        )
        if payload is not UNSET:
            body["payload"] = payload
        return self._call(
            "PATCH",
            f"/v1/schedules/{seg(schedule_id)}",
            lambda d: Schedule.from_dict(d["schedule"]),
            json=body,
        )

    def delete_schedule(self, schedule_id: str) -> None:
        """Deletes a schedule and its runs (its jobs stay)."""
        self._call("DELETE", f"/v1/schedules/{seg(schedule_id)}", lambda d: None)

    def schedule_runs(self, schedule_id: str) -> List[ScheduleRun]:
        """The newest runs of a schedule, newest first."""
        return self._call(
            "GET",
            f"/v1/schedules/{seg(schedule_id)}/runs",
            lambda d: [ScheduleRun.from_dict(r) for r in d["runs"]],
            retry=True,
        )

    def trigger_schedule(self, schedule_id: str) -> Job:
        """Runs a schedule now, outside its timetable; answers the new job."""
        return self._call(
            "POST",
            f"/v1/schedules/{seg(schedule_id)}/trigger",
            lambda d: Job.from_dict(d["job"]),
        )

    def cron_preview(
        self,
        cron: str,
        *,
        timezone: Optional[str] = None,
        start: Optional[Time] = None,
        count: Optional[int] = None,
    ) -> List[str]:
        """The next fire instants of ``cron`` strictly after ``start`` (default
        now), as the scheduler computes them."""
        params = pick(cron=cron, timezone=timezone, count=count, **{"from": time_str(start)})
        return self._call(
            "GET",
            "/v1/cron/preview",
            lambda d: [str(t) for t in d["times"]],
            params=params,
            retry=True,
        )

    # ---- tenants and keys --------------------------------------------------------

    def whoami(self) -> WhoAmI:
        """The key's tenant, its id and whether it is an admin key."""
        return self._call("GET", "/v1/whoami", WhoAmI.from_dict, retry=True)

    def workers(self) -> List[WorkerInfo]:
        """The tenant's workers (``GET /v1/workers``), by ``worker_id``: those
        holding running jobs now, and those that announced themselves
        (:meth:`announce_worker`, as every :class:`tether_client.Worker`
        does) and were seen in the last 5 minutes, idle or not."""
        return self._call(
            "GET",
            "/v1/workers",
            lambda d: [WorkerInfo.from_dict(w) for w in d["workers"]],
            retry=True,
        )

    def announce_worker(
        self,
        worker_id: str,
        *,
        queues: Iterable[str],
        concurrency: int,
        sdk: Optional[str] = None,
        version: Optional[str] = None,
        host: Optional[str] = None,
        pid: Optional[int] = None,
    ) -> None:
        """Says that worker ``worker_id`` runs (``PUT /v1/workers/{id}``): the
        ``queues`` it serves (1 to 100), how many jobs it runs at once in
        all (``concurrency``), and what it runs on, so that :meth:`workers`
        lists it while it is idle too. Announcing again replaces what it
        said; a worker neither announcing nor claiming for 5 minutes is
        forgotten. A :class:`tether_client.Worker` announces itself when it
        starts and every minute: call this only for a worker of your own."""
        body = pick(
            queues=list(queues),
            concurrency=concurrency,
            sdk=sdk,
            version=version,
            host=host,
            pid=pid,
        )
        self._call(
            "PUT", f"/v1/workers/{seg(worker_id)}", lambda d: None, json=body, retry=True
        )

    def create_tenant(self, name: str) -> CreatedTenant:
        """Creates a tenant and its first key (admin only)."""
        return self._call("POST", "/v1/tenants", CreatedTenant.from_dict, json={"name": name})

    def list_tenants(self) -> List[Tenant]:
        """Every tenant (admin only)."""
        return self._call(
            "GET",
            "/v1/tenants",
            lambda d: [Tenant.from_dict(t) for t in d["tenants"]],
            retry=True,
        )

    def suspend_tenant(self, tenant_id: str) -> Tenant:
        """Suspends a tenant (admin only): its keys are refused with
        ``PermissionDenied`` and its schedules stop until it is resumed;
        nothing is deleted. Suspending it again keeps its first
        ``suspended_at``; the ``default`` tenant cannot be suspended
        (``InvalidArgument``)."""
        return self._call(
            "POST",
            f"/v1/tenants/{seg(tenant_id)}/suspend",
            lambda d: Tenant.from_dict(d["tenant"]),
            retry=True,
        )

    def resume_tenant(self, tenant_id: str) -> Tenant:
        """Resumes a suspended tenant (admin only): its keys work again.
        Resuming an active tenant changes nothing."""
        return self._call(
            "POST",
            f"/v1/tenants/{seg(tenant_id)}/resume",
            lambda d: Tenant.from_dict(d["tenant"]),
            retry=True,
        )

    def create_key(
        self, tenant_id: str, *, name: Optional[str] = None, admin: Optional[bool] = None
    ) -> CreatedKey:
        """Issues a key for a tenant (admin only; ``admin=True`` only in the
        ``default`` tenant)."""
        return self._call(
            "POST",
            f"/v1/tenants/{seg(tenant_id)}/keys",
            CreatedKey.from_dict,
            json=pick(name=name, admin=admin),
        )

    def list_keys(self, tenant_id: str) -> List[ApiKey]:
        """A tenant's keys, revoked ones included, oldest first (admin only)."""
        return self._call(
            "GET",
            f"/v1/tenants/{seg(tenant_id)}/keys",
            lambda d: [ApiKey.from_dict(k) for k in d["keys"]],
            retry=True,
        )

    def revoke_key(self, key_id: str) -> None:
        """Revokes a key at once (admin only)."""
        self._call("DELETE", f"/v1/keys/{seg(key_id)}", lambda d: None)

    # ---- outside /v1 ---------------------------------------------------------------

    def healthz(self) -> Dict[str, Any]:
        """``GET /healthz``: the process is alive."""
        return self._call("GET", "/healthz", lambda d: dict(d or {}), retry=True)

    def readyz(self) -> Dict[str, Any]:
        """``GET /readyz``: the database is reachable (``Unavailable`` if not)."""
        return self._call("GET", "/readyz", lambda d: dict(d or {}), retry=False)

    def metrics(self) -> str:
        """``GET /metrics``: Prometheus text (admin only)."""
        return self._call("GET", "/metrics", str, retry=True)

    def openapi(self) -> Dict[str, Any]:
        """``GET /openapi.json``: the server's API description."""
        return self._call("GET", "/openapi.json", lambda d: dict(d), retry=True)
