"""The entry points: a log (text, bytes or a binary stream) in, a Diagnosis out."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import BinaryIO, Final

from . import allocconf, formats
from .addressspace import ADDRESS_SPACE_ACTION, address_space_call
from .aftermath import TRACEBACK, later_failure, skipped_then_more
from .allocationlimit import ALLOCATION_LIMIT_ACTION, allocation_limit
from .classify import classify
from .impossible import (
    HAMI_ACCOUNTING,
    IMPOSSIBLE_ACTION,
    ZERO_ACTION,
    impossible_request,
    zero_request,
)
from .killed import KILLED_ACTION, killed_by_signal
from .leak import growth_from_log, growth_from_rate, growth_from_samples
from .logtext import (
    TAIL_BYTES,
    Hit,
    ScanResult,
    normalize_text,
    printable,
    quoted,
    scan_bytes,
    scan_stream,
)
from .model import Diagnosis, Figures, Growth, MemorySample, NodeEvidence, Recommendation
from .parse import hami_refusal, parse_hit, tensorflow_banner
from .phase import ENGINE_WARM_UP, FORWARD, STARTUP, engine_warm_up
from .proberecord import ProbeRecord, find_record, record_verdict
from .progress import steps_of_the_failing_work
from .recommend import EVICTION_FIX, Context, host_recommendation, phase_of, recommend
from .sizes import format_size
from .torchversion import UNKNOWN, TorchRange, find_banner, infer_from_message, parse_torch_version
from .wrapped import rejoin


def _release(explicit: str | None, banner_text: str, message: str) -> TorchRange:
    """Explicit version > a banner the job printed (if the wording agrees) > the wording alone."""
    given = parse_torch_version(explicit)
    if given is not None:
        return TorchRange.exact(given)
    inferred = infer_from_message(message) if message else UNKNOWN
    banner = find_banner(banner_text)
    if banner is not None:
        return TorchRange.exact(banner).intersect(inferred)
    return inferred


def diagnose(
    text: str | bytes,
    *,
    torch_version: str | None = None,
    alloc_conf: str | None = None,
    backend: str | None = None,
    node: NodeEvidence | None = None,
    samples: Sequence[MemorySample] = (),
    probe_record: ProbeRecord | None = None,
) -> Diagnosis:
    """Diagnose the last out-of-memory failure in a log. Never raises on any input text."""
    data = text.encode("utf-8", errors="replace") if isinstance(text, str) else text
    return diagnose_scan(
        scan_bytes(data),
        torch_version=torch_version,
        alloc_conf=alloc_conf,
        backend=backend,
        node=node,
        samples=samples,
        probe_record=probe_record,
    )


def diagnose_stream(
    stream: BinaryIO,
    *,
    torch_version: str | None = None,
    alloc_conf: str | None = None,
    backend: str | None = None,
    node: NodeEvidence | None = None,
    samples: Sequence[MemorySample] = (),
    probe_record: ProbeRecord | None = None,
) -> Diagnosis:
    """``diagnose`` for a binary file object, read in chunks (memory bounded for any size)."""
    return diagnose_scan(
        scan_stream(stream),
        torch_version=torch_version,
        alloc_conf=alloc_conf,
        backend=backend,
        node=node,
        samples=samples,
        probe_record=probe_record,
    )


def diagnose_scan(
    scan: ScanResult,
    *,
    torch_version: str | None = None,
    alloc_conf: str | None = None,
    backend: str | None = None,
    node: NodeEvidence | None = None,
    samples: Sequence[MemorySample] = (),
    probe_record: ProbeRecord | None = None,
) -> Diagnosis:
    """``probe_record``: the OOM probe's record for this failure (from the termination message
    or a file); without one, a record line the probe printed just before the failure is used
    when its request matches the message's."""
    growth = growth_from_samples(samples)
    rate = growth_from_rate(node.growth_bytes_per_second) if node is not None else None
    if scan.last is None:
        scan = _rejoined(scan)
    hit = scan.last
    if hit is None:
        return _not_found(scan, torch_version, alloc_conf, backend, growth)
    later = later_failure(scan.tail, hit.line.rank)
    # HAMi-core's own allocation failing is, like its refusal, returned to the job, which may
    # free its cache and retry (the review's case 10)
    own_failure = hit.family == formats.CUDA_ERROR and formats.HAMI_ALLOCATE in hit.line.text
    if hit.family == formats.HAMI or own_failure:
        after = _after_refusal(scan, hit, later)
        if isinstance(after, ScanResult):  # another failure followed the refusal: that one
            return diagnose_scan(
                after, torch_version=torch_version, alloc_conf=alloc_conf, backend=backend,
                node=node, samples=samples, probe_record=probe_record,
            )
        if after is not None:
            return _not_found(
                scan, torch_version, alloc_conf, backend, growth,
                _handled_refusal(after, card=own_failure),
            )
        later = None
    if later is not None:
        return _not_found(scan, torch_version, alloc_conf, backend, growth, _went_on(later))
    if skipped_then_more(hit.family, scan.tail):
        skipped = quoted(hit.line.text)
        return _not_found(scan, torch_version, alloc_conf, backend, growth, _skipped(skipped))
    reserve = address_space_call(hit.after)
    if reserve is not None:
        return _not_found(scan, torch_version, alloc_conf, backend, growth, _reserved(reserve))
    capped = allocation_limit(hit.line.text, hit.precontext)
    if capped is not None:
        return _not_found(scan, torch_version, alloc_conf, backend, growth, _capped(capped))
    event = parse_hit(hit)
    refused = hami_refusal(hit.precontext) if event.family in _REFUSAL_RAISED else None
    if refused is not None:  # HAMi refused it first: the pod's vGPU limit, whatever the figures
        event = replace(event, family=formats.HAMI, figures=replace(
            event.figures, process_bytes=refused[0], allowed_bytes=refused[1]))
    size = impossible_request(event)
    if size is not None:
        why = _impossible(size, accounting=event.family == formats.HAMI)
        return _not_found(scan, torch_version, alloc_conf, backend, growth, why)
    if zero_request(event):
        why = _Dismissed(
            "no out-of-memory failure: it asked for 0 bytes, a bug, not memory running out",
            ZERO_ACTION,
            "zero_request",
            "0 bytes",
        )
        return _not_found(scan, torch_version, alloc_conf, backend, growth, why)
    release = _release(torch_version, scan.head + "\n" + hit.precontext, event.message)
    if event.framework not in (None, "pytorch") and torch_version is None:
        release = UNKNOWN
    growth = growth or growth_from_log(hit.precontext)
    if event.backend == allocconf.ASYNC:
        chosen = allocconf.ASYNC
    else:
        entries = allocconf.check(alloc_conf).entries if alloc_conf else ()
        chosen = allocconf.effective_backend(entries, backend)
    current = (
        allocconf.check(alloc_conf, release, chosen, rocm=event.rocm)
        if alloc_conf is not None
        else None
    )
    record = probe_record if probe_record is not None else _record_before(hit.precontext)
    if event.family == formats.RETRY_EXHAUSTED and record is not None:
        # the loop caught every OOM; the probe's last record is the last of them
        event = replace(event, figures=_record_figures(record))
    if record is not None and not _same_request(record, event.figures.requested_bytes):
        record = None
    phase = phase_of(event, hit.precontext)
    if phase in (None, FORWARD) and engine_warm_up(scan.tail):
        phase = ENGINE_WARM_UP
    if phase == STARTUP:  # TensorFlow's reservation at start: the device as it printed it then
        total, free = tensorflow_banner(hit.precontext)
        f = event.figures
        event = replace(event, figures=replace(
            f,
            total_bytes=f.total_bytes if f.total_bytes is not None else total,
            free_bytes=f.free_bytes if f.free_bytes is not None else free,
        ))
    steps = steps_of_the_failing_work(hit.precontext)
    verdict = classify(event, node, growth, rate, record, phase, steps)
    ctx = Context(
        event, verdict, release, current, chosen, node, growth, hit.precontext, phase, steps
    )
    recommendation = recommend(ctx)
    extra: list[tuple[str, object]] = [
        ("backend", chosen if event.framework == "pytorch" else None)
    ]
    if event.rank is not None:
        extra.append(("rank", event.rank))
    if phase is not None:
        extra.append(("phase", phase))
    if record is not None:
        inferred = classify(event, node, growth, rate, None, phase, steps).kind
        extra.append(("probe", {
            "status": record.status,
            "verdict": record_verdict(record).to_json_dict(),
            "inference_kind": inferred,
            "disagrees": inferred != verdict.kind,
        }))
    return Diagnosis(
        detected=True,
        framework=event.framework,
        kind=verdict.kind,
        contributing=verdict.contributing,
        figures=verdict.figures,
        torch_version_hint=release.hint(),
        recommendation=recommendation,
        summary=verdict.summary,
        oom_count=scan.oom_count,
        message=event.message,
        alloc_conf_problems=current.problems if current is not None else (),
        growth=growth if verdict.kind == "leak" or "leak" in verdict.contributing else None,
        extra=tuple(extra),
    )


