"""The load benchmark's corpus (bench/load/corpus.rs), ported so that every system here gets
exactly the memories and questions `cargo bench --bench load` uses: words drawn from a
4,000-word vocabulary with a Zipf-like law, and a marker word that makes every memory unique.

Rust's u64 arithmetic wraps; Python's ints do not, so every step is masked to 64 bits.
"""

import bisect

MASK = 0xFFFF_FFFF_FFFF_FFFF
VOCABULARY = 4000
SYLLABLES = [
    "ka", "lo", "mi", "ren", "tu", "sa", "vek", "no", "pi", "dar", "el", "os", "qua", "zi", "bel",
    "tor", "fin", "gu", "ha", "jo", "wex", "yl", "cru", "mon",
]
MEMORY_TYPES = ["project", "pattern", "reference", "conversation"]


def mix(z):
    """SplitMix64's output function (also the stub's), on a 64-bit state."""
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & MASK
    return z ^ (z >> 31)


class Rng:
    """SplitMix64, as corpus.rs's `Rng`."""

    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E37_79B9_7F4A_7C15) & MASK
        return mix(self.state)

    def below(self, n):
        return self.next() % n

    def unit(self):
        """A uniform float in [0, 1): the top 53 bits, exactly as Rust's f64 division."""
        return (self.next() >> 11) / float(1 << 53)


class Corpus:
    def __init__(self):
        self.words = [
            SYLLABLES[i % 24] + SYLLABLES[(i // 24) % 24] + SYLLABLES[(i // 576) % 24]
            for i in range(VOCABULARY)
        ]
        # Cumulative Zipf weights, summed in the same order as Rust (same f64 results).
        self.cumulative = []
        total = 0.0
        for rank in range(1, VOCABULARY + 1):
            total += 1.0 / rank
            self.cumulative.append(total)

    def word(self, rng):
        target = rng.unit() * self.cumulative[-1]
        # partition_point(|c| c < target) is the first index whose value is >= target.
        rank = bisect.bisect_left(self.cumulative, target)
        return self.words[min(rank, VOCABULARY - 1)]

    def some_words(self, rng, n):
        return " ".join(self.word(rng) for _ in range(n))

    def memory(self, rng, marker):
        """A memory of 12-20 words ending in its unique marker."""
        n = 12 + rng.below(9)
        return f"{self.some_words(rng, n)} {marker}"

    def question(self, rng):
        """A question of 3-6 words."""
        n = 3 + rng.below(4)
        return self.some_words(rng, n)


def seed_texts(per_tenant, tenant_index=0):
    """The memories seed.rs writes into tenant `tenant_index` (one tenant: index 0), in order.

    seed.rs draws, per memory, the text, then its age (unit), its type (below 4) and its use
    count (below 4) from one Rng(7); those draws are made here too so the texts stay the same
    ones, and are returned for a store that can take them (this server's import).
    """
    corpus = Corpus()
    rng = Rng(7)
    # Earlier tenants consume the stream first, as in seed.rs's flat_map over tenants.
    out = []
    for t in range(tenant_index + 1):
        for i in range(per_tenant):
            content = corpus.memory(rng, f"seed{t}x{i}")
            age = rng.unit()
            memory_type = MEMORY_TYPES[rng.below(4)]
            access_count = rng.below(4)
            if t == tenant_index:
                out.append((content, age, memory_type, access_count))
    return out


def calls(seed, worker, recall_heavy=True):
    """The calls drive.rs's worker `worker` of run `seed` sends, forever, as (tool, text).

    One tenant: drive.rs still draws the tenant (below(1)) on every call, so that draw is kept.
    """
    corpus = Corpus()
    rng = Rng(seed * 1000 + worker)
    n = 0
    while True:
        rng.below(1)
        remember = (not recall_heavy) or rng.below(10) == 0
        if remember:
            n += 1
            yield "remember", corpus.memory(rng, f"load{seed}w{worker}n{n}")
        else:
            yield "recall", corpus.question(rng)


if __name__ == "__main__":
    # SplitMix64 reference outputs (Vigna's splitmix64.c, seed 1234567), and a peek at the corpus.
    rng = Rng(1234567)
    got = [rng.next() for _ in range(5)]
    want = [6457827717110365317, 3203168211198807973, 9817491932198370423,
            4593380528125082431, 16408922859458223821]
    print("splitmix64 reference:", "ok" if got == want else f"MISMATCH {got}")
    texts = seed_texts(1000)
    print(len(texts), "seed texts; words per text:",
          min(len(t[0].split()) for t in texts), "-", max(len(t[0].split()) for t in texts))
