"""Typed tasks: a job kind declared once with its payload and result types
and its enqueue defaults, from which both the enqueue and the handler take
their types.

    send_email = task("send-email", queue="emails", payload=EmailIn, result=EmailOut)

    @worker.handler(send_email)
    def run(ctx: JobContext, p: EmailIn) -> EmailOut: ...

    job = send_email.enqueue(client, EmailIn(to="ada@example.com"))
    done = client.wait(job)            # done.result is an EmailOut once it succeeded

A payload or result type is a dataclass, a ``TypedDict``, a pydantic model
(v2, when pydantic is installed), or any type JSON reads as (``dict``,
``list``, ``str``, ``int``, ...), nested as deep as needed. Encoding:
dataclass → ``dataclasses.asdict``, pydantic → ``model_dump(mode="json")``,
anything else as it is. Decoding checks the JSON against the type (the
fields a dataclass or TypedDict requires, no unknown field, the types of
the values) and builds it; a payload that does not fit fails its job for
good, before the handler runs.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    Generic,
    Iterable,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
    overload,
)

from ._duration import Duration
from ._handler import Fatal, Handler, JobContext
from ._models import JSON, Backoff, DependencyFailure, Job
from ._util import Time, enqueue_body

if TYPE_CHECKING:
    from ._client import AsyncClient, Client

P = TypeVar("P")
R = TypeVar("R")

TaskHandler = Callable[[JobContext, P], Union[R, Awaitable[R]]]
"""A typed task's handler: the job's context and its decoded payload in;
the result out (an ``async def`` one answers it awaited)."""

_UNION_TYPES: Tuple[Any, ...] = (Union, getattr(types, "UnionType", Union))


class DoesNotFit(ValueError):
    """A JSON value that does not fit the type it is read as (``where`` says
    which part of it)."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where
        self.why = why


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def _got(value: Any) -> str:
    return f"got {type(value).__name__} {value!r}"[:120]


@functools.cache
def _hints(cls: type) -> Dict[str, Any]:
    """The field types of a dataclass or TypedDict (a name that cannot be
    resolved, as in a class defined inside a function, reads as Any)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:
        annotations: Dict[str, Any] = getattr(cls, "__annotations__", {})
        return {name: Any for name in annotations}


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _is_pydantic(tp: Any) -> bool:
    return isinstance(tp, type) and hasattr(tp, "model_validate") and hasattr(tp, "model_fields")


def _fields(value: Any, where: str, tp: type, known: Iterable[str]) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise DoesNotFit(where, f"expected an object ({_name(tp)}), {_got(value)}")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise DoesNotFit(where, f"unknown field {unknown[0]!r} for {_name(tp)}")
    return value


def decode(tp: Any, value: Any, where: str = "") -> Any:
    """``value`` (JSON) read as ``tp``; :class:`DoesNotFit` when it does not fit."""
    if tp is Any or tp is object:
        return value
    if tp is None or tp is type(None):
        if value is not None:
            raise DoesNotFit(where, f"expected null, {_got(value)}")
        return None
    origin, args = get_origin(tp), get_args(tp)
    if origin in _UNION_TYPES:
        if value is None and type(None) in args:
            return None
        errors = []
        for arm in args:
            try:
                return decode(arm, value, where)
            except DoesNotFit as e:
                errors.append(e.why)
        raise DoesNotFit(where, " or ".join(errors))
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise DoesNotFit(where, f"expected one of {list(args)!r}, {_got(value)}")
    if origin in (list, Sequence, typing.Sequence, tuple, set, frozenset) or tp in (
        list,
        tuple,
    ):
        if not isinstance(value, list):
            raise DoesNotFit(where, f"expected an array, {_got(value)}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise DoesNotFit(where, f"expected {len(args)} items, got {len(value)}")
            return tuple(decode(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        items = [decode(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        if origin in (tuple, set, frozenset) or tp is tuple:
            return (origin or tuple)(items)
        return items
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        if not isinstance(value, dict):
            raise DoesNotFit(where, f"expected an object, {_got(value)}")
        item = args[1] if len(args) == 2 else Any
        return {k: decode(item, v, f"{where}.{k}") for k, v in value.items()}
    if not isinstance(tp, type):
        return value  # a typing construct this reader does not check (a TypeVar, ...)
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        fields = [f for f in dataclasses.fields(tp) if f.init]
        data = _fields(value, where, tp, (f.name for f in fields))
        kwargs = {}
        for f in fields:
            if f.name in data:
                kwargs[f.name] = decode(hints.get(f.name, Any), data[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise DoesNotFit(where, f"missing field {f.name!r} of {_name(tp)}")
        return tp(**kwargs)
    if _is_typeddict(tp):
        hints = _hints(tp)
        data = _fields(value, where, tp, hints)
        for key in sorted(tp.__required_keys__):  # type: ignore[attr-defined]
            if key not in data:
                raise DoesNotFit(where, f"missing field {key!r} of {_name(tp)}")
        return {k: decode(hints.get(k, Any), v, f"{where}.{k}") for k, v in data.items()}
    if _is_pydantic(tp):
        try:
            return tp.model_validate(value)  # type: ignore[attr-defined]
        except Exception as e:  # pydantic's ValidationError says what and where
            raise DoesNotFit(where, f"not a valid {_name(tp)}: {e}") from None
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, tp):
        return value
    raise DoesNotFit(where, f"expected {_name(tp)}, {_got(value)}")


def encode(value: Any) -> JSON:
    """``value`` as JSON: a dataclass as ``asdict``, a pydantic model as
    ``model_dump(mode="json")``, anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump") and not isinstance(value, type):
        return value.model_dump(mode="json")
    return value


