"""The relation graph is well-formed SVG whose every text is escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from mentis.dashboard.graph import MAX_NODES, Edge, Node, relation_svg

NS = {"svg": "http://www.w3.org/2000/svg"}


def test_labels_are_escaped_and_the_svg_parses() -> None:
    centre = Node("c", '<script>alert("x")</script> & more', "Finding")
    others = [Node("o1", "</text><a href='javascript:x'>", "Hypothesis", dim=True)]
    svg = relation_svg(centre, others, [Edge("c", "Supersedes", "o1")], "/dashboard/thought?id=")
    assert "<script>" not in svg and "<a href='javascript" not in svg
    root = ET.fromstring(svg)
    texts = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "Supersedes" in texts and '<script>alert("x")</script>…' in texts
    links = [a.get("href") for a in root.iter("{http://www.w3.org/2000/svg}a")]
    assert links == ["/dashboard/thought?id=o1"]


def test_edges_to_nodes_not_drawn_are_left_out_and_nodes_are_capped() -> None:
    others = [Node(f"n{i}", f"thought {i}", "Idea") for i in range(MAX_NODES + 5)]
    edges = [Edge("c", "RelatedTo", n.id) for n in others]
    root = ET.fromstring(relation_svg(Node("c", "centre", "Plan"), others, edges, "/t?id="))
    assert len(list(root.iter("{http://www.w3.org/2000/svg}line"))) == MAX_NODES
    assert len(list(root.iter("{http://www.w3.org/2000/svg}rect"))) == MAX_NODES + 1
