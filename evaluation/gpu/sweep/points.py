"""The sweep's point catalogue and its design arithmetic (pure Python: no torch, no CUDA).

Each point is one small job that runs out of memory (or, for a few controls, does not) on a
GPU whose free memory is fixed by the design. Names used below (all bytes):

- ``live``: what the slack pattern leaves allocated (PyTorch's ``allocated`` figure);
- ``slack`` (U): what the pattern leaves reserved but unallocated under the native allocator,
  after the allocator's own OOM path has released every fully free segment;
- ``request`` (R): the allocation that fails, one tensor (so "Tried to allocate" prints R);
- ``headroom`` (H): U + room - R at the failing request, i.e. what would be left had the
  cached memory been perfectly packed. H < 0 is a true capacity failure; 0 <= H < U is the
  space the fragmentation rule claims an allocator setting can recover.

The job's space (``budget``: device memory left after the ballast, or the cap of a memory
fraction) is ``live + kept + R + H``, with ``kept`` what the job holds from earlier steps when
it fails (a leak). Under the native allocator the free memory at the failing request is then
``R + H - U``: the pattern must be buildable (that is >= 0) and the request must not fit
(that is < R, i.e. H < U). ``validate`` checks both, and the other preconditions below, so a
wrong point is caught here on a CPU, not on the GPU.

Allocator facts used (PyTorch's native caching allocator, torch 2.x): requests <= 1 MiB go to
the small pool (2 MiB segments); 1-10 MiB requests are carved from 20 MiB segments; larger ones
get a segment of their size rounded up to 2 MiB; a cached block is split only when more than
1 MiB would remain; expandable segments map 20 MiB pages (large pool) and 2 MiB pages (small).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

KiB: Final = 1024
MiB: Final = 1024**2
GiB: Final = 1024**3

SMALL_SIZE: Final = 1 * MiB  # largest small-pool request
SMALL_SEGMENT: Final = 2 * MiB
LARGE_SEGMENT: Final = 20 * MiB  # segment for 1-10 MiB requests; expandable page (large pool)
MIN_LARGE_ALLOC: Final = 10 * MiB
ROUND_LARGE: Final = 2 * MiB

PATTERNS: Final = ("none", "split", "pinned", "small", "round")
DYNAMICS: Final = ("static", "leak", "state")
MODES: Final = ("full", "cap")
JOBS: Final = ("alloc", "mlp")


def segment_size(size: int) -> int:
    """The segment the native allocator cudaMallocs for a ``size`` request (no cached block)."""
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass(frozen=True)
class Pattern:
    """Where the slack sits: built before the job's first step, kept alive through it.

    - ``none``: nothing.
    - ``split``: ``count`` tensors of ``first`` bytes (one segment each), all freed, then
      ``count`` tensors of ``size`` bytes: each splits one cached segment and pins its
      remainder (``first - size``): large-pool slack in pieces.
    - ``pinned``: ``count`` 20 MiB segments filled with ``size`` blocks (1-10 MiB), one kept
      per segment: the classic pinned-segment pattern (slack ``20 MiB - size`` per segment).
    - ``small``: ``count`` 2 MiB small-pool segments of ``size`` blocks (<= 1 MiB), one of
      every ``keep_every`` kept: small-pool slack, which no large request can use.
    - ``round``: ``count`` tensors of ``size`` bytes whose segment remainder (<= 1 MiB) is not
      split: slack counted as *allocated*, invisible in the OOM message.
    """

    kind: str
    count: int = 0
    size: int = 0
    first: int = 0
    keep_every: int = 1

    def per_segment(self) -> int:
        if self.kind == "pinned":
            return LARGE_SEGMENT // self.size
        if self.kind == "small":
            return SMALL_SEGMENT // self.size
        return 1

    def kept_per_segment(self) -> int:
        if self.kind == "pinned":
            return 1
        if self.kind == "small":
            return self.per_segment() // self.keep_every
        return 1

    @property
    def allocations(self) -> int:
        """How many tensors the pattern creates (a cost figure for the time estimate)."""
        if self.kind in ("pinned", "small"):
            return self.count * self.per_segment()
        if self.kind == "split":
            return 2 * self.count
        return self.count

    @property
    def live(self) -> int:
        """Bytes PyTorch reports allocated once the pattern is built (native allocator)."""
        if self.kind == "split":
            return self.count * self.size
        if self.kind in ("pinned", "small"):
            return self.count * self.kept_per_segment() * self.size
        if self.kind == "round":
            return self.count * segment_size(self.size)
        return 0

    @property
    def slack(self) -> int:
        """Reserved-but-unallocated bytes the pattern leaves (native allocator)."""
        if self.kind == "split":
            return self.count * (self.first - self.size)
        if self.kind == "pinned":
            return self.count * (LARGE_SEGMENT - self.size)
        if self.kind == "small":
            return self.count * (SMALL_SEGMENT - self.kept_per_segment() * self.size)
        return 0

    @property
    def hidden(self) -> int:
        """Slack counted as allocated (the unsplit segment remainder of ``round``)."""
        if self.kind == "round":
            return self.count * (segment_size(self.size) - self.size)
        return 0

    @property
    def largest_piece(self) -> int:
        """The largest free large-pool piece of the slack: no later large request may fit it."""
        if self.kind == "split":
            return self.first - self.size
        if self.kind == "pinned":
            return LARGE_SEGMENT - self.size
        return 0

    def describe(self) -> str:
        mib = _mib
        if self.kind == "split":
            return f"split {self.count}x {mib(self.first)}->{mib(self.size)}"
        if self.kind == "pinned":
            return f"pinned {self.count}x20MiB seg, {mib(self.size)} kept"
        if self.kind == "small":
            return f"small {self.count}x2MiB seg, {self.size // KiB}KiB 1/{self.keep_every} kept"
        if self.kind == "round":
            return f"round {self.count}x {mib(self.size)}"
        return "none"

    def problems(self) -> list[str]:
        out: list[str] = []
        if self.kind not in PATTERNS:
            return [f"unknown pattern {self.kind!r}"]
        if self.kind == "none":
            return out
        if self.count <= 0:
            out.append("count must be > 0")
        if self.kind == "split":
            if self.first < MIN_LARGE_ALLOC or self.first % ROUND_LARGE:
                out.append("split: first must be >= 10 MiB and a 2 MiB multiple (own segment)")
            if not SMALL_SIZE < self.size < self.first - SMALL_SIZE:
                out.append("split: size must be large-pool and leave > 1 MiB (split happens)")
        if self.kind == "pinned":
            tail = LARGE_SEGMENT % self.size if self.size else 0
            if not SMALL_SIZE < self.size < MIN_LARGE_ALLOC or 0 < tail <= SMALL_SIZE:
                out.append("pinned: size must be 1-10 MiB, its 20 MiB tail 0 or > 1 MiB")
        if self.kind == "small":
            if not 0 < self.size <= SMALL_SIZE or SMALL_SEGMENT % self.size:
                out.append("small: size must be <= 1 MiB and divide 2 MiB")
            elif self.per_segment() % self.keep_every:
                out.append("small: keep_every must divide the blocks per segment")
        if self.kind == "round":
            rest = segment_size(self.size) - self.size
            if self.size < MIN_LARGE_ALLOC or not 0 < rest <= SMALL_SIZE:
                out.append("round: size >= 10 MiB with a 0 < remainder <= 1 MiB (not split)")
        return out


@dataclass(frozen=True)
class Mlp:
    """A real training job (Linear+GELU stack, AdamW) sized from a probe run of itself.

    The budget is ``peak_allocated + offset + gap_share * (peak_reserved - peak_allocated)``
    of an unconstrained run of the same job under the native allocator (the probe).
    """

    width: int = 4096
    depth: int = 4
    tokens: tuple[int, ...] = (16384,) * 5
    offset: int = 0
    gap_share: float = 0.0

    def describe(self) -> str:
        shape = "static" if len(set(self.tokens)) == 1 else "varlen"
        return (
            f"mlp {self.depth}x{self.width} {shape} tokens {min(self.tokens)}-{max(self.tokens)}; "
            f"budget = probe peak alloc {self.offset / MiB:+.0f} MiB + {self.gap_share:g} x gap"
        )

    def key(self) -> str:
        """Points with the same key share one probe."""
        return f"{self.width}x{self.depth}:" + ",".join(map(str, self.tokens))


@dataclass(frozen=True)
class Point:
    name: str
    group: str
    why: str
    mode: str
    pattern: Pattern = field(default_factory=lambda: Pattern("none"))
    request: int = 0
    headroom: int = 0
    dynamics: str = "static"
    grow: int = 0
    """leak: bytes kept every step; state: optimizer-like state created at the end of step 1."""
    fail_step: int = 1
    """The step whose request fails under the native allocator (leak: after its kept bytes)."""
    extra_steps: int = 4
    """Steps after the failing one: a setting 'removes the OOM' only if the job gets through."""
    mlp: Mlp | None = None

    @property
    def job(self) -> str:
        return "mlp" if self.mlp is not None else "alloc"

    @property
    def steps(self) -> int:
        if self.mlp is not None:
            return len(self.mlp.tokens)
        return self.fail_step + self.extra_steps

    @property
    def kept_at_failure(self) -> int:
        return self.fail_step * self.grow if self.dynamics == "leak" else 0

    def budget(self, probe: dict[str, int] | None = None) -> int:
        """Device bytes the job may use (after the ballast, or under the cap)."""
        if self.mlp is not None:
            if probe is None:
                raise ValueError(f"{self.name}: an mlp point needs its probe")
            gap = probe["peak_reserved"] - probe["peak_allocated"]
            return int(probe["peak_allocated"] + self.mlp.offset + self.mlp.gap_share * gap)
        return self.pattern.live + self.kept_at_failure + self.request + self.headroom

    def native_free_at_request(self) -> int:
        """Predicted device (or cap) room at the failing request, native allocator."""
        return self.request + self.headroom - self.pattern.slack

    def expect_native_oom(self) -> bool:
        return self.headroom < self.pattern.slack

    def problems(self) -> list[str]:
        out = [f"{self.name}: {p}" for p in self.pattern.problems()]
        if self.mode not in MODES:
            out.append(f"{self.name}: unknown mode {self.mode!r}")
        if self.dynamics not in DYNAMICS:
            out.append(f"{self.name}: unknown dynamics {self.dynamics!r}")
        if self.mlp is not None:
            if self.mode != "full":
                out.append(f"{self.name}: mlp points run on the full GPU")
            return out
        r, piece = self.request, self.pattern.largest_piece
        if r < MIN_LARGE_ALLOC or r % ROUND_LARGE:
            out.append(f"{self.name}: request must be >= 10 MiB and a 2 MiB multiple")
        if r <= piece:
            out.append(f"{self.name}: request fits a slack piece ({_mib(piece)} MiB)")
        if self.native_free_at_request() < 0:
            out.append(
                f"{self.name}: the pattern cannot be built: R + H - U = "
                f"{_mib(self.native_free_at_request())} MiB < 0"
            )
        if self.dynamics == "leak":
            g = self.grow
            if g < MIN_LARGE_ALLOC or g % ROUND_LARGE or g <= piece:
                out.append(f"{self.name}: leak grow must be a large 2 MiB multiple > the pieces")
            if self.fail_step < 2:
                out.append(f"{self.name}: a leak fails after some steps (fail_step >= 2)")
            if self.expect_native_oom() and g + self.headroom < self.pattern.slack:
                out.append(f"{self.name}: leak would fail before step {self.fail_step}")
        elif self.dynamics == "state":
            if self.grow < MIN_LARGE_ALLOC or self.grow % ROUND_LARGE:
                out.append(f"{self.name}: state must be >= 10 MiB and a 2 MiB multiple")
        elif self.grow:
            out.append(f"{self.name}: a static job does not grow")
        if self.dynamics != "leak" and self.fail_step != 1:
            out.append(f"{self.name}: only a leak fails after step 1")
        return out

    def describe(self) -> str:
        if self.mlp is not None:
            return self.mlp.describe()
        dyn = self.dynamics
        if dyn == "leak":
            dyn = f"leak {_mib(self.grow)} MiB/step, fails at step {self.fail_step}"
        elif dyn == "state":
            dyn = f"state {_mib(self.grow)} MiB at step 1"
        return (
            f"{self.pattern.describe()}; R {_mib(self.request)} MiB; H {_mib(self.headroom)} MiB; "
            f"{dyn}"
        )


def _mib(n: int) -> str:
    v = n / MiB
    return f"{v:.0f}" if v == int(v) else f"{v:.1f}"


def validate(points: list[Point]) -> list[str]:
    """Every design problem in the catalogue (an empty list when it is sound)."""
    out: list[str] = []
    names = [p.name for p in points]
    out += [f"duplicate point name {n!r}" for n in sorted({n for n in names if names.count(n) > 1})]
    for p in points:
        out += p.problems()
    return out


# ---------------------------------------------------------------------------------------------
# The catalogue. Order is priority: when a run hits its deadline, the later points are skipped.
# Full-GPU points run first in a process (under the ballast), capped points after them (a
# memory fraction cannot be unset once set), each group in this order.

M = MiB


def _split(count: int, first_mib: int, size_mib: int) -> Pattern:
    return Pattern("split", count=count, first=first_mib * M, size=size_mib * M)


def _pinned(count: int, size_mib: int) -> Pattern:
    return Pattern("pinned", count=count, size=size_mib * M)


def _small(count: int, size_kib: int, keep_every: int) -> Pattern:
    return Pattern("small", count=count, size=size_kib * KiB, keep_every=keep_every)


def _round(count: int, size_mib: int) -> Pattern:
    return Pattern("round", count=count, size=size_mib * M)


def _series(
    group: str,
    tag: str,
    why: str,
    mode: str,
    pattern: Pattern,
    r_mib: int,
    h_mib: tuple[int, ...],
    dynamics: str = "static",
    grow_mib: int = 0,
    fail_step: int = 1,
) -> list[Point]:
    """One point per headroom: ``GROUP-MODE-TAG-hH[-leakG|-stateG]``."""
    suffix = f"-{dynamics}{grow_mib}" if dynamics != "static" else ""
    return [
        Point(
            f"{group}-{mode}-{tag}-h{h}{suffix}",
            group,
            why,
            mode,
            pattern,
            r_mib * M,
            h * M,
            dynamics,
            grow_mib * M,
            fail_step,
        )
        for h in h_mib
    ]


def _mlp_points() -> list[Point]:
    """K: real training jobs (MLP + AdamW), the budget from the job's own probe run."""
    static = (16384,) * 5
    varlen = (8192, 20480, 12288, 24576, 6144, 16384, 28672, 10240)
    out = []
    for tag, tokens, offset_mib, share in (
        ("static-off-256", static, -256, 0.0),
        ("static-gap0.5", static, 0, 0.5),
        ("varlen-off-256", varlen, -256, 0.0),
        ("varlen-gap0.5", varlen, 0, 0.5),
        ("varlen-gap0.9", varlen, 0, 0.9),
    ):
        why = "real MLP+AdamW training, " + tag.split("-")[0] + " batch"
        mlp = Mlp(tokens=tokens, offset=offset_mib * M, gap_share=share)
        out.append(Point(f"K-full-mlp-{tag}", "K", why, "full", mlp=mlp))
    return out


