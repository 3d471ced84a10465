"""Concurrent writers against the model's own limit, on the same texts in the same run.

    .venv/bin/python bench/writers.py [--texts 96] [--runs 3] [--writers 8]
                                      [--out bench/results/writers.json]

Each run measures, on one set of ~180-token attempt texts (bench/corpus.py's generator):

1. the model alone (``LocalEmbedder``, in this process): one text per call, then batches of 2, 4,
   8 and 16, in texts/s and CPU ms per text, once before the writers and once after (the mean
   of the two, since the load drifts);
2. one writer: ``Memory.record_attempt`` with the real model on a fresh SQLite file, each record
   next to the embedding of its own text alone, p50 of each (target: record ≤ embedding + 3 ms);
3. ``--writers`` HTTP writers: one ``mentis serve --http`` process, one write token and one REST
   client each, all recording the texts (each writer a share) at once, in attempts/s; also with
   ``MENTIS_EMBED_BATCH_MAX=1`` (one model thread, no batching) to show what batching adds;
4. ``--writers`` stdio processes (``python -m mentis serve``, the official MCP client) on one
   SQLite file, at once, with the cross-process model lock (default) and without it
   (``MENTIS_EMBED_LOCK=0``).

Writers start together after a warm-up record each (model loaded, first run paid), and the rate
is texts / (last finish - common start). The target is writers ≥ 0.9 × the best batched rate of
step 1 in the same run. The load average is recorded beside every number; the JSON keeps every
run, the table shows medians with min-max.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from corpus import SEED, Corpus, Workload, attempt_text_of
from mentis.api.attempts import RecordAttemptInput
from mentis.config import Settings
from mentis.http import HttpConfig, build_app, listen, server
from mentis.providers.embed.batcher import DEFAULT_MAX_BATCH, DEFAULT_WINDOW_MS
from mentis.providers.embed.local import LocalEmbedder
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore

BATCHES = (2, 4, 8, 16)
RESULTS = Path(__file__).parent / "results"


def load() -> float:
    return round(os.getloadavg()[0], 2)


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (all their threads), from /proc."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def child_pids() -> list[int]:
    """This process's children (the stdio servers the MCP client started)."""
    me = str(os.getpid())
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == me:
                    out.append(int(entry.name))
    return out


def workload(n: int, stream: int) -> list[RecordAttemptInput]:
    wl = Workload(Corpus(SEED, stream), 1000)
    return [wl.record_input() for _ in range(n)]


def model_alone(model: LocalEmbedder, texts: list[str]) -> dict[str, Any]:
    model.embed(texts[:4])  # warm
    out: dict[str, Any] = {}
    for size in (1, *BATCHES):
        before = load()
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(0, len(texts), size):
            model.embed(texts[i : i + size])
        rate = len(texts) / (time.perf_counter() - start)
        cpu_ms = (time.process_time() - cpu) * 1000 / len(texts)
        out[f"batch_{size}"] = {
            "texts_per_s": round(rate, 1),
            "cpu_ms_per_text": round(cpu_ms, 2),
            "load": [before, load()],
        }
    return out


def single_writer(model: LocalEmbedder, reqs: list[RecordAttemptInput], tmp: Path) -> dict[str, Any]:
    db = tmp / "single.db"
    memory = Memory.open(Settings(home=tmp, db_path=db), model)
    caller = Caller(agent_id="bench-writer")
    embed_ms: list[float] = []
    record_ms: list[float] = []
    embed_cpu = record_cpu = 0.0
    before = load()
    try:
        memory.record_attempt(caller, reqs[0])  # warm: the model thread and the store
        for req in reqs:
            text = attempt_text_of(req)
            start, cpu = time.perf_counter(), time.process_time()
            model.embed([text])
            embed_ms.append((time.perf_counter() - start) * 1000)
            embed_cpu += time.process_time() - cpu
            start, cpu = time.perf_counter(), time.process_time()
            memory.record_attempt(caller, req)
            record_ms.append((time.perf_counter() - start) * 1000)
            record_cpu += time.process_time() - cpu
    finally:
        memory.close()
    embed_p50, record_p50 = statistics.median(embed_ms), statistics.median(record_ms)
    return {
        "embed_p50_ms": round(embed_p50, 2),
        "record_p50_ms": round(record_p50, 2),
        "overhead_ms": round(record_p50 - embed_p50, 2),
        "cpu_overhead_ms_mean": round((record_cpu - embed_cpu) * 1000 / len(reqs), 2),
        "load": [before, load()],
    }


def serve(db: Path) -> None:
    """The server process (``--serve``): print the port, then serve until SIGTERM."""
    memory = Memory.open(Settings.from_env(db))
    tokens = TokenStore(db)
    config = HttpConfig(port=0, rate_per_second=1e9, rate_burst=1_000_000_000, request_timeout_s=120)
    sock = listen(config)
    print(sock.getsockname()[1], flush=True)
    server(build_app(memory, tokens, config), config).run(sockets=[sock])
    memory.close()
    tokens.close()