_REFUSAL_RAISED: Final = frozenset(
    {formats.TORCH, formats.TORCH_ASYNC, formats.TORCH_RAW, formats.DRIVER, formats.CUDA_ERROR}
)
"""Failures a HAMi refusal just before them explains: PyTorch's, and CUDA's out-of-memory code
as any stack prints it (the reviewer's d1: torch's figures showed 58 GiB free of 79 GiB, read as
room, under a pod's 20 GiB vGPU limit)."""

_REFUSAL_CODES: Final = frozenset(
    {formats.HAMI, formats.TORCH_RAW, formats.DRIVER, formats.CUDA_ERROR}
)
"""Families whose line after a HAMi refusal is that refusal reaching the job: an
out-of-memory code, without figures of its own."""


def _after_refusal(scan: ScanResult, hit: Hit, later: str | None) -> ScanResult | str | None:
    """What follows HAMi's refusal line. HAMi logs a refusal before it retries and PyTorch's
    allocator frees its cache and retries: the refusal ended the job only when a traceback
    starts right after it (its first lines) and raises an out-of-memory code or one PyTorch
    cannot name (public12 f-016: "CUDA error: unrecognized error code"). Returns the scan of
    what follows when another stack's failure is there (that one is the job's: a TensorFlow
    OOM, a DataLoader worker killed), the refusal line when the job went on past it, or None
    when the refusal is the failure: raised, or the log's end (nothing but HAMi's own lines
    after it: public26 e-005, e-006, whose threads say the limit stopped the job)."""
    rest = scan_bytes(scan.tail.encode("utf-8", errors="replace"))
    if rest.last is not None and rest.last.family not in _REFUSAL_CODES:
        return replace(rest, head=scan.head, bytes_scanned=scan.bytes_scanned)
    if _ends_at(scan.tail):
        return None  # the log ends at the refusal (HAMi's own lines at most): nothing went on
    raised = any(TRACEBACK in x.text for x in hit.after[:REFUSAL_LINES])
    if raised and _SURFACED.search(later if later is not None else scan.tail):
        return None
    return quoted(hit.line.text)