def _catalogue() -> list[Point]:
    u84, s40 = _split(7, 32, 20), _split(40, 64, 40)
    u1536 = _split(64, 64, 40)
    issue = "issue class: full GPU, U 84 MiB, R 64 MiB"
    # fmt: off
    return [
        # A: the issue's "full GPU, a little slack" class: PyTorch holds ~99% of the GPU,
        # 12-84 MiB reserved-unallocated in 12 MiB pieces, a 64 MiB request, headroom -8..72
        # MiB (with U 84 MiB and R 64 MiB, H cannot be below 20 MiB: free = R + H - U >= 0);
        # static vs leaking vs optimizer state made at step 1.
        *_series("A", "u84", issue + ", static", "full", u84, 64, (24, 48, 72)),
        *_series("A", "u84", issue + ", leak 128 MiB/step", "full", u84, 64, (24, 72),
                 "leak", 128, 6),
        *_series("A", "u84", issue + ", 256 MiB state at step 1", "full", u84, 64, (24, 72),
                 "state", 256),
        *_series("A", "u48", "issue class, U 48 MiB, static", "full", _split(4, 32, 20), 64,
                 (-8, 8, 24)),
        *_series("A", "u36", "issue class, U 36 MiB", "full", _split(3, 32, 20), 64, (16,)),
        *_series("A", "u24", "U 24 MiB (below today's 0.25 R)", "full", _split(2, 32, 20), 64,
                 (16,)),
        *_series("A", "u12", "U 12 MiB: one split remainder", "full", _split(1, 32, 20), 64,
                 (8,)),
        # B: U against R at small headroom: U/R from 0.09 to 1.5 (today's rule wants
        # U >= 0.25 R), 24 MiB pieces, R 1 GiB.
        *[p for n in (4, 8, 16, 32) for p in _series(
            "B", f"u{n * 24}", "U/R sweep at H 64 MiB", "full", _split(n, 64, 40), 1024, (64,))],
        *_series("B", "u768", "U/R sweep, H 512 MiB", "full", _split(32, 64, 40), 1024, (512,)),
        *_series("B", "u1536", "U 1.5 R (the smallest H it allows)", "full", u1536, 1024,
                 (640,)),
        # C: GiB-scale slack; pieces below vs above max_split_size_mb:128.
        *_series("C", "u4240", "U 4.1 GiB in 424 MiB pieces (both sizes >= 128 MiB)", "full",
                 _split(10, 1024, 600), 2048, (2304, 3072)),
        *_series("C", "u1440-96to60", "U 1.4 GiB, segments 96 MiB (< 128 MiB)", "full",
                 _split(40, 96, 60), 1024, (512, 1024)),
        *_series("C", "u1440-160to100", "U 1.4 GiB, 160 MiB segments split by 100 MiB "
                 "(max_split_size_mb:128 stops the split)", "full", _split(24, 160, 100), 1024,
                 (512,)),
        # D: the classic pinned pattern (8 MiB blocks, one kept per 20 MiB segment):
        # expandable segments pack the blocks but cannot free 8 MiB holes in 20 MiB pages.
        *_series("D", "pin8-u4104", "pinned 8 MiB, U 4 GiB, R 4.2 GiB", "full", _pinned(342, 8),
                 4302, (512, 1536, 3072)),
        *_series("D", "pin8-u1032", "pinned 8 MiB, U 1 GiB, R 1 GiB", "full", _pinned(86, 8),
                 1024, (128, 768)),
        # E: 2 MiB blocks, one per 20 MiB segment: every hole sits in a page with a live block.
        *_series("E", "pin2-u2052", "pinned 2 MiB, U 2 GiB", "full", _pinned(114, 2), 2048,
                 (256, 1024)),
        # F: small-pool slack (512 KiB blocks): no large request can use it under any setting.
        *_series("F", "small-u1536", "small pool, U 1.5 GiB", "full", _small(1024, 512, 4), 1024,
                 (640, 1280)),
        *_series("F", "small-u96", "small pool, issue-sized U 96 MiB, R 64 MiB", "full",
                 _small(64, 512, 4), 64, (48,)),
        # G: rounding slack counted as allocated (11 MiB tensors in 12 MiB segments): the
        # message shows U ~ 0 and H < 0, yet packing (expandable segments) recovers 512 MiB.
        *_series("G", "round-hidden512", "11 MiB tensors: 512 MiB hidden in allocated", "full",
                 _round(512, 11), 1024, (-128, -384, -640)),
        # H: controls: true capacity (no slack), and one point that must not run out.
        *_series("H", "none", "capacity control", "full", Pattern("none"), 1024, (-16, -768)),
        Point("H-full-none-h64-noOOM", "H", "no-OOM control (checks the arithmetic)", "full",
              Pattern("none"), 1024 * M, 64 * M),
        # I: dynamics at GiB-scale slack (U 1.5 GiB, R 1 GiB).
        *_series("I", "u1536", "leak 1 GiB/step, U 1.5 GiB", "full", u1536, 1024, (640,),
                 "leak", 1024, 6),
        *_series("I", "u1536", "leak 256 MiB/step: H buys ~5 steps", "full", u1536, 1024,
                 (1408,), "leak", 256, 6),
        *_series("I", "u1536", "1 GiB state at step 1 > H", "full", u1536, 1024, (640,),
                 "state", 1024),
        *_series("I", "u1536", "512 MiB state at step 1 < H", "full", u1536, 1024, (1280,),
                 "state", 512),
        *_mlp_points(),
        # J: capped by a memory fraction (no ballast): U is a large share of what PyTorch holds.
        *_series("J", "u960", "cap, U 37% of reserved", "cap", s40, 2048, (-256, 64, 512)),
        *_series("J", "u1760", "cap, U 69% of reserved", "cap", _split(40, 64, 20), 2048,
                 (64, 1024)),
        Point("J-cap-pin8-frag_pinned", "J", "frag_pinned.py's job: 7 GiB cap, 161 pinned "
              "segments", "cap", _pinned(161, 8), 4302 * M, 1578 * M),
        *_series("J", "pin8", "frag_pinned with a tighter cap (6.2 GiB)", "cap", _pinned(161, 8),
                 4302, (768,)),
        *_series("J", "pin2-u3600", "cap, pinned 2 MiB, U 90% of reserved", "cap",
                 _pinned(200, 2), 2048, (1600,)),
        *_series("J", "small-u1536", "cap, small-pool U 75% of reserved", "cap",
                 _small(1024, 512, 4), 1024, (640,)),
        *_series("J", "none", "cap too small (memory-fraction-cap control)", "cap",
                 Pattern("none"), 2048, (-512,)),
        *_series("J", "u84", "issue class under a cap", "cap", u84, 64, (24,)),
        *_series("J", "u192", "cap, leak 256 MiB/step", "cap", _split(8, 64, 40), 512, (128,),
                 "leak", 256, 6),
        *_series("J", "u960", "cap, 1 GiB state at step 1 > H", "cap", s40, 2048, (512,),
                 "state", 1024),
        *_series("J", "u960", "cap, 256 MiB state at step 1 < H", "cap", s40, 2048, (512,),
                 "state", 256),
    ]
    # fmt: on


POINTS: Final[list[Point]] = _catalogue()


def select(names: str | None) -> list[Point]:
    """The catalogue, or the named points (comma-separated names or group letters)."""
    if not names:
        return list(POINTS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    by_name = {p.name: p for p in POINTS}
    out: list[Point] = []
    for w in wanted:
        if w in by_name:
            out.append(by_name[w])
        elif any(p.group == w for p in POINTS):
            out += [p for p in POINTS if p.group == w]
        else:
            raise ValueError(f"no point or group named {w!r}")
    return list(dict.fromkeys(out))


def run_order(points: list[Point]) -> list[Point]:
    """Full-GPU points first (under the ballast), then capped ones; catalogue order within."""
    return [p for p in points if p.mode == "full"] + [p for p in points if p.mode == "cap"]
