"""proxy/providers/openai/batches.py: OpenAI's and Azure's batch APIs as requests sent through
a recording ``send`` — the upload and create calls of a submission (lines under their custom
ids, the model set to the upstream name or the Azure deployment), the poll's outcomes, the
cancel, and the result files' lines as results (a line never run: no body; an unreadable
answer: a lasting error)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from proxy.providers.azure import AzureConfig, AzureProvider
from proxy.providers.base import BatchAPIError, HttpRequest, NativeBatchState, NativeResult
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider
from tests.proxy.providers.fakes.batch_send import Recorder


def openai_provider() -> OpenAIProvider:
    return OpenAIProvider("up", OpenAIConfig(base_url="http://up.test/v1", api_key="key-1"))


def azure_provider() -> AzureProvider:
    config = AzureConfig(
        endpoint="http://az.test", api_key="key-2", deployments={"gpt": "gpt-global-batch"}
    )
    return AzureProvider("az", config)


def uploaded_lines(request: HttpRequest) -> list[dict[str, object]]:
    body = request.body.decode()
    start = body.index("\r\n\r\n", body.index('name="file"')) + 4
    content = body[start : body.rindex("\r\n--")]
    return [json.loads(line) for line in content.splitlines()]


async def test_an_openai_submission_uploads_the_lines_then_creates_the_batch() -> None:
    send = Recorder({"/files": b'{"id": "file-1"}', "/batches": b'{"id": "batch-1"}'})
    lines = [("l0", {"model": "alias", "messages": []}), ("l1", {"messages": []})]
    got = await openai_provider().submit_batch(send, "/v1/chat/completions", "gpt-x", lines)
    assert got == "batch-1"
    upload, create = send.sent
    assert upload.url == "http://up.test/v1/files"
    assert upload.headers["authorization"] == "Bearer key-1"
    assert upload.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert b'name="purpose"\r\n\r\nbatch\r\n' in upload.body
    assert uploaded_lines(upload) == [
        {
            "custom_id": "l0",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt-x", "messages": []},
        },
        {
            "custom_id": "l1",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": [], "model": "gpt-x"},
        },
    ]
    assert create.url == "http://up.test/v1/batches"
    assert json.loads(create.body) == {
        "input_file_id": "file-1",
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }


async def test_an_azure_submission_uses_azures_urls_key_endpoint_names_and_deployment() -> None:
    send = Recorder({"/files": b'{"id": "file-1"}', "/batches": b'{"id": "batch-1"}'})
    provider = azure_provider()
    assert provider.batch_endpoints == {"/v1/chat/completions", "/v1/embeddings"}
    await provider.submit_batch(send, "/v1/chat/completions", "gpt", [("l0", {"messages": []})])
    upload, create = send.sent
    assert upload.url == "http://az.test/openai/files?api-version=2024-10-21"
    assert create.url == "http://az.test/openai/batches?api-version=2024-10-21"
    assert upload.headers["api-key"] == "key-2"
    assert "authorization" not in upload.headers
    ((line),) = uploaded_lines(upload)
    assert (line["url"], line["body"]["model"]) == ("/chat/completions", "gpt-global-batch")
    assert json.loads(create.body)["endpoint"] == "/chat/completions"


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ("validating", None),
        ("in_progress", None),
        ("finalizing", None),
        ("cancelling", None),
        ("completed", "completed"),
        ("failed", "failed"),
        ("expired", "expired"),
        ("cancelled", "cancelled"),
    ],
)
async def test_a_poll_says_whether_and_how_the_batch_ended(
    status: str, outcome: str | None
) -> None:
    answer = {
        "status": status,
        "output_file_id": "file-out",
        "error_file_id": None,
        "errors": {"data": [{"code": "bad_line", "message": "line 2 is bad"}]},
    }
    send = Recorder({"/batches/batch-1": json.dumps(answer).encode()})
    state = await openai_provider().poll_batch(send, "batch-1")
    assert state.outcome == outcome
    if outcome is not None:
        assert state.results == ("file-out",)
        assert state.errors == (("bad_line", "line 2 is bad"),)
    ((request),) = send.sent
    assert (request.method, request.url) == ("GET", "http://up.test/v1/batches/batch-1")


async def test_a_cancel_is_a_post_to_the_batchs_cancel() -> None:
    send = Recorder({"/cancel": b"{}"})
    await azure_provider().cancel_batch(send, "batch-1")
    ((request),) = send.sent
    assert request.url == "http://az.test/openai/batches/batch-1/cancel?api-version=2024-10-21"


async def test_result_files_become_results_whatever_happened_to_each_line() -> None:
    output = b"\n".join(
        json.dumps(line).encode()
        for line in (
            {
                "id": "r",
                "custom_id": "l0",
                "error": None,
                "response": {"status_code": 200, "request_id": "x", "body": {"ok": True}},
            },
            {
                "id": "r",
                "custom_id": "l1",
                "error": None,
                "response": {"status_code": 400, "request_id": "x", "body": {"error": {}}},
            },
        )
    )
    errors = b"\n".join(
        json.dumps(line).encode()
        for line in (
            {"custom_id": "l2", "response": None, "error": {"code": "batch_expired"}},
            {"custom_id": "l3", "response": None, "error": {"code": "batch_cancelled"}},
            {"custom_id": "l4", "response": None, "error": {"code": "odd", "message": "m"}},
        )
    )
    send = Recorder({"/file-out/content": output + b"\n\n", "/file-err/content": errors})
    state = NativeBatchState("completed", results=("file-out", "file-err"))
    got = [r async for r in openai_provider().batch_results(send.read, state)]
    assert got[:4] == [
        NativeResult("l0", 200, b'{"ok": true}', "succeeded"),
        NativeResult("l1", 400, b'{"error": {}}', "errored"),
        NativeResult("l2", 0, None, "expired"),
        NativeResult("l3", 0, None, "cancelled"),
    ]
    odd = got[4]
    assert (odd.custom_id, odd.status, odd.outcome) == ("l4", 500, "errored")
    assert json.loads(odd.body or b"")["error"]["code"] == "odd"


@pytest.mark.parametrize(
    ("call", "answers"),
    [
        (lambda p, s: p.submit_batch(s, "/v1/embeddings", "m", [("l0", {})]), {"/files": b"[]"}),
        (lambda p, s: p.poll_batch(s, "b"), {"/batches/b": b'{"id": "b"}'}),
    ],
)
async def test_an_answer_that_is_not_the_batch_apis_is_a_lasting_error(
    call: Callable[..., object], answers: dict[str, bytes]
) -> None:
    with pytest.raises(BatchAPIError) as raised:
        await call(openai_provider(), Recorder(answers))  # type: ignore[misc]
    assert raised.value.lasting


@pytest.mark.parametrize(
    ("status", "lasting"), [(None, False), (400, True), (401, True), (429, False), (503, False)]
)
def test_only_a_refusal_that_asking_again_cannot_change_lasts(
    status: int | None, lasting: bool
) -> None:
    assert BatchAPIError("x", status).lasting is lasting