HAMI_OWN: Final = "[HAMI-core "
"""HAMi-core's prefix on each of its own lines (its refusal, its Info and Debug lines)."""
ENDS_AT_MAX_CHARS: Final = TAIL_BYTES // 2
"""What may follow a refusal read as the log's end: a tail this short is all that followed it
(the scan keeps only the log's last ``TAIL_BYTES``: a refusal further from the end may have
hours of the job's output after it, the review's cases 18)."""


def _ends_at(tail: str) -> bool:
    """Nothing of the job's own after the refusal: every line, carriage returns splitting a
    redrawn progress bar too, empty or HAMi's own (the review's case 12: a bar's 549 redraws
    then HAMi's warning on one physical line)."""
    if len(tail) >= ENDS_AT_MAX_CHARS:
        return False
    return all(
        not part.strip() or part.lstrip().startswith(HAMI_OWN)
        for x in normalize_text(tail)
        for part in x.text.split("\r")
    )

REFUSAL_LINES: Final = 3
"""A traceback that raises HAMi's refusal starts within this many lines of it (the job's own
lines; HAMi prints one line per refusal)."""

_SURFACED: Final = re.compile(
    r"CUDA error: (?:out of memory|unrecognized error code|unknown error)\b|CUDA out of memory|"
    r"CUDA_ERROR_OUT_OF_MEMORY|OutOfMemoryError"
)
"""How a HAMi refusal reaches the job: CUDA's out-of-memory code, or a code PyTorch cannot name
(public12 f-016: "CUDA error: unrecognized error code")."""

