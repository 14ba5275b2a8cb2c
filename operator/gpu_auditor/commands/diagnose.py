"""`gpu-auditor diagnose FILE... | -`: the last OOM of each log, each input reported.

    gpu-auditor diagnose a.log b.log            # one report per file, in order
    kubectl logs --previous POD | gpu-auditor diagnose -
    gpu-auditor diagnose --exit-code job.log    # 1 when an OOM was found (for scripts)

Every input is read and reported even when another one cannot be read: an unreadable file is
one line on stderr (and an `error` entry in `--json`), never the end of the run.

Exit status (`EXIT_*`): without `--exit-code`, 0 when every input was read (OOM or not);
with it, 0 when no input holds an OOM and 1 (`EXIT_OOM_FOUND`) when one does. 2 for bad usage
or an input that could not be read, whatever the others hold (an error is never hidden behind
"found"); 3 when the report cannot be written (the CLI's shell says so).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any, BinaryIO, TextIO

from gpu_auditor.diagnosis import Diagnosis, diagnose_stream
from gpu_auditor.diagnosis.proberecord import MAX_RECORD_BYTES, ProbeRecord, find_record
from gpu_auditor.diagnosis.sizes import format_size

EXIT_OK = 0
EXIT_OOM_FOUND = 1
EXIT_USAGE = 2
STDIN = "-"


@dataclass(frozen=True)
class Outcome:
    """One input: its diagnosis, or why it could not be read."""

    source: str
    diagnosis: Diagnosis | None
    error: str = ""


def _figures_line(d: Diagnosis) -> str:
    f = d.figures
    named = (
        ("requested", f.requested_bytes),
        ("total", f.total_bytes),
        ("free", f.free_bytes),
        ("process", f.process_bytes),
        ("allocated", f.allocated_bytes),
        ("reserved-unallocated", f.reserved_unallocated_bytes),
        ("allowed", f.allowed_bytes),
        ("others", f.other_bytes or None),
    )
    return ", ".join(f"{name} {format_size(v)}" for name, v in named if v is not None)


def render(d: Diagnosis, source: str) -> str:
    """The human-readable report."""
    if not d.detected:
        lines = [f"{source}: no out-of-memory failure found"]
        if d.oom_count:  # one was handled: the summary says what ended the job instead
            lines.append(f"  {d.summary}")
    else:
        about = ", ".join(
            x for x in (d.framework, d.torch_version_hint and f"torch {d.torch_version_hint}") if x
        )
        count = f"{d.oom_count} OOM{'s' if d.oom_count != 1 else ''} in the log, the last one"
        lines = [f"{source}: {d.kind}" + (f" ({about})" if about else "") + f" — {count}"]
        lines.append(f"  {d.summary}")
        if d.contributing:
            lines.append(f"  contributing: {', '.join(d.contributing)}")
        figures = _figures_line(d)
        if figures:
            lines.append(f"  figures: {figures}")
        if d.figures.other_processes:
            pids = ", ".join(str(p.pid) for p in d.figures.other_processes[:8])
            lines.append(f"  other processes on the GPU are host pids ({pids}): "
                         "gpu-auditor explain POD names their pods from the node's GPUNodeReport "
                         "(kubectl get gnr NODE -o yaml)")
        probe = dict(d.extra).get("probe")
        if isinstance(probe, dict):
            seen = "agrees" if not probe.get("disagrees") else "disagrees"
            lines.append(
                f"  probe record: {probe.get('status')}; the message alone would say "
                f"{probe.get('inference_kind')} ({seen})"
            )
    rec = d.recommendation
    if rec.alloc_conf:
        lines.append(f"  set: {rec.env}={rec.alloc_conf}")
    elif d.detected:
        lines.append("  set: no allocator setting would help")
    if rec.actions:
        lines.append("  actions:")
        lines += [f"    - {a}" for a in rec.actions]
    return "\n".join(lines)


def add_arguments(diag: argparse.ArgumentParser) -> None:
    diag.add_argument("files", nargs="*", default=[STDIN], metavar="FILE",
                      help="log files, or - for stdin (the default), e.g. "
                      "kubectl logs --previous POD | gpu-auditor diagnose -")
    diag.add_argument("--exit-code", action="store_true",
                      help="exit 1 when an OOM was found, 0 when none (2: an input could not "
                      "be read)")


def _open_input(path: str, stdin: BinaryIO | None) -> BinaryIO:
    if path != STDIN:
        return open(path, "rb")
    if stdin is None:  # started with stdin closed (``<&-``): Python sets sys.stdin to None
        raise OSError(0, "stdin is closed")
    return stdin


def _probe_record(path: str | None, err: TextIO) -> tuple[bool, ProbeRecord | None]:
    """(ok, record): a file that holds no valid record is a usage error, said in one line."""
    if path is None:
        return True, None
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_RECORD_BYTES + 1)
    except OSError as exc:
        print(f"gpu-auditor: cannot read {path}: {exc.strerror or type(exc).__name__}", file=err)
        return False, None
    parsed = find_record(data)
    if parsed is None or parsed.record is None:
        why = parsed.reason if parsed is not None else "no gpu-auditor-probe-record line"
        print(f"gpu-auditor: {path} holds no usable probe record: {why}", file=err)
        return False, None
    return True, parsed.record


def _one(path: str, args: argparse.Namespace, record: ProbeRecord | None,
         stdin: BinaryIO | None) -> Outcome:
    source = "stdin" if path == STDIN else path
    try:
        stream = _open_input(path, stdin)
        try:
            diagnosis = diagnose_stream(stream, torch_version=args.torch_version,
                                        alloc_conf=args.alloc_conf, backend=args.backend,
                                        probe_record=record)
        finally:
            if stream is not stdin:
                stream.close()
    except OSError as exc:
        return Outcome(source, None, exc.strerror or exc.__class__.__name__)
    return Outcome(source, diagnosis)


def _json(o: Outcome) -> dict[str, Any]:
    if o.diagnosis is None:
        return {"source": o.source, "error": o.error}
    return {"source": o.source, **o.diagnosis.to_json_dict()}


def run(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: BinaryIO | None) -> int:
    """Diagnose every input of `args.files`; the exit status as the module says."""
    files: list[str] = list(args.files) or [STDIN]
    if files.count(STDIN) > 1:
        print("gpu-auditor: - (stdin) may be named once", file=err)
        return EXIT_USAGE
    if args.probe_record and len(files) > 1:
        print("gpu-auditor: --probe-record belongs to one log; name one file with it", file=err)
        return EXIT_USAGE
    ok, record = _probe_record(args.probe_record, err)
    if not ok:
        return EXIT_USAGE
    outcomes = []
    for path in files:
        outcome = _one(path, args, record, stdin)
        if outcome.diagnosis is None:
            print(f"gpu-auditor: cannot read {outcome.source}: {outcome.error}", file=err)
        outcomes.append(outcome)
    if args.json:
        body: Any = _json(outcomes[0]) if len(files) == 1 else [_json(o) for o in outcomes]
        if len(files) > 1 or outcomes[0].diagnosis is not None:
            print(json.dumps(body, indent=2), file=out)
    else:
        reports = [render(o.diagnosis, o.source) for o in outcomes if o.diagnosis is not None]
        if reports:
            print("\n\n".join(reports), file=out)
    if any(o.diagnosis is None for o in outcomes):
        return EXIT_USAGE
    found = any(o.diagnosis.detected for o in outcomes if o.diagnosis is not None)
    return EXIT_OOM_FOUND if args.exit_code and found else EXIT_OK
