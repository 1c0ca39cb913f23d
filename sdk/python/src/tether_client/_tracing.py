"""W3C trace context through job headers, when OpenTelemetry is installed.

At enqueue, the current span's context (``traceparent``, and ``tracestate``
when it has one) goes into the job's headers; a worker running a job whose
headers carry it runs the handler and its hooks in a ``tether.job <kind>``
span (kind CONSUMER) whose parent is that context, so the trace of the
request that enqueued a job goes on in its handler.

OpenTelemetry is optional: this module imports it the first time it is
needed, and when it is not installed every function here does nothing (an
enqueue adds no header, a job runs without a span). Only the W3C trace
context propagator is used, never the globally configured one: baggage
(which the default global propagator also sends) could exceed what a job
header may hold, and the server would refuse the enqueue.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from ._version import VERSION

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span

    from ._handler import Outcome
    from ._models import Job

TRACEPARENT = "traceparent"

log = logging.getLogger("tether_client.tracing")


class _OTel:
    """The parts of OpenTelemetry this module uses, imported once."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        self.attach = context.attach
        self.detach = context.detach
        self.get_current_span = trace.get_current_span
        self.set_span_in_context = trace.set_span_in_context
        self.propagator = TraceContextTextMapPropagator()
        self.consumer = SpanKind.CONSUMER
        self.status = Status
        self.error = StatusCode.ERROR
        # A proxy until the application sets a tracer provider, which it
        # may do after this: the proxy then hands spans to that provider.
        self.tracer = trace.get_tracer("tether_client", VERSION)


_otel: Optional[_OTel] = None
_tried = False


def otel() -> Optional[_OTel]:
    """OpenTelemetry, or None when it is not installed (tried once)."""
    global _otel, _tried
    if not _tried:
        _tried = True
        try:
            _otel = _OTel()
        except ImportError:
            _otel = None
        except Exception as e:  # an installed version this module cannot use
            log.warning("OpenTelemetry could not be loaded (%r): no trace context is carried", e)
            _otel = None
    return _otel


def current_trace_headers() -> Dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span, or ``{}``
    when OpenTelemetry is not installed or no valid span is current."""
    o = otel()
    if o is None:
        return {}
    if not o.get_current_span().get_span_context().is_valid:
        return {}
    carrier: Dict[str, str] = {}
    o.propagator.inject(carrier)
    return carrier


def _with(body: Dict[str, Any], found: Mapping[str, str]) -> Dict[str, Any]:
    """``body`` with the trace context ``found`` added to its headers, unless
    the caller set a ``traceparent`` (in any case) itself: then the trace
    context is the caller's, whole (a ``tracestate`` of another trace would
    not belong with it)."""
    headers: Mapping[str, str] = body.get("headers") or {}
    if any(name.lower() == TRACEPARENT for name in headers):
        return body
    return {**body, "headers": {**found, **headers}}


def traced(body: Dict[str, Any]) -> Dict[str, Any]:
    """An enqueue body with the current trace context in its headers (a new
    dict; ``body`` itself when there is nothing to add)."""
    found = current_trace_headers()
    return _with(body, found) if found else body


def traced_all(bodies: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The entries of a batch, each as :func:`traced` makes it."""
    found = current_trace_headers()
    return [_with(b, found) for b in bodies] if found else bodies


def start_job_span(job: Job) -> Optional[Tuple[Span, Token[Context]]]:
    """For a job whose headers carry trace context, when OpenTelemetry is
    installed: a ``tether.job <kind>`` span, child of that context, made the
    current span of the calling context; and the token that
    :func:`end_job_span` detaches it with. None otherwise."""
    if TRACEPARENT not in job.headers:
        return None
    o = otel()
    if o is None:
        return None
    parent = o.propagator.extract(job.headers)
    span: Span = o.tracer.start_span(
        f"tether.job {job.kind}",
        context=parent,
        kind=o.consumer,
        attributes={
            "tether.job.id": job.id,
            "tether.job.kind": job.kind,
            "tether.job.queue": job.queue,
            "tether.job.attempt": job.attempt,
            # OpenTelemetry's messaging conventions, for the backends that
            # read those: a message processed from a queue.
            "messaging.system": "tether",
            "messaging.operation.type": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": job.id,
        },
    )
    token = o.attach(o.set_span_in_context(span))
    return span, token


def end_job_span(started: Tuple[Span, Token[Context]], outcome: Optional[Outcome]) -> None:
    """Ends a span of :func:`start_job_span` in the context that started it:
    a failed attempt (``failed``, ``retry_after``) records its exception
    and sets the status to error. ``outcome`` None: the run did not get as
    far as an outcome (the worker stopped)."""
    o = otel()
    assert o is not None  # a span was started
    span, token = started
    try:
        if outcome is not None and outcome.status in ("failed", "retry_after"):
            error = outcome.error
            if error is not None:
                span.record_exception(error)
            span.set_status(o.status(o.error, None if error is None else str(error)))
        span.end()
    finally:
        o.detach(token)