HAMI_CARD_HANDLED_ACTION: Final = (
    "the card HAMi shares between pods ran out once and the job got past it; if it fails "
    "later, check what the other pods on the card are given (nvidia.com/gpumem)"
)
HAMI_HANDLED_ACTION: Final = (
    "HAMi refused an allocation past the pod's vGPU memory (nvidia.com/gpumem) and the job got "
    "past it; if it runs slowly or fails later, raise that limit"
)


def _rejoined(scan: ScanResult) -> ScanResult:
    """``scan``, or where the log's end broke a failure's wording across two lines, the scan of
    that end read joined (``wrapped.py``), with the log's own head and size."""
    text = rejoin(scan.tail)
    if text is None:
        return scan
    found = scan_bytes(text.encode("utf-8", errors="replace"))
    if found.last is None:
        return scan
    return replace(found, head=scan.head, bytes_scanned=scan.bytes_scanned)


@dataclass(frozen=True)
class _Dismissed:
    """Why the log's last failure line did not end the job: the summary, the first action, and
    the JSON key that names the evidence (``Diagnosis.extra``)."""

    summary: str
    action: str
    key: str
    evidence: str


def _went_on(later: str) -> _Dismissed:
    """The job handled the failure and died of ``later`` (``aftermath.py``)."""
    return _Dismissed(
        "no out-of-memory failure ended the job: it went on after the log's last "
        f"out-of-memory error and then failed with {later}",
        f"the job failed with {later}, not for lack of GPU memory: the out-of-memory error "
        "before it was caught and the job went on",
        "later_failure",
        later,
    )


def _skipped(line: str) -> _Dismissed:
    """The job caught an OOM, skipped its batch, and the log goes on (``aftermath.py``)."""
    return _Dismissed(
        "no out-of-memory failure shown to end the job: it caught one and skipped the batch, "
        "and the log goes on after it",
        f"the job skipped a batch that did not fit ({line}); the log goes on after it, so it does "
        "not show what ended the job (the container's exit reason, the node's events tell); if "
        "the skipped batch was the work (one input), or many are skipped, make the batches "
        "smaller (fairseq's --max-tokens)",
        "skipped_batch",
        line,
    )


def _reserved(call: str) -> _Dismissed:
    """The code came from a call that reserves address space (``addressspace.py``)."""
    return _Dismissed(
        "no out-of-memory failure: CUDA's out-of-memory code came from a call that reserves "
        "virtual address space, not GPU memory",
        ADDRESS_SPACE_ACTION.format(line=call),
        "address_space_call",
        call,
    )


def _capped(line: str) -> _Dismissed:
    """One buffer past the driver's per-allocation cap (``allocationlimit.py``)."""
    return _Dismissed(
        "no out-of-memory failure: one buffer was larger than the driver allows in a single "
        "allocation, not the GPU running out",
        ALLOCATION_LIMIT_ACTION.format(line=line),
        "allocation_limit",
        line,
    )


def _handled_refusal(line: str, *, card: bool) -> _Dismissed:
    """HAMi's refusal (or its own allocation on the shared ``card``) that the job's next lines
    never raised."""
    what, retries, action = (
        ("HAMi's allocation on the card it shares between pods failed once", "",
         HAMI_CARD_HANDLED_ACTION)
        if card
        else ("HAMi refused an allocation past the pod's vGPU memory", "HAMi retries; ",
              HAMI_HANDLED_ACTION)
    )  # fmt: skip
    return _Dismissed(
        f"no out-of-memory failure ended the job: {what} and the job went on ({retries}PyTorch "
        "frees its cache and retries)",
        action,
        "handled_refusal",
        line,
    )


def _impossible(size: str, *, accounting: bool) -> _Dismissed:
    """A request more than any machine has (``impossible.py``); HAMi's own count when
    ``accounting``."""
    return _Dismissed(
        f"no out-of-memory failure: it counted {size}, more than any machine has, a "
        "size computed wrong",
        (HAMI_ACCOUNTING if accounting else IMPOSSIBLE_ACTION).format(size=size),
        "impossible_request",
        size,
    )