@dataclasses.dataclass
class TaskJob(Job, Generic[R]):
    """A job of a typed task (what :meth:`Task.enqueue` answers, and
    ``client.wait`` answers for one): a :class:`Job` whose ``result`` is read
    as the task's result type, once the job has succeeded (None before, and
    when it failed or was cancelled). ``raw`` keeps the JSON."""

    result: Optional[R] = None
    task: Optional[Task[Any, R]] = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, job: Job, task: Task[Any, R]) -> TaskJob[R]:
        """``job`` as a job of ``task``: its result decoded (``DecodeError``
        when it does not fit the task's result type)."""
        values = {f.name: getattr(job, f.name) for f in dataclasses.fields(Job)}
        values["result"] = task.decode_result(job.result) if job.state == "succeeded" else None
        return cls(**values, task=task)


class Task(Generic[P, R]):
    """A job kind declared once (see :func:`task`): its payload and result
    types and its enqueue defaults. ``send_email.enqueue(client, payload)``
    enqueues one (``await`` it with an :class:`AsyncClient`);
    ``@worker.handler(send_email)`` registers a handler that takes the
    decoded payload; ``client.wait(job)`` reads the result back as the
    result type."""

    def __init__(
        self,
        kind: str,
        *,
        queue: str,
        payload: Type[P],
        result: Optional[Type[R]],
        priority: Optional[int],
        max_attempts: Optional[int],
        timeout: Optional[Duration],
        backoff: Optional[Backoff],
        tags: Optional[Iterable[str]],
        dependency_failure: Optional[DependencyFailure],
    ) -> None:
        self.kind = kind
        self.queue = queue
        self.payload_type: Type[P] = payload
        self.result_type: Optional[Type[R]] = result
        """None: the handler returns nothing."""
        self.priority = priority
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.backoff = backoff
        self.tags = None if tags is None else list(tags)
        self.dependency_failure = dependency_failure
        # The same checks as at enqueue, made once, here.
        enqueue_body(queue, kind, None, **self._defaults())

    def _defaults(self) -> Dict[str, Any]:
        return dict(
            priority=self.priority,
            run_at=None,
            delay=None,
            max_attempts=self.max_attempts,
            timeout=self.timeout,
            idempotency_key=None,
            unique_key=None,
            tags=self.tags,
            expires_at=None,
            backoff=self.backoff,
            concurrency_key=None,
            depends_on=None,
            dependency_failure=self.dependency_failure,
            workflow_id=None,
            headers=None,
        )

    def __repr__(self) -> str:
        result = "None" if self.result_type is None else _name(self.result_type)
        return (
            f"Task({self.kind!r}, queue={self.queue!r}, payload={_name(self.payload_type)}, "
            f"result={result})"
        )

    # ---- encoding ------------------------------------------------------------

    def encode_payload(self, payload: P) -> JSON:
        """The payload as sent."""
        return encode(payload)

    def decode_payload(self, data: JSON) -> P:
        """A claimed job's payload as the payload type (:class:`DoesNotFit`
        when it does not fit)."""
        return cast(P, decode(self.payload_type, data, "payload"))

    def decode_result(self, data: JSON) -> R:
        """A job's stored result as the result type (``DecodeError`` when it
        does not fit)."""
        from ._errors import DecodeError

        try:
            return cast(R, decode(self.result_type, data, "result"))
        except DoesNotFit as e:
            raise DecodeError(f"the result of a {self.kind} job does not fit: {e}") from e

    def _handler(self, fn: TaskHandler[P, R]) -> Tuple[Handler, bool]:
        """The worker's handler for ``fn``: decodes the payload (one that
        does not fit fails the job for good), runs ``fn``, encodes its
        result; and whether it is ``async def``."""

        def payload_of(ctx: JobContext) -> P:
            try:
                return self.decode_payload(ctx.payload)
            except DoesNotFit as e:
                raise Fatal(
                    f"the payload does not fit {self.kind}'s {_name(self.payload_type)}: {e}"
                ) from None

        if inspect.iscoroutinefunction(fn):

            async def run_async(ctx: JobContext) -> JSON:
                return encode(await cast(Awaitable[R], fn(ctx, payload_of(ctx))))

            return run_async, True

        def run(ctx: JobContext) -> JSON:
            return encode(fn(ctx, payload_of(ctx)))

        return run, False

    # ---- enqueueing ----------------------------------------------------------

    @overload
    def enqueue(
        self,
        client: Client,
        payload: P,
        *,
        queue: Optional[str] = None,
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
    ) -> TaskJob[R]: ...

    @overload
    def enqueue(
        self,
        client: AsyncClient,
        payload: P,
        *,
        queue: Optional[str] = None,
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
    ) -> Awaitable[TaskJob[R]]: ...

    def enqueue(
        self,
        client: Union[Client, AsyncClient],
        payload: P,
        *,
        queue: Optional[str] = None,
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
    ) -> Union[TaskJob[R], Awaitable[TaskJob[R]]]:
        """Enqueues a job of this task with ``payload`` (encoded as the
        module says) through ``client``: a :class:`Client` answers the
        :class:`TaskJob`, an :class:`AsyncClient` an awaitable of it. The
        keywords are those of ``client.enqueue``; each one left out takes
        the task's default (its ``queue``, ``priority``, ``max_attempts``,
        ``timeout``, ``backoff``, ``tags``, ``dependency_failure``)."""
        body = self._body(
            payload,
            queue=queue,
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
        return client._enqueue_task(self, body)

    def _body(
        self,
        payload: P,
        *,
        queue: Optional[str],
        priority: Optional[int],
        run_at: Optional[Time],
        delay: Optional[Duration],
        max_attempts: Optional[int],
        timeout: Optional[Duration],
        idempotency_key: Optional[str],
        unique_key: Optional[str],
        tags: Optional[Iterable[str]],
        expires_at: Optional[Time],
        backoff: Optional[Backoff],
        concurrency_key: Optional[str],
        depends_on: Optional[Iterable[Union[str, Job]]],
        dependency_failure: Optional[DependencyFailure],
        workflow_id: Optional[str],
        headers: Optional[Mapping[str, str]],
    ) -> Dict[str, Any]:
        """The enqueue body of a job of this task (:meth:`enqueue`, and
        ``tether_client.sql.enqueue_task``): the payload encoded, each
        keyword left out (None) taken from the task's defaults."""
        return enqueue_body(
            self.queue if queue is None else queue,
            self.kind,
            self.encode_payload(payload),
            priority=self.priority if priority is None else priority,
            run_at=run_at,
            delay=delay,
            max_attempts=self.max_attempts if max_attempts is None else max_attempts,
            timeout=self.timeout if timeout is None else timeout,
            idempotency_key=idempotency_key,
            unique_key=unique_key,
            tags=self.tags if tags is None else tags,
            expires_at=expires_at,
            backoff=self.backoff if backoff is None else backoff,
            concurrency_key=concurrency_key,
            depends_on=depends_on,
            dependency_failure=(
                self.dependency_failure if dependency_failure is None else dependency_failure
            ),
            workflow_id=workflow_id,
            headers=headers,
        )


@overload
def task(
    kind: str,
    *,
    queue: str,
    payload: Type[P],
    result: Type[R],
    priority: Optional[int] = None,
    max_attempts: Optional[int] = None,
    timeout: Optional[Duration] = None,
    backoff: Optional[Backoff] = None,
    tags: Optional[Iterable[str]] = None,
    dependency_failure: Optional[DependencyFailure] = None,
) -> Task[P, R]: ...


@overload
def task(
    kind: str,
    *,
    queue: str,
    payload: Type[P],
    result: None = None,
    priority: Optional[int] = None,
    max_attempts: Optional[int] = None,
    timeout: Optional[Duration] = None,
    backoff: Optional[Backoff] = None,
    tags: Optional[Iterable[str]] = None,
    dependency_failure: Optional[DependencyFailure] = None,
) -> Task[P, None]: ...


def task(
    kind: str,
    *,
    queue: str,
    payload: Type[P],
    result: Optional[Type[R]] = None,
    priority: Optional[int] = None,
    max_attempts: Optional[int] = None,
    timeout: Optional[Duration] = None,
    backoff: Optional[Backoff] = None,
    tags: Optional[Iterable[str]] = None,
    dependency_failure: Optional[DependencyFailure] = None,
) -> Task[P, Any]:
    """Declares a typed task: jobs of ``kind`` whose payload is a ``payload``
    and whose result is a ``result`` (left out: the handler returns
    nothing). The other arguments are the defaults of its enqueues (each may
    be overridden per call): ``queue``, ``priority``, ``max_attempts``,
    ``timeout`` (seconds or a ``timedelta``), ``backoff``, ``tags``,
    ``dependency_failure``.

    ::

        send_email = task("send-email", queue="emails", payload=EmailIn,
                          result=EmailOut, max_attempts=5, timeout=60)
    """
    return Task(
        kind,
        queue=queue,
        payload=payload,
        result=result,
        priority=priority,
        max_attempts=max_attempts,
        timeout=timeout,
        backoff=backoff,
        tags=tags,
        dependency_failure=dependency_failure,
    )

