"""The innermost link of the chain: send a call to one deployment and return its reply.

It picks the deployment (the one a plugin chose, else weighted-random among the candidates),
runs the provider — over the shared transport, or in-process — under the provider's clocks, and
returns a :class:`~proxy.core.reply.Reply`. An embeddings call (``Call.embedding``) goes to the
provider's embedding translation (:class:`~proxy.providers.base.Embeds`, or a local provider's
:class:`~proxy.providers.base.EmbedsLocally`) and comes back as ``Reply.embeddings``; a provider
without one answers 400 ``embeddings_not_supported`` before anything is sent. A media call
(``Call.media``: audio, images, moderations, rerank) goes to the provider's media translation
(:class:`~proxy.providers.base.ServesMedia`, or :class:`~proxy.providers.base.ServesMediaLocally`)
and comes back as ``Reply.media``, or, streamed (``call.stream``), as ``Reply.stream`` with the
answer's own ``content-type`` in ``Reply.headers``; a provider that does not serve the
operation answers 400 ``unsupported_operation`` naming both, before anything is sent. What each
provider offers is read from its :class:`~proxy.providers.base.Capabilities`, decided once when
the upstream is built. Streams come back *primed* (their
first chunk has arrived), so every failure before the first byte is an exception from this
call, where retry and fallback can act. Every upstream error is sanitised (no secret reaches a
message) and counted.

With a tracer on (:mod:`proxy.core.tracing`), each call is one attempt span, a client span
named ``"{gen_ai.operation.name} {gen_ai.request.model}"`` under the current span (so a retry's
or a fallback's attempts are siblings), with the GenAI conventions' attributes
(:mod:`proxy.tracing.genai`) and, on the operator's opt-in, the content as sent and as
answered. It ends when a whole answer has been read, or when the stream ends (then with the
stream's usage, and the time to its first chunk; failed, if the stream failed after it).
Its W3C context is sent to the upstream in ``traceparent``/``tracestate`` unless the provider
has ``propagate_trace: false``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping

from proxy.core.canonical import Call, Deployment, Usage
from proxy.core.errors import BadRequest, GatewayError, NoReadyDeployment
from proxy.core.redact import Redactor, sanitise_error
from proxy.core.reply import (
    Chunk,
    Embeddings,
    MediaAnswer,
    MediaStream,
    RawFrames,
    Reply,
    Response,
)
from proxy.core.tracing import NO_SPAN, NO_TRACER, AttributeValue, Span, Tracer
from proxy.providers.base import (
    Capabilities,
    CountsTokens,
    HttpProvider,
    LocalProvider,
    Provider,
    capabilities_of,
)
from proxy.tracing import genai
from proxy.upstream.stream import ErrorHook, UpstreamClocks, UpstreamStream
from proxy.upstream.transport import HttpTransport

DroppedHook = Callable[[str, str, list[str]], None]


class Upstream:
    """The chain's innermost ``next``: ``await upstream(call) -> Reply``."""

    def __init__(
        self,
        providers: Mapping[str, Provider],
        transport: HttpTransport,
        redactor: Redactor,
        on_error: ErrorHook,
        rng: random.Random | None = None,
        on_dropped: DroppedHook | None = None,
        capabilities: Mapping[str, Capabilities] | None = None,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        """``on_error(provider, error)`` is told of every upstream failure (for metrics);
        ``on_dropped(provider, model, fields)``, when given, of request fields a provider
        removes because its vendor rejects them (a debug log line). ``capabilities`` are the
        providers' (:func:`~proxy.providers.base.capabilities_of`), decided here when not
        given. ``tracer`` opens the attempt spans (see the module docstring)."""
        self._on_dropped = on_dropped
        self._tracer = tracer
        self._traced = tracer.enabled
        self._provider_names = {
            name: genai.provider_name(provider.config) for name, provider in providers.items()
        }
        self._propagating = frozenset(
            name for name, provider in providers.items() if provider.config.propagate_trace
        )
        self._providers = dict(providers)
        self._capabilities = {
            name: capabilities_of(provider) if capabilities is None else capabilities[name]
            for name, provider in providers.items()
        }
        self._transport = transport
        self._redactor = redactor
        self._on_error = on_error
        self._rng = rng or random.Random()

    async def __call__(self, call: Call) -> Reply:
        """Send ``call`` to its deployment. Raises a sanitised :class:`GatewayError`;
        :class:`NoReadyDeployment` when the call has no candidate at all."""
        deployment = call.deployment or self._pick(call.deployments)
        provider = self._providers[deployment.provider]
        capabilities = self._capabilities[deployment.provider]
        if call.embedding is not None and not capabilities.embeds:
            raise BadRequest(
                f"the model {call.model!r} is served by provider {deployment.provider!r}, "
                "which does not serve embeddings",
                code="embeddings_not_supported",
                param="model",
            )
        media = call.media
        if media is not None and media.operation not in capabilities.media_operations:
            raise BadRequest(
                f"the model {call.model!r} is served by provider {deployment.provider!r}, "
                f"which does not serve {media.operation.replace('_', ' ')}",
                code="unsupported_operation",
                param="model",
            )
        if (
            media is not None
            and call.stream
            and capabilities.media_meter is None
            and capabilities.media is None  # a local provider streams what it can itself
        ):
            refuse_whole_stream(deployment.provider, call)
        # With tracing off each of these checks is all the attempt pays (no extra frame)
        traced = self._traced
        if traced:
            span, call_started = self._open_attempt(call, deployment), time.perf_counter()
        else:
            span, call_started = NO_SPAN, 0.0
        clocks = UpstreamClocks(provider.config.timeouts)
        result: Response | UpstreamStream | Embeddings | MediaAnswer | tuple[str, UpstreamStream]
        try:
            if media is not None:
                result = await self._media(provider, capabilities, call, deployment, clocks, span)
            elif call.embedding is not None:
                result = await self._embed(provider, capabilities, call, deployment, clocks)
            elif capabilities.local is not None:
                result = await self._local(capabilities.local, call, deployment, clocks, span)
            else:
                assert capabilities.http is not None
                result = await self._http(
                    capabilities, capabilities.http, call, deployment, clocks, span
                )
        except GatewayError as error:
            clocks.close()
            self._fail(deployment.provider, error)
            if traced:
                span.fail(error.code)
                span.end()
            raise
        except BaseException as error:
            clocks.close()
            if traced:
                span.fail(type(error).__qualname__)
                span.end()
            raise
        if isinstance(result, Response):
            clocks.close()
            if traced:
                self._close_attempt(span, result)
            return Reply(provider=deployment.provider, model=deployment.model, response=result)
        if isinstance(result, Embeddings):
            clocks.close()
            if traced:
                if result.usage is not None:
                    span.set("gen_ai.usage.input_tokens", result.usage.prompt_tokens)
                span.end()
            return Reply(provider=deployment.provider, model=deployment.model, embeddings=result)
        if isinstance(result, MediaAnswer):
            clocks.close()
            if traced:
                span.end()
            return Reply(provider=deployment.provider, model=deployment.model, media=result)
        headers: dict[str, str] = {}
        if isinstance(result, tuple):  # a streamed media answer: its type is its own
            content_type, result = result
            headers["content-type"] = content_type
        if traced:  # primed: its first chunk has arrived; the span ends with the stream
            self._streaming_attempt(span, result, time.perf_counter() - call_started)
        return Reply(
            provider=deployment.provider, model=deployment.model, stream=result, headers=headers
        )

    def _open_attempt(self, call: Call, deployment: Deployment) -> Span:
        """The attempt's span (see the module docstring), with what the call asks for and, on
        the operator's opt-in, its content."""
        tracer = self._tracer
        operation = genai.operation_name(call)
        attributes = genai.request_attributes(
            call, operation, self._provider_names[deployment.provider], deployment.model
        )
        attributes["crossway.provider"] = deployment.provider
        span = tracer.child_span(
            genai.attempt_name(operation, deployment.model), attributes, client=True
        )
        if span.recording and tracer.capture_content:
            span.set_many(genai.input_content(call))
        return span

    def _streaming_attempt(self, span: Span, stream: UpstreamStream, first_chunk: float) -> None:
        """A streamed attempt's span: the time to its first chunk, the response's id and model
        from that chunk, then its usage and its end when the stream is over."""
        if span.recording:
            attributes: dict[str, AttributeValue] = {
                "gen_ai.response.time_to_first_chunk": first_chunk
            }
            chunk = stream.first()
            if chunk is not None:
                if chunk.id:
                    attributes["gen_ai.response.id"] = chunk.id
                if chunk.model:
                    attributes["gen_ai.response.model"] = chunk.model
            span.set_many(attributes)
        stream.when_over(_ends_with_stream(span))

    def _close_attempt(self, span: Span, response: Response) -> None:
        """The end of a whole answer's attempt: what the answer says, then the span's end."""
        if span.recording:
            span.set_many(genai.response_attributes(response))
            if self._tracer.capture_content:
                span.set_many(genai.output_content(response))
        span.end()

    async def count_tokens(self, call: Call, deployments: list[Deployment]) -> int | None:
        """The exact input tokens of ``call`` from the first of ``deployments`` whose provider
        can count them (an in-process ``count_tokens``, or an API's counting endpoint, asked
        under the provider's clocks); None when none can. Raises a sanitised
        :class:`GatewayError` when the counting upstream fails."""
        for deployment in deployments:
            capabilities = self._capabilities[deployment.provider]
            if capabilities.count_tokens is not None:
                return int(capabilities.count_tokens(call, deployment.model))
            counter, provider = capabilities.token_counter, capabilities.http
            if counter is not None and provider is not None:
                try:
                    return await self._count(provider, counter, call, deployment)
                except GatewayError as error:
                    self._fail(deployment.provider, error)
                    raise
        return None

    async def _count(
        self, provider: HttpProvider, counter: CountsTokens, call: Call, deployment: Deployment
    ) -> int:
        request = counter.count_tokens_request(call, deployment.model)
        clocks = UpstreamClocks(provider.config.timeouts)
        try:
            with clocks:
                status, headers, body = await self._transport.request(provider, request)
        except TimeoutError:
            raise clocks.expired(provider.name) from None
        finally:
            clocks.close()
        if status >= 300:
            raise provider.parse_error(status, headers, body)
        return int(counter.parse_token_count(body))

    def _pick(self, deployments: list[Deployment]) -> Deployment:
        if len(deployments) == 1:
            return deployments[0]
        if not deployments:
            raise NoReadyDeployment(
                "no ready deployment for this model (check provider credentials and health)"
            )
        weights = [d.weight for d in deployments]
        return self._rng.choices(deployments, weights=weights)[0]

    def _fail(self, provider: str, error: GatewayError) -> None:
        """Sanitise ``error`` in place (no secrets, bounded lengths: see
        :func:`~proxy.core.redact.sanitise_error`) and report it."""
        sanitise_error(error, self._redactor)
        self._on_error(provider, error)

    async def _embed(
        self,
        provider: Provider,
        capabilities: Capabilities,
        call: Call,
        deployment: Deployment,
        clocks: UpstreamClocks,
    ) -> Embeddings:
        """The vectors of an embeddings call: in-process, or from the provider's requests
        (sent together when it needs several, e.g. one per text)."""
        started = time.perf_counter()
        embedder, http = capabilities.embedder, capabilities.http
        try:
            with clocks:
                if capabilities.embed is not None:
                    return await capabilities.embed(call, deployment.model)
                assert embedder is not None  # the caller checked `embeds`
                assert http is not None  # an embedder is reached over HTTP
                requests = embedder.build_embeddings(call, deployment.model)
                if len(requests) == 1:
                    answers = [await self._transport.request(http, requests[0])]
                else:
                    gathered = await asyncio.gather(
                        *(self._transport.request(http, request) for request in requests),
                        return_exceptions=True,
                    )
                    answers = []
                    for answer in gathered:
                        if isinstance(answer, BaseException):
                            raise answer
                        answers.append(answer)
        except TimeoutError:
            raise clocks.expired(provider.name) from None
        finally:
            call.timings.upstream_wait += time.perf_counter() - started
        for status, headers, body in answers:
            if status >= 300:
                raise http.parse_error(status, headers, body)
        return embedder.parse_embeddings([body for _, _, body in answers], call, deployment.model)

    async def _media(
        self,
        provider: Provider,
        capabilities: Capabilities,
        call: Call,
        deployment: Deployment,
        clocks: UpstreamClocks,
        span: Span,
    ) -> MediaAnswer | tuple[str, UpstreamStream]:
        """The answer of a media call: in-process, or from the provider's one request; a
        streamed one (``call.stream``) as its content type and its primed stream, whose chunks
        carry the answer's bytes as they came (:attr:`~proxy.core.reply.Chunk.media`). A
        provider whose upstream does not stream media (no
        :class:`~proxy.providers.base.StreamsMedia`) answers speech's audio whole and refuses
        any other streamed call (:func:`refuse_whole_stream`)."""
        started = time.perf_counter()
        server, http = capabilities.media_server, capabilities.http
        answer: MediaAnswer | MediaStream
        try:
            with clocks:
                if capabilities.media is not None:
                    answer = await capabilities.media(call, deployment.model)
                else:
                    assert server is not None  # the caller checked the operation
                    assert http is not None  # a media server is reached over HTTP
                    meter = capabilities.media_meter
                    request = server.build_media(call, deployment.model)
                    if call.stream and meter is not None:
                        model = deployment.model
                        answer = await self._transport.open_media_stream(
                            http, request, lambda headers: meter(headers, call, model)
                        )
                    else:
                        status, headers, body = await self._transport.request(http, request)
                        if status >= 300:
                            raise http.parse_error(status, headers, body)
                        answer = server.parse_media(headers, body, call, deployment.model)
        except TimeoutError:
            raise clocks.expired(provider.name) from None
        finally:
            call.timings.upstream_wait += time.perf_counter() - started
        if isinstance(answer, MediaAnswer):
            return answer
        stream = await self._primed(answer.pieces, clocks, call, deployment, span)
        return answer.content_type, stream

    async def _local(
        self,
        provider: LocalProvider,
        call: Call,
        deployment: Deployment,
        clocks: UpstreamClocks,
        span: Span,
    ) -> Response | UpstreamStream:
        started = time.perf_counter()
        try:
            with clocks:
                result = await provider.complete(call, deployment.model)
        except TimeoutError:
            raise clocks.expired(provider.name) from None
        finally:
            call.timings.upstream_wait += time.perf_counter() - started
        if isinstance(result, Response):
            return result
        return await self._primed(result, clocks, call, deployment, span)

    async def _http(
        self,
        capabilities: Capabilities,
        provider: HttpProvider,
        call: Call,
        deployment: Deployment,
        clocks: UpstreamClocks,
        span: Span,
    ) -> Response | UpstreamStream:
        request = provider.build_request(call, deployment.model)
        if self._traced:
            if span.recording:
                span.set_many(genai.server_attributes(request.url))
            if deployment.provider in self._propagating:
                traced = dict(request.headers)  # a provider may share its headers
                self._tracer.inject(span, traced)
                request.headers = traced
        if self._on_dropped is not None:
            dropped_fields = capabilities.dropped_fields
            dropped = dropped_fields(call, deployment.model) if dropped_fields else []
            if dropped:
                self._on_dropped(provider.name, deployment.model, dropped)
        started = time.perf_counter()
        try:
            with clocks:
                if call.stream:
                    chunks = await self._transport.open_stream(provider, request)
                else:
                    status, headers, body = await self._transport.request(provider, request)
        except TimeoutError:
            raise clocks.expired(provider.name) from None
        finally:
            call.timings.upstream_wait += time.perf_counter() - started
        if call.stream:
            return await self._primed(chunks, clocks, call, deployment, span)
        if status >= 300:
            raise provider.parse_error(status, headers, body)
        return provider.parse_response(body, deployment.model)

    async def _primed(
        self,
        chunks: AsyncIterator[Chunk] | AsyncIterator[list[Chunk | RawFrames | None]],
        clocks: UpstreamClocks,
        call: Call,
        deployment: Deployment,
        span: Span,
    ) -> UpstreamStream:
        on_error = _failing_span(self._fail, span) if self._traced else self._fail
        stream = UpstreamStream(
            chunks, clocks, call.timings, deployment.provider, on_error, deployment.model
        )
        try:
            await stream.prime()
        except BaseException:
            await stream.aclose()
            raise
        return stream


def _ends_with_stream(span: Span) -> Callable[[Usage | None, int], None]:
    """The end hook of a streamed attempt: its usage on the span, then the span's end."""

    def over(usage: Usage | None, generated: int) -> None:
        if usage is not None and span.recording:
            span.set_many(genai.usage_attributes(usage))
        span.end()

    return over


def _failing_span(on_error: ErrorHook, span: Span) -> ErrorHook:
    """``on_error`` that also marks a streamed attempt's span failed (with the error's code)
    when its stream fails after the first chunk, before the span ends with the stream."""

    def failed(provider: str, error: GatewayError) -> None:
        on_error(provider, error)
        span.fail(error.code)

    return failed


def refuse_whole_stream(provider: str, call: Call) -> None:
    """Raise a 400 for a streamed media ``call`` that ``provider`` can only answer whole,
    unless it is speech's audio (the same bytes, sent whole)."""
    media = call.media
    assert media is not None  # a media call
    if media.operation == "speech" and media.fields.get("stream_format", "audio") == "audio":
        return
    param = "stream_format" if media.operation == "speech" else "stream"
    raise BadRequest(
        f"provider {provider!r} answers {media.operation} whole: it cannot stream it",
        param=param,
        code="unsupported_operation",
    )
