"""The skill registry: upload, read, search, list, version history, deprecate, revoke, delete, and
the SKILL.md folders harnesses load (export and import). Composed into :class:`mentis.service.memory.Memory`.

Rules, written once here:

- A skill is identified by ``(repository, skill_id)``; ``skill_id`` defaults to the front matter's
  ``name`` and follows the same rule. Version 1 is stored whole, each later version as a unified
  diff against the one before; every read rebuilds the text from those and checks each version's
  content hash (a mismatch is an IntegrityError naming the skill and version).
- Uploading the newest version's text again writes nothing. A later upload re-activates a
  deprecated skill. A revoked skill stays revoked: later uploads under its id are stored but stay
  revoked. A revocation also follows its instructions (the body without front matter,
  whitespace-normalised: ``skill_text.instructions_hash``): in its repository a skill whose newest
  version has them is revoked too, whether it was uploaded before or after, renamed or
  reformatted; in another repository such a copy is stored active, with a warning to every caller
  who may read the revoking repository (on upload and on read).
- Deleting a skill erases every version's text from the live store; the ledger keeps a tombstone
  and its status entries (so a revocation outlives the deletion).
- Every read says who wrote each version and whether its signature verifies against the key the
  agent registry holds (``signing.verify_envelope``), and carries a standing notice that a skill
  is instructions written by another agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mentis.api.common import LedgerRef
from mentis.api.skill_text import (
    SKILL_FILE,
    apply_diff,
    check_size,
    content_hash,
    instructions_hash,
    make_diff,
    parse_skill,
    render_markdown,
    skill_body,
)
from mentis.api.skills import (
    DeleteSkillInput,
    DeleteSkillResult,
    ListSkillsInput,
    ListSkillsResult,
    ReadSkillInput,
    ReadSkillResult,
    RevokeSkillInput,
    ScoredSkill,
    SearchSkillsInput,
    SearchSkillsResult,
    SignatureState,
    SkillsExportResult,
    SkillsImportResult,
    SkillStatus,
    SkillStatusInput,
    SkillStatusResult,
    SkillSummary,
    SkillVersionOut,
    SkillVersionsInput,
    SkillVersionsResult,
    UploadSkillInput,
    UploadSkillResult,
)
from mentis.errors import Conflict, IntegrityError, InvalidInput, MentisError, NotFound, SkillTextError
from mentis.ledger import signing
from mentis.ledger.bodies import SkillStatusBody, SkillVersionBody
from mentis.ledger.entry import Entry
from mentis.retrieval import pipeline
from mentis.service.access import Caller, may_read, may_write
from mentis.service.context import ServiceContext, secret_warnings
from mentis.service.skill_files import read_skill_files, write_skill_files
from mentis.store.protocol import SkillRow, SkillVersionRow
from mentis.store.seal import Seal

ACTIVE: SkillStatus = "active"
DEPRECATED: SkillStatus = "deprecated"
REVOKED: SkillStatus = "revoked"


@dataclass(frozen=True)
class Version:
    """One version as read: its entry, its body and its whole text (hash checked)."""

    entry: Entry
    body: SkillVersionBody
    text: str


@dataclass(frozen=True)
class VersionView:
    """One version as a person reviews it: who wrote and signed it, its text, and the unified diff
    from the version before (None for the first)."""

    out: SkillVersionOut
    text: str
    diff: str | None


@dataclass(frozen=True)
class SkillReview:
    """A skill's whole history for the dashboard: its newest summary, status, what revoked it
    (None when nothing did) and every version, oldest first."""

    skill: SkillSummary
    revoked: str | None
    versions: list[VersionView]


@dataclass(frozen=True)
class Prepared:
    """An upload checked and built, not yet written (``row`` None: the text is unchanged)."""

    row: SkillVersionRow | None
    result: UploadSkillResult


def _invalid(exc: SkillTextError, where: str = "") -> InvalidInput:
    return InvalidInput(f"{where}{exc}", field=exc.field)


def signature_state(entry: Entry, public_key: Ed25519PublicKey | None) -> SignatureState:
    """Whether ``entry`` is signed and, given its key's public half (None: not in the registry),
    whether the signature verifies over the entry's own fields."""
    if entry.sig is None or entry.key_id is None:
        return "unsigned"
    if public_key is None:
        return "unknown_key"
    fields = signing.Unsigned(entry.chain, entry.kind, entry.id, entry.at, entry.agent, entry.body_hash)
    return "verified" if signing.verify_envelope(fields, entry.key_id, entry.sig, public_key) else "invalid"


