"""A thought's relations drawn as a small server-side SVG: the thought in the middle, its neighbours
on a circle, one labelled arrow per relation. No script, no network; every text is escaped here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 600
HEIGHT = 440
NODE_W = 196
NODE_H = 52
MAX_NODES = 12


@dataclass(frozen=True)
class Node:
    id: str
    label: str
    kind: str
    dim: bool = False


@dataclass(frozen=True)
class Edge:
    source: str
    kind: str
    target: str


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _border(cx: float, cy: float, tx: float, ty: float) -> tuple[float, float]:
    """Where the segment from a node's centre towards (tx, ty) leaves its box."""
    dx, dy = tx - cx, ty - cy
    if dx == 0 and dy == 0:
        return cx, cy
    scale = min(
        (NODE_W / 2) / abs(dx) if dx else math.inf,
        (NODE_H / 2) / abs(dy) if dy else math.inf,
    )
    return cx + dx * scale, cy + dy * scale


def relation_svg(centre: Node, others: Sequence[Node], edges: Sequence[Edge], link: str) -> str:
    """The SVG; ``link`` is a URL prefix the node's id is appended to (already escaped safe text)."""
    shown = list(others)[:MAX_NODES]
    height = HEIGHT if len(shown) > 2 else 240  # one or two neighbours sit above and below
    pos: dict[str, tuple[float, float]] = {centre.id: (WIDTH / 2, height / 2)}
    radius_x, radius_y = WIDTH / 2 - NODE_W / 2 - 8, height / 2 - NODE_H / 2 - 8
    for i, node in enumerate(shown):
        angle = -math.pi / 2 + 2 * math.pi * i / max(1, len(shown))
        pos[node.id] = (WIDTH / 2 + radius_x * math.cos(angle), height / 2 + radius_y * math.sin(angle))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-labelledby="graph-title" class="graph">',
        f'<title id="graph-title">{escape(str(len(edges)))} relations of this thought</title>',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#475569"/></marker></defs>',
    ]
    for e in edges:
        if e.source not in pos or e.target not in pos:
            continue
        (sx, sy), (tx, ty) = pos[e.source], pos[e.target]
        x1, y1 = _border(sx, sy, tx, ty)
        x2, y2 = _border(tx, ty, sx, sy)
        parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#475569" '
            'stroke-width="1.5" marker-end="url(#arrow)"/>'
        )
        mx, my = (x1 + x2) / 2, (y1 + y2) / 2
        parts.append(
            f'<text x="{mx + 6:.1f}" y="{my + 4:.1f}" text-anchor="start" font-size="12" fill="#1e293b" '
            f'paint-order="stroke" stroke="#ffffff" stroke-width="3">{escape(e.kind)}</text>'
        )
    for node in [centre, *shown]:
        x, y = pos[node.id]
        fill, stroke = ("#1d4ed8", "#1e3a8a") if node is centre else ("#ffffff", "#64748b")
        text = "#ffffff" if node is centre else ("#64748b" if node.dim else "#0f172a")
        box = (
            f'<rect x="{x - NODE_W / 2:.1f}" y="{y - NODE_H / 2:.1f}" width="{NODE_W}" height="{NODE_H}" '
            f'rx="6" fill="{fill}" stroke="{stroke}"' + (' stroke-dasharray="4 3"' if node.dim else "") + "/>"
            f'<text x="{x:.1f}" y="{y - 5:.1f}" text-anchor="middle" font-size="13" font-weight="600" '
            f'fill="{text}">{escape(node.kind)}</text>'
            f'<text x="{x:.1f}" y="{y + 13:.1f}" text-anchor="middle" font-size="12" fill="{text}">'
            f"{escape(_clip(node.label, 28))}</text>"
        )
        if node is centre:
            parts.append(f"<g>{box}</g>")
        else:
            parts.append(
                f'<a href="{link}{escape(node.id)}"><title>{escape(_clip(node.label, 200))}</title>{box}</a>'
            )
    parts.append("</svg>")
    return "".join(parts)
