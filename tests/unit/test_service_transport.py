"""The service's side of streaming: stdout cut into pieces in order, and which passed
descriptors a request may name."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from tht.commands.context import CommandContext
from tht.errors import InvalidInput
from tht.service import client
from tht.service.server import CHUNK_CHARS, _Chunks, _passed_files


def test_stdout_is_sent_in_pieces_of_the_chunk_size_in_order_and_the_rest_at_the_end():
    sent: list[dict] = []
    output = _Chunks(sent.append)
    output.write("a" * 10)
    assert sent == []  # small writes wait for a piece to fill
    big = "".join(chr(ord("b") + n % 20) for n in range(3 * CHUNK_CHARS + 5))  # one batch
    output.write(big)
    output.write("z")
    assert [len(event["stdout"]) for event in sent] == [CHUNK_CHARS] * 3
    rest = output.rest()
    assert "".join(event["stdout"] for event in sent) + rest == "a" * 10 + big + "z"
    assert len(rest) == 16 and output.rest() == ""


def test_a_file_names_a_descriptor_passed_on_the_socket_never_one_over_http():
    files = {"/data/cards.jsonl": {"fd": 1}, "/data/acme.yaml": {"data": "eA=="}}
    assert _passed_files(files, [7, 9]) == {
        "/data/cards.jsonl": {"fd": 9},
        "/data/acme.yaml": {"data": "eA=="},
    }
    with pytest.raises(InvalidInput, match="only on the Unix socket"):
        _passed_files(files, None)  # over HTTP: 1 would be the service's own stdout
    for index in (2, -1, "0", True):
        with pytest.raises(InvalidInput, match="names no passed descriptor"):
            _passed_files({"/x": {"fd": index}}, [7, 9])
    assert _passed_files({"/x": {"data": ""}}, None) == {"/x": {"data": ""}}


def test_a_passed_file_is_read_from_its_start_by_each_reader_and_stays_open(tmp_path):
    path = tmp_path / "cards.jsonl"
    path.write_bytes(b"one\ntwo\nthree\n")
    fd = os.open(path, os.O_RDONLY)
    folder = os.open(tmp_path, os.O_RDONLY)
    try:
        files = {"/in/cards.jsonl": {"fd": fd}, "/in/folder": {"fd": folder}}
        context = CommandContext(cwd="/in", files=files)
        open_file = context.passed_file("cards.jsonl")  # relative to the client's directory
        assert open_file is not None
        with open_file() as first, open_file() as second:  # the two passes may overlap
            assert first.readline() == b"one\n"
            assert second.read() == b"one\ntwo\nthree\n"
            assert first.read() == b"two\nthree\n"
        assert context.read_bytes("cards.jsonl", 5) == b"one\ntw"
        with pytest.raises(OSError, match="not a regular file"):
            context.passed_file("folder")
        os.fstat(fd)  # closing the readers left it to the service
    finally:
        os.close(fd)
        os.close(folder)


def test_a_request_sent_whole_with_its_descriptor_gets_the_answer_of_a_service_that_closed(
    monkeypatch,
):
    """The client passes an import's file with the request's first bytes; when those
    are the whole request, a quick service (a refusal) reads it, answers and closes
    before the client goes on. The client then sent nothing more, yet ``sendall(b"")``
    still calls send(): EPIPE, and `service_lost` instead of the refusal (a flaky
    `test_import_and_export_through_the_service_respect_capabilities`)."""
    ours, services = socket.socketpair()
    answered = threading.Event()

    def service() -> None:
        received, fds = b"", []
        while not received.endswith(b"\n"):
            data, passed, _, _ = socket.recv_fds(services, 1 << 16, 4)
            received += data
            fds += passed
        for fd in fds:
            os.close(fd)
        services.sendall(json.dumps({"exit": 5, "stdout": "refused"}).encode() + b"\n")
        services.close()
        answered.set()

    send_fds = socket.send_fds

    def send_then_let_the_service_close(sock, buffers, fds):
        sent = send_fds(sock, buffers, fds)
        assert answered.wait(10)  # the service is gone before the client goes on
        return sent

    monkeypatch.setattr(socket, "send_fds", send_then_let_the_service_close)
    thread = threading.Thread(target=service)
    thread.start()
    with open(os.devnull, "rb") as passed:
        request = {
            "command": "memory.import",
            "args": {"file": "x.jsonl"},
            "fds": [passed.fileno()],
        }
        assert client._exchange(ours, request, lambda text: None) == (5, "refused")
    thread.join()
