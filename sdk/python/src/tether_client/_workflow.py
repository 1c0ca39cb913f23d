"""Workflows written in code: :class:`WorkflowBuilder` collects jobs and
the edges between them, ``client.enqueue_workflow(builder)`` sends them as
one batch that makes a new workflow, and :class:`EnqueuedWorkflow` maps the
answer back to the builder's entries."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Union

from ._duration import Duration
from ._models import JSON, Backoff, DependencyFailure, EnqueueResult, Job
from ._util import Time, enqueue_body

MAX_ENTRIES = 1000
"""How many jobs one batch, hence one :class:`WorkflowBuilder`, may hold.
A workflow grows past it only by jobs added at run time (``workflow_id=``)."""

Dependency = Union["WorkflowEntry", str, Job]
"""What ``after`` names: an entry of the same builder, or an existing job
(its id, or the :class:`Job`)."""


class WorkflowEntry:
    """One job of a :class:`WorkflowBuilder`, as :meth:`WorkflowBuilder.add`
    answered it: name it in a later ``add(..., after=[entry])`` to wait for
    it, and give it to :meth:`EnqueuedWorkflow.job` for the job it became.
    ``index`` is its position in the batch."""

    __slots__ = ("_owner", "index", "kind", "queue")

    def __init__(self, owner: WorkflowBuilder, index: int, queue: str, kind: str) -> None:
        self._owner = owner
        self.index = index
        self.queue = queue
        self.kind = kind

    def __repr__(self) -> str:
        return f"WorkflowEntry(index={self.index}, queue={self.queue!r}, kind={self.kind!r})"


class WorkflowBuilder:
    """A graph of jobs to enqueue as one new workflow.

    ::

        wf = WorkflowBuilder("publish", idempotency_key="post:42")
        a = wf.add("media", "thumbnail", {"size": 64})
        b = wf.add("media", "thumbnail", {"size": 512})
        c = wf.add("media", "publish", {"post": 42}, after=[a, b])
        done = client.enqueue_workflow(wf)
        done.workflow_id, done.job(c).state            # ..., "waiting"

    :meth:`add` takes the arguments of ``client.enqueue`` and ``after``: the
    entries of this builder (made by earlier ``add`` calls, so the graph has
    no cycle) and existing jobs (ids or :class:`Job` objects) the job waits
    for. They become the entry's ``depends_on_entries`` and ``depends_on``
    (its job's ``depends_on`` then lists the existing jobs first, then the
    entries, each in the order given). At most 1000 entries
    (``ValueError`` past that): a workflow grows further only at run time,
    by enqueues with ``workflow_id``.

    With an ``idempotency_key``, sending the same builder again (after a
    timeout, a crash) answers the workflow the key made first and writes
    nothing; the client then retries it on transport errors and
    ``unavailable`` like any read.
    """

    def __init__(self, name: str, *, idempotency_key: Optional[str] = None) -> None:
        self.name = name
        self.idempotency_key = idempotency_key
        self._entries: List[WorkflowEntry] = []
        self._bodies: List[Dict[str, Any]] = []
        # Per entry, what its job's `depends_on` will be: existing ids, then
        # entry indexes (the server's order), to check an answer against.
        self._after: List[List[Union[str, int]]] = []

    def add(
        self,
        queue: str,
        kind: str,
        payload: JSON = None,
        *,
        after: Optional[Iterable[Dependency]] = None,
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
        dependency_failure: Optional[DependencyFailure] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> WorkflowEntry:
        """Adds a job that waits for everything in ``after``; answers its entry.
        The other arguments are those of ``enqueue`` (durations in seconds or
        ``timedelta``); the job's ``workflow_id`` is the one the batch makes."""
        if len(self._entries) >= MAX_ENTRIES:
            raise ValueError(
                f"workflow {self.name!r} already has {MAX_ENTRIES} jobs, the most one batch "
                "holds: add more at run time with enqueue(..., workflow_id=...)"
            )
        ids: List[str] = []
        entries: List[int] = []
        for dep in after or ():
            if isinstance(dep, WorkflowEntry):
                if dep._owner is not self:
                    raise ValueError(f"{dep!r} belongs to another WorkflowBuilder")
                entries.append(dep.index)
            elif isinstance(dep, Job):
                ids.append(dep.id)
            elif isinstance(dep, str):
                ids.append(dep)
            else:
                raise TypeError(
                    "after= takes WorkflowEntry objects of this builder, job ids and Job "
                    f"objects, not {type(dep).__name__}"
                )
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
            depends_on=ids or None,
            depends_on_entries=entries or None,
            dependency_failure=dependency_failure,
            workflow_id=None,
            headers=headers,
        )
        entry = WorkflowEntry(self, len(self._entries), queue, kind)
        self._entries.append(entry)
        self._bodies.append(body)
        self._after.append([*ids, *entries])
        return entry

    @property
    def entries(self) -> List[WorkflowEntry]:
        """The entries, in the order they were added (the batch's order)."""
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[WorkflowEntry]:
        return iter(list(self._entries))

    def to_request(self) -> Dict[str, Any]:
        """The body of ``POST /v1/jobs/batch`` that makes this workflow."""
        workflow: Dict[str, Any] = {"name": self.name}
        if self.idempotency_key is not None:
            workflow["idempotency_key"] = self.idempotency_key
        return {"jobs": [dict(b) for b in self._bodies], "workflow": workflow}

    def _answer(self, data: Any) -> EnqueuedWorkflow:
        """The batch's answer, mapped back to the entries."""
        results = [EnqueueResult.from_dict(r) for r in data["results"]]
        created = any(r.created for r in results)
        jobs: Optional[List[Job]] = [r.job for r in results]
        if not created or len(results) != len(self._entries):
            jobs = self._match([r.job for r in results])
        return EnqueuedWorkflow(str(data["workflow_id"]), created, results, self, jobs)

    def _match(self, results: List[Job]) -> Optional[List[Job]]:
        """Each entry's job when the key led to an existing workflow: its jobs,
        oldest first, are this builder's if each has its entry's queue, kind
        and dependencies (else None: the key was used for another graph)."""
        if len(results) < len(self._entries):
            return None
        jobs = results[: len(self._entries)]
        for body, after, job in zip(self._bodies, self._after, jobs):
            want = [d if isinstance(d, str) else jobs[d].id for d in after]
            if (job.queue, job.kind, job.depends_on) != (body["queue"], body["kind"], want):
                return None
        return jobs

    def __repr__(self) -> str:
        return (
            f"WorkflowBuilder({self.name!r}, idempotency_key={self.idempotency_key!r}, "
            f"entries={len(self._entries)})"
        )


