#!/usr/bin/env python3
"""Both errors of recall's confidence label, per model and per kind of question, from what
`cargo bench --bench evidence` wrote (bench/results/evidence-<model>.jsonl):

  * found answers called no match: answerable questions whose answer is among the five shown,
    labelled NO CONFIDENT MATCH (the agent drops a right answer);
  * unanswerable questions vouched for: questions nothing answers, labelled HIGH or MEDIUM.

    python3 bench/calibrate_labels.py [MODEL ...]

Groups: the multilingual set's kinds by the question's and the answer's language (ko->ko takes
ko->ko-kw in too), LoCoMo's answerable questions, and the unanswerable ones by set and language.
The targets (issue 48): at most 10 % of found answers called no match, at least 70 % of
unanswerable questions abstaining, in every group.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def group(q: dict) -> str:
    kind = q["kind"]
    if kind.startswith("unanswerable"):
        return kind
    if kind.startswith("locomo"):
        return "locomo"
    return kind.removesuffix("-kw")


def load(model: str) -> list[dict]:
    path = RESULTS / f"evidence-{model}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def rates(questions: list[dict], abstains) -> dict[str, tuple[int, int, float]]:
    """Per group: (count, abstained, share). For answerable groups only the found ones count."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for q in questions:
        if q["answerable"] and q["rank"] is None:
            continue
        g = group(q)
        out[g][0] += 1
        out[g][1] += int(abstains(q))
    return {g: (n, a, a / n if n else 0.0) for g, (n, a) in sorted(out.items())}


def table(model: str, questions: list[dict], abstains, title: str) -> None:
    print(f"\n{model}: {title}")
    print(f"  {'group':24} {'n':>5} {'abstained':>9}  target")
    for g, (n, a, share) in rates(questions, abstains).items():
        unanswerable = g.startswith("unanswerable")
        ok = share >= 0.7 if unanswerable else share <= 0.1
        target = ">= 70 %" if unanswerable else "<= 10 %"
        print(f"  {g:24} {n:5} {share:9.1%}  {target} {'met' if ok else 'MISSED'}")


def served(q: dict) -> bool:
    return q["label"] == "no_confident_match"


def main() -> None:
    models = sys.argv[1:] or [
        p.stem.removeprefix("evidence-") for p in sorted(RESULTS.glob("evidence-*.jsonl"))
    ]
    for model in models:
        questions = load(model)
        table(model, questions, served, "the label as served")


if __name__ == "__main__":
    main()
