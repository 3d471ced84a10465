"""A fake OpenAI-compatible server: real HTTP on 127.0.0.1, in a background thread.

It answers ``POST /v1/embeddings`` and ``POST /v1/chat/completions`` in the OpenAI wire format
and records every request (path, headers, raw body, client port) so a test can assert what left
the machine. What it answers is switchable: ``behaviour`` applies to every request, and
``script`` (a list) is consumed first, one behaviour per request.

Behaviours for both endpoints: ``ok``, ``http_500`` (its message is ``error_message``),
``http_429`` (with ``Retry-After: retry_after`` if set), ``http_401`` (an error that
echoes the Authorization header back), ``http_400_echo`` (an error that echoes the request
body), ``hang`` (no reply until ``hang_seconds`` pass or the server stops), ``drop`` (the connection
is closed without a reply), ``malformed_json``,
``html`` (a 502 proxy page), ``error_200`` (HTTP 200 carrying an ``error`` object, as
OpenRouter does). Embeddings only: ``reordered`` (data in reverse, right indices),
``wrong_dim``, ``nan``, ``wrong_count``, ``missing_data``, ``string_values``. Chat only:
``fenced`` (a correct reply inside a Markdown code fence), ``missing_choices``, ``empty_content``,
``prose``, ``non_numeric_score``, ``out_of_range_score``, ``nan_score``, ``missing_id``,
``duplicate_id``, ``unknown_id``. Chat whose user message is not a JSON object is an extraction
(:meth:`FakeOpenAI._extract`): ``ok``, ``fenced``, ``prose``, ``missing_thoughts``, ``bad_kind``,
``bad_lines``.

An ``ok`` embedding is :class:`~mentis.providers.embed.HashEmbedder`'s vector of the text, so texts sharing
words are close. An ``ok`` rerank score is ``scores[id]`` if set, else the share of the query's
words found in the candidate's text.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mentis.providers.embed import HashEmbedder

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int

    def json(self) -> Any:
        return json.loads(self.body)


Reply = tuple[int, dict[str, str], bytes]


class FakeOpenAI:
    """Start with ``with FakeOpenAI() as fake:``; ``fake.url`` is the base URL (ends ``/v1``)."""

    def __init__(self, dim: int = 8, hang_seconds: float = 5.0) -> None:
        self.dim = dim
        self.hang_seconds = hang_seconds
        self.behaviour = "ok"
        self.script: list[str] = []
        self.retry_after: str | None = None
        self.error_message = "upstream model crashed"
        self.scores: dict[str, Any] = {}
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._embedder = HashEmbedder(dim)
        self.errors: list[BaseException] = []
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sent(self) -> str:
        """Everything received, headers and bodies, as one string (for "did X leave?" checks)."""
        with self._lock:
            return "\n".join(
                "\n".join(f"{k}: {v}" for k, v in r.headers.items()) + "\n" + r.path + "\n" + r.body.decode()
                for r in self.requests
            )

    def bodies(self) -> list[Any]:
        with self._lock:
            return [r.json() for r in self.requests]

    # --- replies -----------------------------------------------------------------------------

    def _next_behaviour(self) -> str:
        with self._lock:
            return self.script.pop(0) if self.script else self.behaviour

    def reply(self, request: Received) -> Reply | None:
        with self._lock:
            self.requests.append(request)
        behaviour = self._next_behaviour()
        if behaviour == "hang":
            self._release.wait(self.hang_seconds)
            return None
        if behaviour == "drop":
            return None
        common = self._common(behaviour, request)
        if common is not None:
            return common
        if request.path == "/v1/embeddings":
            return self._embeddings(behaviour, request.json())
        if request.path == "/v1/chat/completions":
            return self._chat(behaviour, request.json())
        return _json(404, {"error": {"message": f"no route {request.path}"}})

    def _common(self, behaviour: str, request: Received) -> Reply | None:
        if behaviour == "http_500":
            return _json(500, {"error": {"message": self.error_message, "code": 500}})
        if behaviour == "http_429":
            headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            return _json(429, {"error": {"message": "rate limited, slow down"}}, headers)
        if behaviour == "http_401":
            auth = request.headers.get("authorization", "")
            return _json(401, {"error": {"message": f"invalid credentials: {auth}"}})
        if behaviour == "http_400_echo":
            return _json(400, {"error": {"message": f"bad request: {request.body.decode()}"}})
        if behaviour == "error_200":
            return _json(200, {"error": {"message": "No endpoints found for this model", "code": 404}})
        if behaviour == "malformed_json":
            return 200, {"Content-Type": "application/json"}, b'{"data": [{"embedding": [0.1,'
        if behaviour == "html":
            return 502, {"Content-Type": "text/html"}, b"<html><body>502 Bad Gateway</body></html>"
        return None

    def _embeddings(self, behaviour: str, body: dict[str, Any]) -> Reply:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = self._embedder.embed(texts).tolist()
        data: list[dict[str, Any]] = [
            {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
        ]
        if behaviour == "reordered":
            data.reverse()
        elif behaviour == "wrong_dim":
            for item in data:
                item["embedding"] = item["embedding"] + [0.0]
        elif behaviour == "nan":
            data[0]["embedding"][0] = float("nan")
        elif behaviour == "wrong_count":
            data = data[:-1] if len(data) > 1 else data + data
        elif behaviour == "string_values":
            data[0]["embedding"][0] = "0.5"
        elif behaviour == "missing_data":
            return _json(200, {"object": "list", "model": body["model"]})
        elif behaviour != "ok":
            raise ValueError(f"unknown embeddings behaviour {behaviour!r}")
        usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
        return _json(200, {"object": "list", "data": data, "model": body["model"], "usage": usage})

    def _chat(self, behaviour: str, body: dict[str, Any]) -> Reply:
        if not body["messages"][-1]["content"].startswith("{"):
            return self._extract(behaviour, body)
        user = json.loads(body["messages"][-1]["content"])
        query_words = set(_WORD.findall(user["query"].lower()))
        entries: list[dict[str, Any]] = []
        for candidate in user["candidates"]:
            words = set(_WORD.findall(candidate["text"].lower()))
            overlap = len(query_words & words) / len(query_words) if query_words else 0.0
            entries.append({"id": candidate["id"], "score": self.scores.get(candidate["id"], overlap)})
        content: str | None
        if behaviour == "missing_choices":
            return _json(200, {"id": "chatcmpl-fake", "object": "chat.completion", "choices": []})
        if behaviour == "non_numeric_score":
            entries[0]["score"] = "very useful"
        elif behaviour == "out_of_range_score":
            entries[0]["score"] = 7
        elif behaviour == "nan_score":
            entries[0]["score"] = float("nan")
        elif behaviour == "missing_id":
            entries.pop()
        elif behaviour == "duplicate_id":
            entries.append(dict(entries[0]))
        elif behaviour == "unknown_id":
            entries[0]["id"] = "task-that-was-never-sent"
        elif behaviour not in ("ok", "fenced", "empty_content", "prose"):
            raise ValueError(f"unknown chat behaviour {behaviour!r}")
        content = json.dumps({"scores": entries})
        if behaviour == "fenced":
            content = f"```json\n{content}\n```"
        elif behaviour == "empty_content":
            content = None
        elif behaviour == "prose":
            content = "The first candidate looks the most useful to me."
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        return _json(
            200,
            {"id": "chatcmpl-fake", "object": "chat.completion", "model": body["model"], "choices": [choice]},
        )

    def _extract(self, behaviour: str, body: dict[str, Any]) -> Reply:
        """An extraction (``mentis propose transcript --llm``): ``ok`` proposes, for each line of
        the chunk whose text says "decided", "found", "must" or "learned", a decision, finding,
        constraint or lesson quoting its first sentence, with that line's number."""
        kinds = {"decided": "decision", "found": "finding", "must": "constraint", "learned": "lesson"}
        thoughts = []
        for line in body["messages"][-1]["content"].splitlines():
            number, _, text = line.partition(" ")
            kind = next((k for word, k in kinds.items() if word in text.lower()), None)
            if kind is not None and number.isdigit():
                n = int(number)
                thoughts.append(
                    {
                        "kind": kind,
                        "content": text.split(": ", 1)[-1].split(". ")[0],
                        "from_line": n,
                        "to_line": n,
                    }
                )
        if behaviour == "bad_kind" and thoughts:
            thoughts[0]["kind"] = "gossip"
        elif behaviour == "bad_lines" and thoughts:
            thoughts[0]["from_line"] = 10**6
        elif behaviour not in ("ok", "fenced", "prose", "missing_thoughts"):
            raise ValueError(f"unknown extraction behaviour {behaviour!r}")
        content = json.dumps({"thoughts": thoughts})
        if behaviour == "fenced":
            content = f"```json\n{content}\n```"
        elif behaviour == "prose":
            content = "Here are the decisions I found: the team decided to round to cents."
        elif behaviour == "missing_thoughts":
            content = json.dumps({"decisions": thoughts})
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        prompt = sum(len(m["content"]) for m in body["messages"]) // 4
        usage = {"prompt_tokens": prompt, "completion_tokens": len(content) // 4}
        reply = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [choice],
        }
        return _json(200, {**reply, "usage": usage})


def _json(status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(payload).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a hung or kept-alive handler never delays stop()

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if error is not None and not isinstance(error, OSError):
            self.fake.errors.append(error)  # a bug in the fake: the fixture fails the test


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so tests can see connections reused
    timeout = 10  # an idle kept-alive connection is dropped after this
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

    def do_POST(self) -> None:
        assert isinstance(self.server, _Server)
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        request = Received(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=self.rfile.read(length),
            client_port=self.client_address[1],
        )
        reply = fake.reply(request)
        if reply is None:  # hung or dropped: close the connection without answering
            self.close_connection = True
            return
        status, headers, body = reply
        try:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (timed out) first
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests assert on fake.requests, not on logs
