"""The agent registry in the store, and the signed-write rules every append passes (both backends).

The registry is the system chain :data:`mentis.ledger.links.AGENTS_CHAIN`, folded by
:class:`mentis.ledger.registry.Registry`; a process caches the fold and re-reads it when that chain's head
moves (checked inside each write transaction, so processes sharing a store see each other's
changes). ``sig_streams`` (stream → last n, its statement's digest, key id) is derived from the
ledger: it tells an append which ``n`` and ``prev`` a stream's next statement must carry.

:meth:`AgentCore._enforce` runs inside ``_append``, in the write transaction, before anything is
written: a disabled agent is refused; an agent that has had a key must sign; a signature must be
by an active key of the entry's agent, verify over the entry's own fields, continue its stream
and carry an ``at`` within :data:`mentis.ledger.signing.SKEW_S` of the clock. Each refusal raises, and
the exception rolls the transaction back.

On PostgreSQL a registry write holds an exclusive advisory lock and every other append a shared
one (:meth:`_registry_lock`), so a key added while an unsigned write by the same agent is in flight
cannot commit around it: one of them waits for the other and then sees it.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import orjson

from mentis.errors import (
    Conflict,
    Forbidden,
    IntegrityError,
    InvalidInput,
    MentisError,
    NotFound,
    RegistryError,
)
from mentis.ledger import signing
from mentis.ledger.bodies import AgentEventBody
from mentis.ledger.canonical import sha256_hex
from mentis.ledger.registry import AgentRecord, Registry
from mentis.store.shared.backend import Backend, ConnT

_REFUSAL: dict[str, type[MentisError]] = {
    "invalid": InvalidInput,
    "not_found": NotFound,
    "conflict": Conflict,
}
AgentKey = tuple[str, str, str, str | None]
"""(agent_id, public key text, added_at, revoked_at) of a registered key."""


class AgentCore(Backend[ConnT]):
    """Registry reads, the checks of a registry event, and the signed-write rules (``self`` is the
    store; the appends themselves are :class:`~mentis.store.shared.core.LedgerCore`'s)."""

    _registry_cache: tuple[int, Registry] | None = None
    _registry_guard = threading.Lock()

    # ------------------------------------------------------------ registry

    def _registry_in(self, conn: ConnT) -> Registry:
        """The registry as ``conn``'s transaction sees it (cached while the chain's head stands)."""
        q = self.D.q
        head = conn.execute(q("SELECT seq FROM heads WHERE chain=?"), (signing.AGENTS_CHAIN,)).fetchone()
        seq = -1 if head is None else int(head[0])
        cached = self._registry_cache
        if cached is not None and cached[0] == seq:
            return cached[1]
        bodies = []
        for e_seq, body_hash, raw in conn.execute(
            q(
                "SELECT e.seq, e.body_hash, b.body FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid "
                "WHERE e.chain=? ORDER BY e.seq"
            ),
            (signing.AGENTS_CHAIN,),
        ):
            if raw is None or sha256_hex(bytes(raw)) != body_hash:
                raise IntegrityError(
                    f"ledger does not verify: chain {signing.AGENTS_CHAIN!r} seq {e_seq}: the registry "
                    "event's body is missing or changed; run `mentis verify-integrity`",
                    chain=signing.AGENTS_CHAIN,
                    seq=int(e_seq),
                )
            bodies.append(orjson.loads(bytes(raw)))
        try:
            registry = Registry.from_bodies(bodies)
        except RegistryError as exc:
            raise IntegrityError(
                f"the agent registry does not fold: {exc}; run `mentis verify-integrity`"
            ) from None
        with self._registry_guard:
            self._registry_cache = (seq, registry)
        return registry

    def agent_registry(self) -> Registry:
        """The registry as it stands (do not change it: it is shared)."""
        with self._read() as conn:
            return self._registry_in(conn)

    def agent_key(self, key_id: str) -> AgentKey | None:
        """``(agent_id, public_key_text, added_at, revoked_at)`` of a registered key, or None."""
        key = self.agent_registry().keys.get(key_id)
        return None if key is None else (key.agent_id, key.public_key, key.added_at, key.revoked_at)

    def _admit_agent_event(
        self, conn: ConnT, at: str | None, body: AgentEventBody
    ) -> tuple[AgentEventBody, Registry]:
        """The registry event dated ``at`` (None: dated here, once the registry's lock is held, so
        every append that committed before it read the clock earlier; verification compares those
        times), if it may follow the registry as it stands in ``conn``'s write transaction (which
        holds the registry's lock from here on), and the registry with it applied: InvalidInput,
        NotFound or Conflict otherwise."""
        self._registry_lock(conn, True)
        body = replace(body, at=at or signing.now_iso())
        before = self._registry_in(conn)
        after = before.copy()
        try:
            after.apply(body.to_json())
        except RegistryError as exc:
            raise _REFUSAL[exc.kind](str(exc)) from None
        if body.op == "key_add" and not before.agents[body.agent_id].keys:
            self._refuse_unsigned_after(conn, before.agents[body.agent_id], body.at)
        return body, after

    def _refuse_unsigned_after(self, conn: ConnT, who: AgentRecord, at: str) -> None:
        """Conflict when an unsigned entry by ``who`` is dated at or after ``at``, the time of its
        first key: verification holds every unsigned entry dated from then on to be a forgery
        (``mentis.ledger.signatures``). It happens when a write read the clock before this key add did and
        committed after it read the clock, or when the clocks disagree. Reads the whole ledger
        (no index on ``agent``): first keys are rare."""
        names = [who.agent_id, *who.aliases]
        cond, args = self.D.in_("agent", names)
        found = conn.execute(
            self.D.q(
                f"SELECT at FROM entries WHERE key_id IS NULL AND chain <> ? AND {cond} "
                f"AND {self.D.bytewise('at')} >= ? ORDER BY {self.D.bytewise('at')} DESC LIMIT 1"
            ),
            [signing.AGENTS_CHAIN, *args, at],
        ).fetchone()
        if found is not None:
            raise Conflict(
                f"agent {who.agent_id!r} has an unsigned entry dated {found[0]}, not before this key's "
                f"time {at} (a write that raced the key, or a clock behind): add the key again"
            )

    # ------------------------------------------------------------ enforcement

    def _enforce(self, conn: ConnT, fields: signing.Unsigned, key_id: str | None, sig: str | None) -> None:
        """Refuse an append the registry does not allow (see the module docstring)."""
        self._registry_lock(conn, fields.chain == signing.AGENTS_CHAIN)
        registry = self._registry_in(conn)
        who = registry.resolve(fields.agent)
        if who is not None and who.disabled_at is not None:
            raise Forbidden(f"agent {fields.agent!r} is disabled ({who.disabled_reason}); it may not write")
        if key_id is None and sig is None:
            if who is not None and who.keys:
                raise Forbidden(
                    f"agent {fields.agent!r} has a key in the agent registry; its writes must be signed: "
                    "set MENTIS_SIGNING_KEY to its private key file, or use `mentis serve --remote`"
                )
            return
        if key_id is None or sig is None:
            raise InvalidInput(
                "a signed write carries both key_id and sig", field="sig" if sig is None else "key_id"
            )
        env = signing.Envelope.parse(sig)
        key = registry.keys.get(key_id)
        if key is None:
            raise InvalidInput(f"key_id {key_id!r} is not in the agent registry", field="key_id")
        if who is None or key.agent_id != who.agent_id:
            raise Forbidden(f"key {key_id} belongs to agent {key.agent_id!r}, not to {fields.agent!r}")
        if not key.active:
            raise Forbidden(
                f"key {key_id} was revoked at {key.revoked_at} ({key.reason}); sign with an active key"
            )
        signing.check_skew(fields.at)
        stmt = signing.Statement.of(fields, key_id, env)
        if not signing.verify(signing.parse_public(key.public_key), stmt, env.signature):
            raise InvalidInput(
                f"sig: the signature does not verify with key {key_id} over this write's content", field="sig"
            )
        self._advance_stream(conn, env, key_id, stmt.digest())

    def _advance_stream(self, conn: ConnT, env: signing.Envelope, key_id: str, digest: str) -> None:
        """Move the stream's head to this statement, or refuse a replay, a gap or a broken link."""
        q = self.D.q
        if env.n == 0:
            moved = conn.execute(
                q(
                    "INSERT INTO sig_streams(stream, n, digest, key_id) VALUES(?,?,?,?) "
                    "ON CONFLICT(stream) DO NOTHING RETURNING n"
                ),
                (env.stream, 0, digest, key_id),
            ).fetchone()
        else:
            moved = conn.execute(
                q(
                    "UPDATE sig_streams SET n=?, digest=? WHERE stream=? AND n=? AND digest=? AND key_id=? "
                    "RETURNING n"
                ),
                (env.n, digest, env.stream, env.n - 1, env.prev, key_id),
            ).fetchone()
        if moved is not None:
            return
        head = conn.execute(q("SELECT n, key_id FROM sig_streams WHERE stream=?"), (env.stream,)).fetchone()
        if head is not None and int(head[0]) >= env.n:
            raise InvalidInput(
                f"sig: statement {env.n} of signing stream {env.stream} was already used (a replayed "
                "signature); a signer starts a new stream after a failed write",
                field="sig",
            )
        if head is None:
            why = "the store has not seen this stream; a stream starts at n = 0"
        elif head[1] != key_id:
            why = f"the stream was signed with key {head[1]}"
        elif int(head[0]) != env.n - 1:
            why = f"the stream's last statement is {head[0]}: statements are missing"
        else:
            why = "prev is not the digest of the stream's last statement"
        raise InvalidInput(
            f"sig: statement {env.n} of signing stream {env.stream} does not link: {why}", field="sig"
        )

    def _rebuild_sig_streams(self, conn: ConnT) -> None:
        """Derive ``sig_streams`` from the ledger again (rebuild, import)."""
        conn.execute("DELETE FROM sig_streams")
        heads: dict[str, tuple[int, str, str]] = {}
        for row in conn.execute(
            "SELECT chain, kind, id, at, agent, body_hash, key_id, sig FROM entries "
            "WHERE sig IS NOT NULL AND key_id IS NOT NULL ORDER BY rowid"
        ):
            env = signing.Envelope.parse(row[7])
            stmt = signing.Statement.of(signing.Unsigned(*row[:6]), row[6], env)
            heads[env.stream] = (env.n, stmt.digest(), row[6])
        rows = [(stream, n, digest, key_id) for stream, (n, digest, key_id) in heads.items()]
        if rows:
            self.D.many(conn, "INSERT INTO sig_streams(stream, n, digest, key_id) VALUES(?,?,?,?)", rows)


__all__ = ["AgentCore", "AgentKey"]
