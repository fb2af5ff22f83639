#!/usr/bin/env python3
"""Calibrate RECALL_MIN_SIMILARITY (and HIGH) for a local model (docs/configuration.md#calibrating-the-floor).

Titan v2's numbers in the spec: correct answers 0.15-0.41, unrelated < 0.05, reworded 0.72,
typo 0.99 -> floor 0.1. This script measures the same four things for MiniLM with the numpy
reference embedder (bench/reference_embed.py):

  * 20 developer-memory FACTS (decisions, conventions, commands) form the store;
  * for each fact: a QUESTION whose answer is the fact, worded differently; a question about an
    ABSENT subject (nothing in the store answers it); a REWORDED restatement; a TYPO version;
  * plus a few off-domain UNRELATED lines, and a small Korean side set (MiniLM is English-only).

For every probe it takes the best cosine over the store (= similarity, 1 - cosine distance, as
in docs/stores.md#what-every-store-guarantees), and for questions also the cosine to the fact that answers it (that is
what a floor must keep) and whether that fact ranks first.

  .venv-model/bin/python bench/calibrate_floor.py [MODEL_DIR] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_embed import DEFAULT_MODEL_DIR, SentenceBert  # noqa: E402
from reference_mpnet import MPNetNumpy  # noqa: E402

# (fact, question answered by it, absent-subject question, reworded restatement, typo version)
# The questions avoid the fact's words on purpose (a hard paraphrase). KEYWORD_QUESTIONS below are
# the same questions asked the way an agent often does, reusing one or two of the fact's words.
DATA = [
    ("The primary datastore is PostgreSQL 16; SQLite is used only for local development and unit tests.",
     "Which database engine do we run in prod?",
     "Which message queue do we use for background jobs?",
     "Production data lives in Postgres version 16, while SQLite just serves dev machines and the test suite.",
     "The primray datastore is PostgreSQL 16; SQLite is used only for local developmnet and unit tets."),
    ("Production deploys go through a blue-green rollout on the EKS cluster, triggered by merging to main.",
     "How does new code get shipped to customers?",
     "What is our policy for rotating SSH keys on the bastion hosts?",
     "Merging into main kicks off a blue/green release to the Kubernetes cluster on AWS.",
     "Production deploys go thorugh a blue-gren rollout on the EKS cluser, triggered by merging to main."),
    ("Run `cargo nextest run --all-features` before pushing; CI rejects any branch with failing tests.",
     "What check should I do on my machine before sending my code upstream?",
     "What is the minimum code coverage required for the Python services?",
     "Before you push, execute the whole nextest suite with every feature on, since the pipeline refuses red branches.",
     "Run `cargo nextest run --all-features` befor pushing; CI rejcts any branch with faling tests."),
    ("Commit messages follow Conventional Commits, e.g. `feat(api): add pagination`, and the changelog is generated from them.",
     "How should I write the description when I save my changes to git?",
     "Which GraphQL library does the API gateway use?",
     "We write commits in the Conventional Commits style (like `fix(db): handle nulls`) so release notes can be built automatically.",
     "Commit mesages follow Conventional Comits, e.g. `feat(api): add pagination`, and the changelog is genrated from them."),
    ("Library crates return `thiserror` enums; only the binary uses `anyhow` for error reporting.",
     "How are failures propagated in our Rust code?",
     "How do we translate the mobile app into other languages?",
     "Errors in the libraries are typed enums derived with thiserror, and anyhow appears only in the executable.",
     "Libary crates return `thiserror` enums; only the binray uses `anyhow` for eror reporting."),
    ("Logs are emitted as JSON lines to stdout and shipped to Loki by the Promtail sidecar.",
     "Where can I read what the service printed, and in what format?",
     "Who approves cloud spending that goes over budget?",
     "Each service writes structured JSON log lines to standard output, and a Promtail sidecar forwards them to Loki.",
     "Logs are emited as JSON lnes to stdout and shiped to Loki by the Promtail sidecar."),
    ("API keys and database passwords live in AWS Secrets Manager and are injected as environment variables at pod start.",
     "Where are credentials such as tokens kept?",
     "Which CDN serves our static assets?",
     "Secrets like passwords and API tokens are stored in AWS Secrets Manager and exposed to pods through env vars when they boot.",
     "API keys and databse passwords live in AWS Secrets Manger and are injected as enviroment variables at pod start."),
    ("Code must pass `cargo fmt` and `cargo clippy -- -D warnings`; the pre-commit hook runs both.",
     "What style and lint rules does a change have to satisfy?",
     "How are Kafka consumer offsets committed?",
     "A git hook runs rustfmt and clippy with warnings treated as errors, and both must be clean.",
     "Code must pass `cargo fmt` and `cargo clippy -- -D warnings`; the pre-comit hook runs boht."),
    ("Feature branches are named `<ticket-id>-short-description` and are squash-merged after one approving review.",
     "What do I call my working branch, and how does it land?",
     "Which machine learning model ranks the search results?",
     "Name a branch after its ticket number plus a few words; once a reviewer approves, it gets squashed into main.",
     "Feature branhces are named `<ticket-id>-short-description` and are squash-merged after one aproving review."),
    ("Breaking API changes require a new `/v2` URL prefix; the old version stays available for six months.",
     "What happens when an endpoint has to change in an incompatible way?",
     "How do we handle GDPR data deletion requests?",
     "Incompatible changes to the API go under a fresh /v2 path, and v1 keeps working for half a year.",
     "Breaking API chnages require a new `/v2` URL prefix; the old verison stays available for six monhts."),
    ("All timestamps are stored in UTC as RFC 3339 strings; conversion to local time happens only in the web client.",
     "In which time zone do we save dates?",
     "What font does the marketing website use?",
     "Dates are persisted as RFC 3339 text in UTC, and only the browser front end turns them into the user's local time.",
     "All timestamps are stored in UTC as RFC 3339 strigns; conversion to local time hapens only in the web cleint."),
    ("Database schema migrations are written with sqlx and applied automatically on startup; never edit a migration after it has been merged.",
     "How do table changes get applied to the database?",
     "Which Terraform version is pinned for the infrastructure code?",
     "sqlx migrations run by themselves when the service boots, and a merged migration file must never be modified.",
     "Database schema migratons are written with sqlx and applied automaticaly on startup; never edit a migration after it has been merged."),
    ("New features ship behind LaunchDarkly flags that default to off in production.",
     "How do we hide unfinished functionality from users?",
     "How are the iOS builds signed and uploaded to the App Store?",
     "Every new capability is wrapped in a LaunchDarkly toggle that starts disabled in prod.",
     "New featuers ship behind LaunchDarkly flgas that default to off in prodution."),
    ("The on-call rotation changes every Monday at 10:00 and pages go through PagerDuty.",
     "Who gets woken up when something breaks at night, and when does that person change?",
     "What is the retry policy for outgoing webhooks?",
     "PagerDuty delivers alerts, and the person on call hands over each Monday at ten in the morning.",
     "The on-call rotaton changes every Monday at 10:00 and pages go throgh PagerDuty."),
    ("Renovate opens dependency update PRs every weekend; patch updates are auto-merged if CI is green.",
     "How are third-party library upgrades handled?",
     "Which load testing tool do we use before big launches?",
     "Each weekend a bot called Renovate proposes version bumps, and patch-level ones merge themselves when the checks pass.",
     "Renovate opens dependancy update PRs every weekend; patch updates are auto-merged if CI is gren."),
    ("The admin dashboard is a React app built with Vite and styled with Tailwind CSS.",
     "What technology is the internal back-office UI made with?",
     "How is the Elasticsearch index rebuilt after a mapping change?",
     "Our admin console is written in React, bundled by Vite, with Tailwind for the styling.",
     "The admin dashbaord is a React app built with Vite and styled with Tailwind CSS."),
    ("Session data is cached in Redis with a 30-minute TTL; the cache is never the source of truth.",
     "Where do we keep user login state, and for how long?",
     "What is the vacation policy for contractors?",
     "Login sessions sit in Redis and expire after half an hour; nothing there is authoritative.",
     "Sesion data is cached in Redis with a 30-minute TTL; the cahce is never the source of truth."),
    ("The public API is rate limited to 100 requests per minute per API key, enforced at the nginx ingress.",
     "How many calls can a client make before being throttled?",
     "Which payment provider processes credit cards?",
     "Each key may send at most a hundred requests a minute to the public API; the nginx ingress enforces it.",
     "The public API is rate limted to 100 requests per minute per API key, enforced at the ngnix ingress."),
    ("Nightly database backups are written to S3 and kept for 35 days; a restore drill runs every quarter.",
     "How long do we retain copies of our data in case something is lost?",
     "How do we generate PDF invoices?",
     "Every night the database is dumped to S3, dumps are retained for five weeks, and we rehearse a restore quarterly.",
     "Nightly databse backups are writen to S3 and kept for 35 days; a restore dril runs every quarter."),
    ("To start the local stack, run `docker compose up -d` and then `make seed` to load sample data.",
     "How do I get the application running on my laptop?",
     "What is the SLA for the customer support chatbot?",
     "Bring the dev environment up with docker compose in detached mode, then populate it with `make seed`.",
     "To start the local stak, run `docker compose up -d` and then `make seed` to laod sample data."),
]

KEYWORD_QUESTIONS = [
    "Which version of PostgreSQL do we run?",
    "How do we deploy to production?",
    "What tests do I run before pushing?",
    "What format do commit messages use?",
    "How do we handle errors in our crates?",
    "Where do the logs go?",
    "Where are API keys stored?",
    "Do we run clippy on every commit?",
    "How should feature branches be named?",
    "How do we version the API?",
    "How are timestamps stored?",
    "How do we run database migrations?",
    "Do we use feature flags?",
    "How does the on-call rotation work?",
    "How are dependency updates handled?",
    "What is the admin dashboard built with?",
    "Where is session data cached?",
    "What is the API rate limit?",
    "How long are backups kept?",
    "How do I start the local stack?",
]
assert len(KEYWORD_QUESTIONS) == 20

# Absent subjects that nevertheless reuse a fact's keyword (nothing in the store answers them):
# the hardest negatives, and the ones a floor cannot be expected to reject.
KEYWORD_ABSENT = [
    "Which PostgreSQL extensions are enabled?",
    "Who is allowed to deploy to production on Fridays?",
    "How long do the integration tests take to run?",
    "Do we sign our commits with GPG?",
    "Where are the CI runner logs archived?",
    "How often are the API keys rotated?",
    "Which Redis version do we run?",
    "How do we monitor latency at the nginx ingress?",
    "Where are the S3 access logs stored?",
    "How is the React app tested?",
]

UNRELATED = [
    "What's a good recipe for banana bread?",
    "Who won the football world cup in 1998?",
    "How tall is Mount Everest?",
    "My cat likes to sleep on the warm laptop keyboard.",
    "The museum opens at nine on Saturdays.",
]

# Korean side set: (fact, question it answers, absent-subject question). all-MiniLM-L6-v2 is an
# English model; its tokenizer decomposes Hangul into jamo (strip_accents under lowercase).
KOREAN = [
    ("데이터베이스 백업은 매일 밤 실행된다.", "DB 백업은 언제 돌아가나요?", "결제 대행사는 어디를 쓰나요?"),
    ("운영 배포는 main 브랜치에 머지하면 자동으로 진행된다.", "프로덕션에 코드를 어떻게 내보내나요?", "사내 휴가 규정은 어떻게 되나요?"),
    ("커밋 메시지는 Conventional Commits 형식을 따른다.", "깃 커밋 설명은 어떤 규칙으로 쓰나요?", "검색 결과 순위는 어떤 모델이 정하나요?"),
    ("로그는 JSON 형식으로 표준 출력에 기록된다.", "서비스 로그는 어떤 포맷인가요?", "모바일 앱 번역은 어떻게 하나요?"),
    ("API 키는 AWS Secrets Manager에 보관한다.", "비밀 토큰은 어디에 저장하나요?", "CDN은 무엇을 사용하나요?"),
]


def stats(xs):
    return min(xs), statistics.median(xs), max(xs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="calibrate RECALL_MIN_SIMILARITY for a local model")
    ap.add_argument("model_dir", nargs="?", default=str(DEFAULT_MODEL_DIR))
    ap.add_argument("--json", metavar="OUT", help="also write every probe's numbers here")
    args = ap.parse_args(argv)

    architecture = json.loads((Path(args.model_dir) / "config.json").read_text()).get("model_type")
    model = MPNetNumpy(args.model_dir) if architecture == "mpnet" else SentenceBert(args.model_dir)
    facts = [d[0] for d in DATA]
    F = model.embed(facts)

    # Questions are embedded as recall embeds them (the model's query prompt); restatements as
    # remember's duplicate check does (the passage prompt, like what is stored).
    def best(texts, store, query=True):
        S = model.embed(texts, query=query) @ store.T  # unit vectors: dot = cosine
        return S

    Sq = best([d[1] for d in DATA], F)
    Sk = best(KEYWORD_QUESTIONS, F)
    Sa = best([d[2] for d in DATA], F)
    Sr = best([d[3] for d in DATA], F, query=False)
    St = best([d[4] for d in DATA], F, query=False)
    Su = best(UNRELATED, F)
    Ska = best(KEYWORD_ABSENT, F)

    idx = np.arange(len(DATA))
    correct = Sq[idx, idx]                       # cosine of each question to ITS fact
    top1 = int((Sq.argmax(1) == idx).sum())
    absent = Sa.max(1)
    kw = Sk[idx, idx]
    kw_top1 = int((Sk.argmax(1) == idx).sum())
    reworded = Sr[idx, idx]
    typo = St[idx, idx]
    unrelated = Su.max(1)
    kw_absent = Ska.max(1)
    rw_top1 = int((Sr.argmax(1) == idx).sum())
    ty_top1 = int((St.argmax(1) == idx).sum())

    KF = model.embed([k[0] for k in KOREAN])
    Kq = model.embed([k[1] for k in KOREAN], query=True) @ KF.T
    Ka = model.embed([k[2] for k in KOREAN], query=True) @ KF.T
    kidx = np.arange(len(KOREAN))
    k_correct, k_absent = Kq[kidx, kidx], Ka.max(1)
    k_top1 = int((Kq.argmax(1) == kidx).sum())
    # Korean questions against the English store (cross-lingual), English facts 1,2,4,6,7
    xl_map = [0, 1, 3, 5, 6]
    Kx = model.embed([k[1] for k in KOREAN], query=True) @ F.T
    xl_correct = Kx[kidx, xl_map]

    rows = [
        ("correct answer (question → its fact)", correct, f"fact ranked 1st: {top1}/{len(DATA)}"),
        ("correct, keyword question (→ its fact)", kw, f"fact ranked 1st: {kw_top1}/{len(DATA)}"),
        ("absent subject (best over store)", absent, ""),
        ("absent subject sharing a keyword (best)", kw_absent, ""),
        ("reworded restatement (→ its fact)", reworded, f"ranked 1st: {rw_top1}/{len(DATA)}"),
        ("typo version (→ its fact)", typo, f"ranked 1st: {ty_top1}/{len(DATA)}"),
        ("off-domain unrelated (best over store)", unrelated, ""),
        ("Korean: correct (5 Korean facts)", k_correct, f"ranked 1st: {k_top1}/{len(KOREAN)}"),
        ("Korean: absent (best over 5 Korean facts)", k_absent, ""),
        ("Korean question → English fact", xl_correct, ""),
    ]
    print(f"model dir: {args.model_dir}\n")
    print("| probe | n | min | median | max | note |")
    print("|---|---|---|---|---|---|")
    for name, xs, note in rows:
        lo, med, hi = stats(list(xs))
        print(f"| {name} | {len(xs)} | {lo:.3f} | {med:.3f} | {hi:.3f} | {note} |")

    print("\nper fact (question→fact, best absent, reworded, typo):")
    for i, d in enumerate(DATA):
        print(f"  {i+1:2d} q={correct[i]:.3f}{'' if Sq[i].argmax()==i else ' (not top1: fact %d %.3f)' % (Sq[i].argmax()+1, Sq[i].max())}"
              f"  kw={kw[i]:.3f}{'' if Sk[i].argmax()==i else ' (not top1)'}"
              f"  absent={absent[i]:.3f} (→fact {Sa[i].argmax()+1})  rw={reworded[i]:.3f}  typo={typo[i]:.3f}")

    print("\nfloor sweep (English set): hard / keyword questions kept, absent and off-domain rejected")
    for f in np.arange(0.05, 0.96, 0.05):
        kept = int((correct >= f).sum())
        kwk = int((kw >= f).sum())
        rej = int((absent < f).sum())
        urej = int((unrelated < f).sum())
        karej = int((kw_absent < f).sum())
        # full gate of docs/ranking.md#floor-and-keep-ratio in balanced mode (keepRatio 0.6): does the right fact
        # survive floor AND ratio for the hard questions?
        surv = sum(1 for i in idx if Sq[i, i] >= f and Sq[i, i] >= 0.6 * Sq[i].max())
        print(f"  floor {f:.2f}: kept {kept:2d}/{len(DATA)} hard, {kwk:2d}/{len(DATA)} keyword;  absent rejected {rej:2d}/{len(DATA)}"
              f"  kw-absent rejected {karej}/{len(KEYWORD_ABSENT)}  off-domain rejected {urej}/{len(UNRELATED)}"
              f"  | hard fact survives floor+ratio(0.6) {surv}/{len(DATA)}"
              f"  | HIGH (≥{3*f:.2f}): hard {int((correct >= 3*f).sum())}, kw {int((kw >= 3*f).sum())},"
              f" absent {int((absent >= 3*f).sum())}")

    for name, xs in (("hard", correct), ("keyword", kw)):
        lo = float(xs.min())
        print(f"\nlowest {name} correct-answer cosine: {lo:.3f}; a floor at it rejects "
              f"{int((absent < lo).sum())}/{len(DATA)} absent-subject questions")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "correct": correct.tolist(), "keyword": kw.tolist(), "absent": absent.tolist(), "reworded": reworded.tolist(),
            "typo": typo.tolist(), "unrelated": unrelated.tolist(), "keyword_absent": kw_absent.tolist(),
            "korean_correct": k_correct.tolist(), "korean_absent": k_absent.tolist(),
            "korean_to_english": xl_correct.tolist()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
