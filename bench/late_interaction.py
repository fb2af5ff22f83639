"""Late interaction on LoCoMo dev, measured offline (issue 48, item 4): does scoring a turn by
its best sentence against the question, beside the whole turn, recall more evidence?

Every turn is stored as recall's benchmark stores it (`[session date] speaker: text`, one
tenant per conversation; bench/locomo.rs); each of its sentences is embedded with the same
prefix. The vectors are the server's own (`cargo bench --bench vectors`); the keyword path is
BM25 as src/search/bm25.rs and src/search/terms.rs compute it (Snowball English stems,
the same stop words, k1 1.2, b 0.3), and the blend is recall's (src/ranking.rs, `rank`:
closeness from the model's baseline relative to the best, plus the keyword weight's share
of BM25 relative to the best, over the top 100 of each path). It reproduces the server's
e5 figures within a point (dense 0.450 against 0.441, hybrid 0.615 against 0.614).

    python3 bench/late_interaction.py texts ../shared/data/locomo-dev.json /tmp/li
    cargo bench --bench vectors -- .models/multilingual-e5-small /tmp/li/texts.json /tmp/li/e5
    python3 bench/late_interaction.py score /tmp/li e5 0.7

Needs numpy and PyStemmer (pip). Prints recall@5 per variant and keyword weight.
"""

import json
import math
import re
import sys

STOPWORDS = set("""a about after again all also am an and any are as at be been before being
both but by can could did do does doing done down during each few for from get got had has
have having he her here hers herself him himself his how i if in into is it its itself just me
more most my myself no nor not now of off on once only or other our ours out over own same she
should so some such than that the their theirs them then there these they this those through
to too under until up us very was we were what when where which while who whom why will with
would you your yours yourself""".split())


def sentences(text):
    return [s for s in re.split(r"(?<=[.!?])\s+(?=\S)", text.strip()) if s]


def texts(data_file, out):
    data = json.load(open(data_file))
    passages, parts, queries, conversations = [], [], [], []
    for item in data:
        c = item["conversation"]
        sessions = sorted(
            (int(m.group(1)), v, c[f"session_{m.group(1)}_date_time"])
            for k, v in c.items()
            if (m := re.fullmatch(r"session_(\d+)", k)) and isinstance(v, list)
            and f"session_{m.group(1)}_date_time" in c)
        turns = []
        for _, session, date in sessions:
            for t in session:
                prefix = f"[{date}] {t['speaker']}: "
                split = sentences(t["text"])
                turns.append({"id": t["dia_id"], "whole": len(passages),
                              "sentences": list(range(len(parts), len(parts) + len(split)))})
                passages.append(prefix + t["text"])
                parts.extend(prefix + s for s in split)
        questions = []
        for qa in item["qa"]:
            if qa.get("evidence"):
                questions.append({"at": len(queries), "evidence": qa["evidence"]})
                queries.append(qa["question"])
        conversations.append({"turns": turns, "questions": questions})
    json.dump({"passages": passages + parts, "queries": queries}, open(f"{out}/texts.json", "w"))
    json.dump({"whole": len(passages), "conversations": conversations},
              open(f"{out}/turns.json", "w"))


def score(out, model, baseline):
    import numpy as np
    import Stemmer

    stem = Stemmer.Stemmer("english")

    def terms(text):
        return [stem.stemWord(w) if w.isascii() and w.isalpha() else w
                for w in re.findall(r"[^\W_]+", text.lower()) if w not in STOPWORDS]

    turns = json.load(open(f"{out}/turns.json"))
    text = json.load(open(f"{out}/texts.json"))
    queries = np.fromfile(f"{out}/{model}.queries.f32", dtype="<f4")
    width = queries.size // len(text["queries"])
    queries = queries.reshape(-1, width)
    passages = np.fromfile(f"{out}/{model}.passages.f32", dtype="<f4").reshape(-1, width)
    whole_count = turns["whole"]

    def bm25(query, docs):
        n = len(docs)
        average = sum(map(len, docs)) / n
        query = list(dict.fromkeys(query))
        idf = [math.log(1 + (n - df + 0.5) / (df + 0.5))
               for df in (sum(w in d for d in docs) for w in query)]
        out = np.zeros(n)
        for i, d in enumerate(docs):
            norm = 1.2 * (1 - 0.3 + 0.3 * len(d) / average)
            for w, weight in zip(query, idf):
                tf = d.count(w)
                if tf:
                    out[i] += weight * tf * 2.2 / (tf + norm)
        return out

    def blend(similarity, keyword, weight):
        pool = np.zeros(len(similarity), bool)
        pool[np.argsort(-similarity)[:100]] = True
        pool[np.argsort(-keyword)[:100]] = True
        closeness = np.maximum(similarity - baseline, 0)
        top_keyword = keyword[pool].max()
        r = (1 - weight) * closeness / closeness.max()
        if top_keyword > 0 and weight > 0:
            r = r + weight * keyword / top_keyword
        return np.where(pool, r, -1)

    # One pass over the questions: every variant's scores per question.
    asked = []
    for c in turns["conversations"]:
        whole = passages[[t["whole"] for t in c["turns"]]]
        docs = [terms(text["passages"][t["whole"]]) for t in c["turns"]]
        ids = [t["id"] for t in c["turns"]]
        for q in c["questions"]:
            v = queries[q["at"]]
            w = whole @ v
            best = np.array([max((passages[whole_count + s] @ v for s in t["sentences"]),
                                 default=w[i]) for i, t in enumerate(c["turns"])])
            asked.append((ids, set(q["evidence"]), w, best, bm25(terms(text["queries"][q["at"]]), docs)))

    variants = {
        "whole turn": lambda w, s: w,
        "best sentence": lambda w, s: s,
        "mean of both": lambda w, s: (w + s) / 2,
        "larger of both": lambda w, s: np.maximum(w, s),
    }
    for name, similarity in variants.items():
        row = []
        for weight in (0.0, 0.3, 0.4, 0.5, 0.6):
            total = 0.0
            for ids, evidence, w, s, keyword in asked:
                ranked = np.argsort(-blend(similarity(w, s), keyword, weight), kind="stable")[:5]
                total += sum(ids[i] in evidence for i in ranked) / len(evidence)
            row.append(f"{weight}: {total / len(asked):.3f}")
        print(f"{name:15} " + "  ".join(row), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "texts":
        texts(sys.argv[2], sys.argv[3])
    else:
        score(sys.argv[2], sys.argv[3], float(sys.argv[4]))