class EnqueuedWorkflow:
    """What ``client.enqueue_workflow`` answers: the workflow's id, whether
    this request made it (False: its idempotency key led to the workflow it
    made before, and nothing was written), the batch's ``results``, and
    :meth:`job` (or ``answer[entry]``) for the job each entry became."""

    def __init__(
        self,
        workflow_id: str,
        created: bool,
        results: List[EnqueueResult],
        builder: WorkflowBuilder,
        by_entry: Optional[List[Job]],
    ) -> None:
        self.workflow_id = workflow_id
        self.created = created
        self.results = results
        """One :class:`EnqueueResult` per entry, in the builder's order; when
        the key led to an existing workflow, that workflow's jobs, oldest
        first (jobs added at run time included)."""
        self._builder = builder
        self._by_entry = by_entry

    @property
    def jobs(self) -> List[Job]:
        """The jobs of :attr:`results`."""
        return [r.job for r in self.results]

    def job(self, entry: WorkflowEntry) -> Job:
        """The job ``entry`` became (or, on an idempotent resend, had become)."""
        if entry._owner is not self._builder:
            raise LookupError(f"{entry!r} is not an entry of the builder this workflow came from")
        if self._by_entry is None:
            raise LookupError(
                f"workflow {self.workflow_id} was made before, by another graph with the same "
                "idempotency key: its jobs do not match this builder's entries (see .results)"
            )
        if entry.index >= len(self._by_entry):
            raise LookupError(f"{entry!r} was added after this workflow was enqueued")
        return self._by_entry[entry.index]

    def __getitem__(self, entry: WorkflowEntry) -> Job:
        return self.job(entry)

    def __repr__(self) -> str:
        return (
            f"EnqueuedWorkflow(workflow_id={self.workflow_id!r}, created={self.created}, "
            f"jobs={len(self.results)})"
        )