def _instructions_of(history: Sequence[Version]) -> list[str]:
    """The distinct instruction hashes of ``history``'s versions, oldest first (blank bodies have none)."""
    found = (instructions_hash(skill_body(v.text)) for v in history)
    return list(dict.fromkeys(h for h in found if h is not None))


class SkillOps:
    """The skill operations of Memory, over the shared :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    # ------------------------------------------------------------ reading versions

    def history(self, repository: str, skill_id: str) -> list[Version]:
        """Every live version with its text rebuilt from version 1 and the diffs, each checked
        against its content hash."""
        out: list[Version] = []
        text = ""
        for entry, body in self.store.skill_history(repository, skill_id):
            try:
                if body.content is not None:
                    text = body.content
                elif not out or body.diff is None:
                    raise SkillTextError("its diff has no version before it to apply to")
                else:
                    text = apply_diff(text, body.diff)
            except SkillTextError as exc:
                raise IntegrityError(
                    f"skill {skill_id} version {body.version} in {repository} cannot be rebuilt ({exc}); "
                    "run `mentis verify-integrity`",
                    chain=repository,
                    seq=entry.seq,
                ) from None
            if content_hash(text) != body.content_hash:
                raise IntegrityError(
                    f"skill {skill_id} version {body.version} in {repository} does not match its content "
                    "hash; run `mentis verify-integrity`",
                    chain=repository,
                    seq=entry.seq,
                )
            out.append(Version(entry, body, text))
        return out

    def public_key(self, entry: Entry) -> Ed25519PublicKey | None:
        """The registry's public key for the entry's ``key_id`` when the registry holds it for the
        entry's own agent, else None."""
        found = None if entry.key_id is None else self.store.agent_key(entry.key_id)
        if found is None or found[0] != entry.agent:
            return None
        return signing.parse_public(found[1])

    def version_out(self, entry: Entry, body: SkillVersionBody) -> SkillVersionOut:
        return SkillVersionOut(
            version=body.version,
            version_id=entry.id,
            agent_id=entry.agent,
            at=entry.at,
            content_hash=body.content_hash,
            signed=entry.sig is not None,
            key_id=entry.key_id,
            signature=signature_state(entry, self.public_key(entry)),
            ledger=LedgerRef.of(entry),
        )

    @staticmethod
    def summary(row: SkillRow, entry: Entry, body: SkillVersionBody) -> SkillSummary:
        return SkillSummary(
            repository=row.repository,
            skill_id=row.skill_id,
            name=body.name,
            description=body.description,
            tags=body.tags,
            triggers=body.triggers,
            status=row.status,  # type: ignore[arg-type]
            version=body.version,
            content_hash=body.content_hash,
            updated_at=entry.at,
            agent_id=entry.agent,
        )

    def _summaries(self, rows: Sequence[SkillRow]) -> list[SkillSummary]:
        loaded = self.store.load_skill_versions([r.rowid for r in rows])
        out = []
        for row in rows:
            if row.rowid in loaded:
                entry, body = loaded[row.rowid]
                out.append(self.summary(row, entry, body))
        return out

    def _live(self, caller: Caller, repository: str, skill_id: str) -> tuple[SkillRow, list[Version]]:
        """The skill as ``repository`` reads it: its own, else (a branch's chain) the nearest chain
        of its read set that holds it (docs/branches.md)."""
        for chain in caller.read_set(repository):
            row = self.store.skill_row(chain, skill_id)
            if row is not None and caller.sees(chain):
                return row, self.history(chain, skill_id)
        raise NotFound(f"no skill {skill_id} in repository {repository}; list_skills shows them")

    def revocation_note(self, repository: str, skill_id: str, instructions: str | None = None) -> str | None:
        """What revoked ``skill_id``: its own revocation, else one in its repository of a skill
        with the same ``instructions`` (hash); None when neither applies."""
        found = self.store.skill_revocation(repository, skill_id, instructions)
        if found is None:
            return None
        entry, revocation = found
        reason = revocation.reason or "no reason given"
        if revocation.skill_id != skill_id:
            return (
                f"its instructions are those of skill {revocation.skill_id} in {repository}, revoked at "
                f"{entry.at} by {entry.agent}: {reason}"
            )
        return f"skill {skill_id} in {repository} was revoked at {entry.at} by {entry.agent}: {reason}"

    def copy_warnings(
        self, caller: Caller, repository: str, digest: str, instructions: str | None
    ) -> list[str]:
        """A warning for each skill of another repository the caller may read that was revoked
        with this text or these instructions."""
        out = []
        for repo, other in self.store.revoked_copies(digest, instructions):
            if repo != repository and caller.sees(repo):
                note = self.revocation_note(repo, other)
                out.append(f"its instructions are those of a revoked skill in another repository: {note}")
        return out

    # ------------------------------------------------------------ upload

    def upload_skill(self, caller: Caller, req: UploadSkillInput, seal: Seal) -> UploadSkillResult:
        may_write(caller, req.repository)
        if req.diff is not None:
            assert req.skill_id is not None  # the input model requires it with a diff
            content = self._patched(caller, req.repository, req.skill_id, req.diff, req.base_version)
        else:
            assert req.content is not None
            content = req.content
        prepared = self.prepare(caller, req.repository, req.skill_id, content, seal)
        return self._write([prepared], seal)[0]

    def _patched(
        self, caller: Caller, repository: str, skill_id: str, diff: str, base_version: int | None
    ) -> str:
        _, history = self._live(caller, repository, skill_id)
        newest = history[-1]
        if base_version is not None and base_version != newest.body.version:
            raise InvalidInput(
                f"base_version: the diff is against version {base_version} but skill {skill_id} is at "
                f"version {newest.body.version}; read it and make the diff against that",
                field="base_version",
            )
        try:
            content = apply_diff(newest.text, diff)
            check_size(content)
        except SkillTextError as exc:
            raise _invalid(exc) from None
        return content

    def prepare(
        self, caller: Caller, repository: str, skill_id: str | None, content: str, seal: Seal
    ) -> Prepared:
        """Check one upload and build its version (nothing is written; ``seal`` gives its id and time)."""
        try:
            doc = parse_skill(content)
        except SkillTextError as exc:
            raise _invalid(exc) from None
        skill_id = skill_id or doc.name
        history = self.history(repository, skill_id) if self.store.skill_row(repository, skill_id) else []
        newest = history[-1] if history else None
        digest = content_hash(content)
        instructions = instructions_hash(doc.body)
        revoked = self.revocation_note(repository, skill_id, instructions)
        warnings = [] if revoked is None else [f"{revoked}; this version is stored and stays revoked"]
        warnings += self.copy_warnings(caller, repository, digest, instructions)
        result = UploadSkillResult(
            repository=repository,
            skill_id=skill_id,
            version=1 if newest is None else newest.body.version + 1,
            content_hash=digest,
            status=REVOKED if revoked is not None else ACTIVE,
            unchanged=False,
            ledger=None,
            warnings=warnings,
        )
        if newest is not None and newest.text == content:
            live = self.store.skill_row(repository, skill_id)
            status = result.status if live is None else cast(SkillStatus, live.status)
            unchanged = {"version": newest.body.version, "status": status, "unchanged": True}
            return Prepared(None, result.model_copy(update=unchanged))
        body = SkillVersionBody(
            version_id=seal.record_id(),
            repository=repository,
            skill_id=skill_id,
            version=result.version,
            name=doc.name,
            description=doc.description,
            format=doc.format,
            content_hash=digest,
            agent_id=caller.agent_id,
            created_at=seal.time(),
            tags=doc.tags,
            triggers=doc.triggers,
            warnings=doc.warnings,
            content=content if newest is None else None,
            diff=None if newest is None else make_diff(newest.text, content),
            base_id=None if newest is None else newest.entry.id,
        )
        vector = self.ctx.embed([body.embed_text])[0]
        secrets = secret_warnings(content, forget="delete_skill")
        return Prepared(
            SkillVersionRow(body, content, vector), result.model_copy(update={"warnings": warnings + secrets})
        )

    def _write(self, prepared: Sequence[Prepared], seal: Seal) -> list[UploadSkillResult]:
        rows = [p.row for p in prepared if p.row is not None]
        entries = iter(self.store.append_skill_versions(rows, seal))
        return [
            p.result if p.row is None else p.result.model_copy(update={"ledger": LedgerRef.of(next(entries))})
            for p in prepared
        ]

    # ------------------------------------------------------------ reads

    def read_skill(self, caller: Caller, req: ReadSkillInput) -> ReadSkillResult:
        may_read(caller, req.repository)
        row, history = self._live(caller, req.repository, req.skill_id)
        newest = history[-1]
        wanted = req.version or newest.body.version
        found = [v for v in history if v.body.version == wanted]
        if not found:
            raise NotFound(
                f"version: skill {req.skill_id} has no version {wanted}; its versions are "
                f"1 to {newest.body.version}"
            )
        version = found[0]
        warnings = list(version.body.warnings)
        instructions = instructions_hash(skill_body(newest.text))
        revoked = self.revocation_note(row.repository, req.skill_id, instructions)
        if revoked is not None:
            warnings.append(f"REVOKED: {revoked}; do not follow it")
        elif row.status == DEPRECATED:
            warnings.append(f"skill {req.skill_id} is deprecated; prefer another skill")
        warnings += self.copy_warnings(caller, row.repository, newest.body.content_hash, instructions)
        return ReadSkillResult(
            skill=self.summary(row, newest.entry, newest.body),
            version=version.body.version,
            format=version.body.format,
            content=version.text,
            content_hash=version.body.content_hash,
            warnings=warnings,
            versions=[self.version_out(v.entry, v.body) for v in history],
        )

    def review_skill(self, caller: Caller, req: SkillVersionsInput) -> SkillReview:
        """Every version with its text, its diff from the one before and its signature state."""
        may_read(caller, req.repository)
        row, history = self._live(caller, req.repository, req.skill_id)
        newest = history[-1]
        views = [
            VersionView(
                self.version_out(v.entry, v.body),
                v.text,
                None if i == 0 else make_diff(history[i - 1].text, v.text),
            )
            for i, v in enumerate(history)
        ]
        instructions = instructions_hash(skill_body(newest.text))
        return SkillReview(
            skill=self.summary(row, newest.entry, newest.body),
            revoked=self.revocation_note(row.repository, req.skill_id, instructions),
            versions=views,
        )

    def skill_versions(self, caller: Caller, req: SkillVersionsInput) -> SkillVersionsResult:
        may_read(caller, req.repository)
        row = next(
            (
                r
                for c in caller.read_set(req.repository)
                if (c == req.repository or caller.sees(c)) and (r := self.store.skill_row(c, req.skill_id))
            ),
            None,
        )  # a branch's chain: the nearest chain of its read set holding the skill
        if row is None:
            raise NotFound(f"no skill {req.skill_id} in repository {req.repository}; list_skills shows them")
        versions = [self.version_out(e, b) for e, b in self.store.skill_history(row.repository, req.skill_id)]
        status = cast(SkillStatus, row.status)
        return SkillVersionsResult(
            repository=row.repository, skill_id=req.skill_id, status=status, versions=versions
        )

    def list_skills(self, caller: Caller, req: ListSkillsInput) -> ListSkillsResult:
        may_read(caller, req.repository)
        scope = caller.search_scope(req.repository, self.store.repositories)
        rows = self.store.skill_rows(scope, req.statuses)
        if req.repository is not None and len(scope or ()) > 1:  # a branch: its own version of a skill first
            order = {chain: n for n, chain in enumerate(caller.read_set(req.repository))}
            nearest: dict[str, SkillRow] = {}
            for row in sorted(rows, key=lambda r: order.get(r.repository, len(order))):
                nearest.setdefault(row.skill_id, row)
            rows = [r for r in rows if nearest[r.skill_id] is r]
        return ListSkillsResult(skills=self._summaries(rows))

    def search_skills(self, caller: Caller, req: SearchSkillsInput) -> SearchSkillsResult:
        may_read(caller, req.repository)
        scope = caller.search_scope(req.repository, self.store.repositories)
        ranked, _ = pipeline.candidates(
            req.query,
            scope,
            self.ctx.embed_one,
            self.store.skill_lexical,
            self.store.skill_vector,
            None,
            pool=self.ctx.pool,
        )
        rows = self.store.skill_rows_at([s.rowid for s in ranked])
        allowed = {ACTIVE, DEPRECATED} if req.include_deprecated else {ACTIVE}
        kept = [(s, rows[s.rowid]) for s in ranked if s.rowid in rows and rows[s.rowid].status in allowed]
        kept = kept[: req.limit]
        by_rowid = {s.rowid: s.fused for s, _ in kept}
        summaries = self._summaries([row for _, row in kept])
        rowid_of = {(r.repository, r.skill_id): r.rowid for _, r in kept}
        return SearchSkillsResult(
            skills=[
                ScoredSkill(skill=s, score=round(by_rowid[rowid_of[(s.repository, s.skill_id)]], 6))
                for s in summaries
            ]
        )

    # ------------------------------------------------------------ status and deletion

    def deprecate_skill(self, caller: Caller, req: SkillStatusInput, seal: Seal) -> SkillStatusResult:
        return self._set_status(caller, req.repository, req.skill_id, "deprecate", req.reason, seal)

    def revoke_skill(self, caller: Caller, req: RevokeSkillInput, seal: Seal) -> SkillStatusResult:
        return self._set_status(caller, req.repository, req.skill_id, "revoke", req.reason, seal)

    def _set_status(
        self, caller: Caller, repository: str, skill_id: str, op: str, reason: str | None, seal: Seal
    ) -> SkillStatusResult:
        may_write(caller, repository)
        row, history = self._live(caller, repository, skill_id)
        if row.status == REVOKED:
            raise Conflict(f"skill {skill_id} in {repository} is revoked; a revocation is final")
        if op == "deprecate" and row.status == DEPRECATED:
            raise Conflict(
                f"skill {skill_id} in {repository} is already deprecated; an upload re-activates it"
            )
        newest = history[-1]
        body = SkillStatusBody(
            repository=repository,
            skill_id=skill_id,
            op=op,
            version_id=newest.entry.id,
            version=newest.body.version,
            content_hashes=[v.body.content_hash for v in history] if op == "revoke" else [],
            agent_id=caller.agent_id,
            at=seal.time(),
            reason=reason,
            instructions_hashes=_instructions_of(history) if op == "revoke" else None,
        )
        entry = self.store.append_skill_status(body, seal)
        status = REVOKED if op == "revoke" else DEPRECATED
        return SkillStatusResult(
            repository=repository,
            skill_id=skill_id,
            status=status,
            version=body.version,
            ledger=LedgerRef.of(entry),
        )

    def delete_skill(self, caller: Caller, req: DeleteSkillInput, seal: Seal) -> DeleteSkillResult:
        may_write(caller, req.repository)
        row = self.store.skill_row(req.repository, req.skill_id)
        if row is None:
            raise NotFound(f"no skill {req.skill_id} in repository {req.repository}; list_skills shows them")
        entry = self.store.delete_skill(req.repository, req.skill_id, req.reason, caller.agent_id, seal)
        return DeleteSkillResult(
            deleted=True,
            repository=req.repository,
            skill_id=req.skill_id,
            versions_erased=row.version,
            ledger=LedgerRef.of(entry),
        )

    # ------------------------------------------------------------ SKILL.md folders

    def export_skills(self, caller: Caller, repository: str, target: Path) -> SkillsExportResult:
        """Write each active skill of ``repository`` whose every version's content hash checks and
        whose newest version's signature, if any, verifies, as ``target/<name>/SKILL.md``. Refuses
        (before writing anything) when one of those files already exists."""
        may_read(caller, repository)
        plan: dict[str, str] = {}
        skipped: list[dict[str, str]] = []
        for row in self.store.skill_rows([repository], [ACTIVE]):
            try:
                newest = self.history(repository, row.skill_id)[-1]
            except IntegrityError as exc:
                skipped.append({"skill_id": row.skill_id, "why": exc.message})
                continue
            state = signature_state(newest.entry, self.public_key(newest.entry))
            if state not in ("unsigned", "verified"):
                skipped.append(
                    {"skill_id": row.skill_id, "why": f"its newest version's signature is {state}"}
                )
                continue
            doc = parse_skill(newest.text)
            if doc.name in plan:
                skipped.append(
                    {"skill_id": row.skill_id, "why": f"another skill is already named {doc.name}"}
                )
                continue
            plan[doc.name] = newest.text if doc.format == "markdown" else render_markdown(doc)
        written = write_skill_files(target, plan)
        return SkillsExportResult(written=[str(p) for p in written], skipped=skipped)

    def import_skills(self, caller: Caller, repository: str, source: Path, seal: Seal) -> SkillsImportResult:
        """Upload every ``<name>/SKILL.md`` under ``source`` (and ``source/SKILL.md``) in one
        transaction: one bad file rejects the whole import and nothing is written."""
        may_write(caller, repository)
        files = read_skill_files(source)
        if not files:
            raise InvalidInput(f"source: no {SKILL_FILE} in {source} or its folders", field="source")
        prepared: list[Prepared] = []
        seen: set[str] = set()
        for path, raw in files:
            try:
                text = raw.decode("utf-8")
                doc = parse_skill(text)
                if doc.name != path.parent.name:
                    raise InvalidInput(
                        f"content: the front matter's name {doc.name!r} is not its folder's name "
                        f"{path.parent.name!r} (Agent Skills name a skill after its folder)",
                        field="content",
                    )
                if doc.name in seen:
                    raise InvalidInput(f"content: a second skill named {doc.name}", field="content")
                seen.add(doc.name)
                prepared.append(self.prepare(caller, repository, None, text, seal))
            except UnicodeDecodeError as exc:
                raise InvalidInput(f"{path}: content is not UTF-8 ({exc.reason})", field="content") from None
            except SkillTextError as exc:
                raise _invalid(exc, f"{path}: ") from None
            except MentisError as exc:
                if isinstance(exc, InvalidInput):
                    raise InvalidInput(f"{path}: {exc.message}", field=exc.field) from None
                raise
        return SkillsImportResult(uploaded=self._write(prepared, seal))


__all__ = ["SkillOps", "SkillReview", "Version", "VersionView", "signature_state"]