def body(req: RecordAttemptInput) -> dict[str, Any]:
    return req.model_dump(mode="json", exclude_none=True)


def shares(reqs: list[RecordAttemptInput], writers: int) -> list[list[RecordAttemptInput]]:
    return [reqs[k::writers] for k in range(writers)]


async def timed_writers(
    writers: int,
    warm: Callable[[int], Any],
    write: Callable[[int], Any],
    total: int,
    pids: Callable[[], list[int]],
) -> dict[str, Any]:
    async with anyio.create_task_group() as tg:
        for k in range(writers):
            tg.start_soon(warm, k)
    servers = pids()
    before = load()
    start, cpu = time.perf_counter(), cpu_seconds(servers)
    async with anyio.create_task_group() as tg:
        for k in range(writers):
            tg.start_soon(write, k)
    elapsed = time.perf_counter() - start
    cpu_ms = (cpu_seconds(servers) - cpu) * 1000 / total
    return {
        "attempts_per_s": round(total / elapsed, 1),
        "server_cpu_ms_per_attempt": round(cpu_ms, 2),
        "seconds": round(elapsed, 2),
        "load": [before, load()],
    }


def http_writers(
    reqs: list[RecordAttemptInput], writers: int, tmp: Path, env: dict[str, str]
) -> dict[str, Any]:
    db = tmp / f"http-{time.monotonic_ns()}.db"
    tokens = TokenStore(db)
    repos = tuple(sorted({r.repository for r in reqs}))
    keys = [tokens.create(scope="write", repositories=repos, agent=f"writer-{k}")[0] for k in range(writers)]
    tokens.close()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(db)],
        env={**os.environ, **env, "MENTIS_DB": str(db), "MENTIS_EMBEDDER": "local"},
        stdout=subprocess.PIPE,
        text=True,
    )
    parts = shares(reqs, writers)
    try:
        assert proc.stdout is not None
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
        clients = [
            httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
            for key in keys
        ]

        async def post(k: int, req: RecordAttemptInput) -> None:
            answer = await clients[k].post("/v1/record_attempt", json=body(req))
            if answer.status_code != 200:
                raise RuntimeError(f"writer {k}: {answer.status_code} {answer.text[:300]}")

        async def warm(k: int) -> None:
            await post(k, parts[k][0].model_copy(update={"task_id": f"warm-{k}"}))

        async def write(k: int) -> None:
            for req in parts[k]:
                await post(k, req)

        async def go() -> dict[str, Any]:
            with anyio.fail_after(600):
                try:
                    return await timed_writers(writers, warm, write, len(reqs), lambda: [proc.pid])
                finally:
                    for client in clients:
                        await client.aclose()

        return anyio.run(go)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def stdio_writers(
    reqs: list[RecordAttemptInput], writers: int, tmp: Path, env: dict[str, str]
) -> dict[str, Any]:
    db = tmp / f"stdio-{time.monotonic_ns()}.db"
    Memory.open(Settings(home=tmp, db_path=db)).close()  # create the store once, not 8 at a time
    parts = shares(reqs, writers)

    async def go() -> dict[str, Any]:
        with anyio.fail_after(900):
            async with contextlib.AsyncExitStack() as stack:
                clients = []
                for k in range(writers):
                    child_env = {
                        **os.environ,
                        **env,
                        "MENTIS_DB": str(db),
                        "MENTIS_EMBEDDER": "local",
                        "MENTIS_AGENT_ID": f"writer-{k}",
                    }
                    params = StdioServerParameters(
                        command=sys.executable, args=["-m", "mentis", "serve"], env=child_env
                    )
                    quiet = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - servers' banners
                    clients.append(
                        await stack.enter_async_context(Client(stdio_client(params, errlog=quiet)))
                    )

                async def call(k: int, req: RecordAttemptInput) -> None:
                    out = await clients[k].call_tool("record_attempt", body(req))
                    if out.is_error:
                        raise RuntimeError(f"writer {k}: {out.content}")

                async def warm(k: int) -> None:
                    await call(k, parts[k][0].model_copy(update={"task_id": f"warm-{k}"}))

                async def write(k: int) -> None:
                    for req in parts[k]:
                        await call(k, req)

                return await timed_writers(writers, warm, write, len(reqs), child_pids)

    return anyio.run(go)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=96)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--skip", default="", help="comma list of: http_nobatch, stdio_nolock")
    parser.add_argument("--out", type=Path, default=RESULTS / "writers.json")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    skip = set(filter(None, args.skip.split(",")))
    model = LocalEmbedder.load()
    runs: list[dict[str, Any]] = []
    for run in range(args.runs):
        reqs = workload(args.texts, stream=run)
        texts = [attempt_text_of(r) for r in reqs]
        tokens = [len(e.ids) for e in model._tokenizer.encode_batch(texts)]
        with tempfile.TemporaryDirectory(prefix="mentis-writers-") as name:
            tmp = Path(name)
            result: dict[str, Any] = {"run": run, "tokens_median": statistics.median(tokens)}
            first = model_alone(model, texts)
            result["model"] = first
            best = max(v["texts_per_s"] for v in result["model"].values())
            result["model_best_texts_per_s"] = best
            best_cpu = min(v["cpu_ms_per_text"] for v in result["model"].values())
            result["model_best_cpu_ms_per_text"] = best_cpu
            result["single"] = single_writer(model, reqs, tmp)
            result["http"] = http_writers(reqs, args.writers, tmp, {})
            if "http_nobatch" not in skip:
                result["http_nobatch"] = http_writers(
                    reqs, args.writers, tmp, {"MENTIS_EMBED_BATCH_MAX": "1"}
                )
            result["stdio"] = stdio_writers(reqs, args.writers, tmp, {})
            if "stdio_nolock" not in skip:
                result["stdio_nolock"] = stdio_writers(reqs, args.writers, tmp, {"MENTIS_EMBED_LOCK": "0"})
            again = model_alone(model, texts)  # the load drifts: the model again, after the writers
            for size, part in first.items():
                part["texts_per_s"] = round((part["texts_per_s"] + again[size]["texts_per_s"]) / 2, 1)
                part["cpu_ms_per_text"] = round(
                    (part["cpu_ms_per_text"] + again[size]["cpu_ms_per_text"]) / 2, 2
                )
                part["load"] += again[size]["load"]
            best = result["model_best_texts_per_s"] = max(v["texts_per_s"] for v in first.values())
            best_cpu = result["model_best_cpu_ms_per_text"] = min(
                v["cpu_ms_per_text"] for v in first.values()
            )
            for key in ("http", "http_nobatch", "stdio", "stdio_nolock"):
                if key in result:
                    part = result[key]
                    part["ratio_to_best"] = round(part["attempts_per_s"] / best, 3)
                    part["cpu_ratio_to_best"] = round(best_cpu / part["server_cpu_ms_per_attempt"], 3)
        print(json.dumps(result), file=sys.stderr, flush=True)
        runs.append(result)

    def med(get: Callable[[dict[str, Any]], float]) -> dict[str, float]:
        return spread([get(r) for r in runs])

    summary: dict[str, Any] = {
        f"model_batch_{s}": med(lambda r, s=s: r["model"][f"batch_{s}"]["texts_per_s"]) for s in (1, *BATCHES)
    }
    for s in (1, *BATCHES):
        summary[f"model_batch_{s}_cpu_ms"] = med(lambda r, s=s: r["model"][f"batch_{s}"]["cpu_ms_per_text"])
    summary["model_best"] = med(lambda r: r["model_best_texts_per_s"])
    summary["model_best_cpu_ms"] = med(lambda r: r["model_best_cpu_ms_per_text"])
    summary["single_embed_p50_ms"] = med(lambda r: r["single"]["embed_p50_ms"])
    summary["single_record_p50_ms"] = med(lambda r: r["single"]["record_p50_ms"])
    summary["single_overhead_ms"] = med(lambda r: r["single"]["overhead_ms"])
    summary["single_cpu_overhead_ms"] = med(lambda r: r["single"]["cpu_overhead_ms_mean"])
    for key in ("http", "http_nobatch", "stdio", "stdio_nolock"):
        if key in runs[0]:
            summary[f"{key}_attempts_per_s"] = med(lambda r, k=key: r[k]["attempts_per_s"])
            summary[f"{key}_ratio"] = med(lambda r, k=key: r[k]["ratio_to_best"])
            summary[f"{key}_cpu_ms"] = med(lambda r, k=key: r[k]["server_cpu_ms_per_attempt"])
            summary[f"{key}_cpu_ratio"] = med(lambda r, k=key: r[k]["cpu_ratio_to_best"])
    loads = [v for r in runs for part in r.values() if isinstance(part, dict) for v in part.get("load", [])]
    report = {
        "texts": args.texts,
        "writers": args.writers,
        "runs": args.runs,
        "batch_window_ms": float(os.environ.get("MENTIS_EMBED_BATCH_WINDOW_MS", DEFAULT_WINDOW_MS)),
        "batch_max": int(os.environ.get("MENTIS_EMBED_BATCH_MAX", DEFAULT_MAX_BATCH)),
        "summary": summary,
        "load_average_range": [min(loads), max(loads)],
        "targets": {
            "record_p50_minus_embed_p50_ms": "<= 3",
            "writers_ratio_to_best_batched": ">= 0.9",
        },
        "per_run": runs,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
