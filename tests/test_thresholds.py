"""The near-duplicate and re-assertion thresholds, pinned on the measured pairs (real model).

Measured with all-MiniLM-L6-v2: paraphrases of one conclusion 0.87-0.97, different conclusions
about the same subject 0.27-0.79, a negation 0.88. See mentis.service.thoughts for how they are used.
"""

from __future__ import annotations

import pytest

from mentis.providers.embed import Embedder
from mentis.service.thoughts import NEAR_DUPLICATE, REASSERTION

PARAPHRASES = [
    (
        "The flaky test is caused by a race in the connection pool.",
        "A race condition in the connection pool causes the flaky test.",
    ),
    ("Use Redis for the session cache.", "We decided to use Redis as the session cache."),
    ("The migration fails because the column already exists.", "Migration fails: the column already exists."),
    (
        "Increasing the timeout to 30s fixes the CI failure.",
        "The CI failure is fixed by raising the timeout to 30 seconds.",
    ),
    ("Deploys must go through the staging cluster first.", "All deploys have to pass through staging first."),
    (
        "The memory leak comes from the image cache never evicting entries.",
        "Image cache never evicts entries, which is the source of the memory leak.",
    ),
]
DIFFERENT = [
    (
        "The flaky test is caused by a race in the connection pool.",
        "The flaky test is caused by a wrong timezone in the fixture.",
    ),
    ("Use Redis for the session cache.", "Use Postgres for the job queue."),
    (
        "The migration fails because the column already exists.",
        "The migration fails because the table is locked.",
    ),
    ("Increasing the timeout to 30s fixes the CI failure.", "Pinning numpy to 1.26 fixes the CI failure."),
    ("Deploys must go through the staging cluster first.", "Deploys are frozen on Fridays."),
    (
        "The memory leak comes from the image cache never evicting entries.",
        "The memory leak comes from unclosed database cursors.",
    ),
]
NEGATION = (
    "The flaky test is caused by a race in the connection pool.",
    "The flaky test is not caused by a race in the connection pool.",
)


def cosines(embedder: Embedder, pairs: list[tuple[str, str]]) -> list[float]:
    vectors = embedder.embed([text for pair in pairs for text in pair])
    return [float(vectors[2 * i] @ vectors[2 * i + 1]) for i in range(len(pairs))]


@pytest.mark.slow
def test_different_conclusions_and_a_negation_stay_below_the_reassertion_threshold(
    real_embedder: Embedder,
) -> None:
    assert max(cosines(real_embedder, DIFFERENT)) < REASSERTION
    assert cosines(real_embedder, [NEGATION])[0] < REASSERTION


@pytest.mark.slow
def test_most_paraphrases_reach_the_reassertion_threshold(real_embedder: Embedder) -> None:
    scores = cosines(real_embedder, PARAPHRASES)
    assert sum(s >= REASSERTION for s in scores) >= 5, scores
    assert min(scores) > max(cosines(real_embedder, DIFFERENT))


@pytest.mark.slow
def test_only_near_verbatim_restatements_reach_the_near_duplicate_threshold(real_embedder: Embedder) -> None:
    assert all(s < NEAR_DUPLICATE for s in cosines(real_embedder, [*DIFFERENT, NEGATION]))
    assert any(s >= NEAR_DUPLICATE for s in cosines(real_embedder, PARAPHRASES))