def _not_found(
    scan: ScanResult,
    torch_version: str | None,
    alloc_conf: str | None,
    backend: str | None,
    growth: Growth | None,
    why: _Dismissed | None = None,
) -> Diagnosis:
    """No out-of-memory failure ended the job: none in the log, or ``why`` the last one did not.
    Only a log without one is read for a kill by signal 9 (``killed.py``)."""
    release = _release(torch_version, scan.head, "")
    current = allocconf.check(alloc_conf, release, backend) if alloc_conf is not None else None
    problems = current.problems if current is not None else ()
    actions = tuple(
        f"the current PYTORCH_CUDA_ALLOC_CONF has problems for this release: {p}" for p in problems
    )
    summary = "no out-of-memory failure found in the log"
    extra: tuple[tuple[str, object], ...] = ()
    kill = killed_by_signal(scan.tail) if why is None else None
    if kill is not None:
        actions = (KILLED_ACTION.format(line=kill), *actions)
        extra = (("killed_by_signal", kill),)
    if why is not None:
        summary = why.summary
        actions = (why.action, *actions)
        extra = ((why.key, why.evidence),)
    return Diagnosis(
        detected=False,
        framework=None,
        kind="unknown",
        contributing=("leak",) if growth is not None else (),
        figures=Figures(),
        torch_version_hint=release.hint(),
        recommendation=Recommendation(actions=actions),
        summary=summary,
        oom_count=scan.oom_count,  # 0 without a failure; with a handled one, its count
        alloc_conf_problems=tuple(problems),
        growth=growth,
        extra=extra,
    )


def diagnose_host_oom(
    *,
    container: str | None = None,
    memory_limit_bytes: int | None,
    memory_request_bytes: int | None,
    exit_code: int | None = 137,
    evicted: str | None = None,
) -> Diagnosis:
    """A container the kernel's OOM killer ended (``OOMKilled``), or that the kubelet stopped
    evicting its pod because the node was low on memory (``evicted``: the pod's status message):
    host memory, not the GPU."""
    who = f"container {container!r}" if container else "the container"
    code = f" (exit {exit_code})" if exit_code is not None else ""
    if memory_limit_bytes is None:
        at = " with no memory limit set: the node itself ran out of memory"
    else:
        at = f" at its {format_size(memory_limit_bytes)} memory limit"
    summary = f"host-oom-killed: {who} was killed by the kernel OOM killer{code}{at}"
    recommendation = host_recommendation(memory_limit_bytes, memory_request_bytes)
    if evicted is not None:
        summary = (
            f"host-oom-killed: {who} was stopped{code} when the kubelet evicted the pod: the node "
            "was low on host (CPU) memory, not GPU memory"
        )
        recommendation = replace(
            recommendation, actions=(EVICTION_FIX, *recommendation.actions)
        )
    return Diagnosis(
        detected=True,
        framework=None,
        kind="host-oom-killed",
        contributing=(),
        figures=Figures(),
        torch_version_hint=None,
        recommendation=recommendation,
        summary=summary,
        oom_count=1,
        extra=(
            (
                "host",
                {
                    "container": container,
                    "memory_limit_bytes": memory_limit_bytes,
                    "memory_request_bytes": memory_request_bytes,
                    "exit_code": exit_code,
                    **({"evicted": printable(evicted)} if evicted is not None else {}),
                },
            ),
        ),
    )


_REQUEST_TOLERANCE: Final = 0.01
"""The message prints the request rounded to 0.01 of its unit (``4.20 GiB``)."""


def _record_before(precontext: str) -> ProbeRecord | None:
    """The probe's record line printed before the failure (the probe writes it from the
    allocator's OOM observer, before the exception reaches Python)."""
    parsed = find_record(precontext[-65536:])
    return parsed.record if parsed is not None else None


def _same_request(record: ProbeRecord, requested: int | None) -> bool:
    """A record belongs to this failure only if it saw the same request."""
    if record.status != "ok" or requested is None:
        return record.status != "ok"
    if record.request_bytes is None:
        return False
    return abs(record.request_bytes - requested) <= _REQUEST_TOLERANCE * max(requested, 1024)


def _record_figures(record: ProbeRecord) -> Figures:
    """The figures of the failure a probe record describes, as an OOM message would give them."""
    unallocated = None
    if record.reserved_bytes is not None and record.allocated_bytes is not None:
        unallocated = record.reserved_bytes - record.allocated_bytes
    return Figures(
        requested_bytes=record.request_bytes,
        total_bytes=record.device_total_bytes,
        free_bytes=record.device_free_bytes,
        allocated_bytes=record.allocated_bytes,
        reserved_unallocated_bytes=unallocated,
        allowed_bytes=record.allowed_bytes,
        gpu_index=record.device,
    )
