"""``gpu-auditor``: diagnose an OOM log, or check an allocator setting, from the command line.

    gpu-auditor diagnose [--json] [--torch-version X.Y] [--alloc-conf CURRENT]
                         [--backend native|cudaMallocAsync] [FILE|-]
    gpu-auditor check-alloc-conf VALUE [--torch-version X.Y] [--backend ...]

Exit status: 0 after a diagnosis (whether or not the log holds an OOM); 1 when
``check-alloc-conf`` finds problems; 2 for bad usage or unreadable input (a missing file, a
closed stdin); 3 when the report cannot be written (stdout closed, or a pipe whose reader has
gone, as in ``gpu-auditor diagnose big.log | head -1``). Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Sequence
from typing import BinaryIO, TextIO

from .diagnosis import Diagnosis, diagnose_stream, validate_alloc_conf
from .diagnosis.allocconf import BACKENDS
from .diagnosis.proberecord import MAX_RECORD_BYTES, ProbeRecord, find_record
from .diagnosis.sizes import format_size
from .diagnosis.torchversion import parse_torch_version

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_OUTPUT = 3


def _torch_version(text: str) -> str:
    if parse_torch_version(text) is None:
        raise argparse.ArgumentTypeError(f"not a torch version (want X.Y): {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-auditor", description="Diagnose GPU out-of-memory failures from job logs."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    diag = sub.add_parser("diagnose", help="diagnose the last OOM in a log")
    diag.add_argument("file", nargs="?", default="-", help="log file, or - for stdin (default)")
    diag.add_argument("--json", action="store_true", help="print one JSON object")
    diag.add_argument("--torch-version", type=_torch_version, help="the job's torch release, X.Y")
    diag.add_argument("--alloc-conf", help="the job's current PYTORCH_CUDA_ALLOC_CONF")
    diag.add_argument("--backend", choices=BACKENDS, help="the job's allocator backend")
    diag.add_argument(
        "--probe-record",
        metavar="FILE",
        help="a file holding the OOM probe's record (e.g. the container's termination message: "
        "kubectl get pod P -o jsonpath='{..lastState.terminated.message}')",
    )
    check = sub.add_parser("check-alloc-conf", help="validate a PYTORCH_CUDA_ALLOC_CONF value")
    check.add_argument("value", help="the value, e.g. expandable_segments:True")
    check.add_argument("--torch-version", type=_torch_version, help="torch release, X.Y")
    check.add_argument("--backend", choices=BACKENDS, help="allocator backend")
    return parser


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


def _open_input(path: str, stdin: BinaryIO | None) -> BinaryIO:
    if path != "-":
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


def _diagnose(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: BinaryIO | None) -> int:
    source = "stdin" if args.file == "-" else args.file
    ok, record = _probe_record(args.probe_record, err)
    if not ok:
        return EXIT_USAGE
    try:
        stream = _open_input(args.file, stdin)
        try:
            diagnosis = diagnose_stream(
                stream,
                torch_version=args.torch_version,
                alloc_conf=args.alloc_conf,
                backend=args.backend,
                probe_record=record,
            )
        finally:
            if stream is not stdin:
                stream.close()
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        print(f"gpu-auditor: cannot read {source}: {reason}", file=err)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(diagnosis.to_json_dict(), indent=2), file=out)
    else:
        print(render(diagnosis, source), file=out)
    return EXIT_OK


def _check(args: argparse.Namespace, out: TextIO) -> int:
    problems = validate_alloc_conf(
        args.value, torch_version=args.torch_version, backend=args.backend
    )
    where = f" for torch {args.torch_version}" if args.torch_version else ""
    if not problems:
        print(f"valid{where}: {args.value}", file=out)
        return EXIT_OK
    print(f"invalid{where}: {args.value}", file=out)
    for problem in problems:
        print(f"  - {problem}", file=out)
    return EXIT_INVALID


def _system_stdin() -> BinaryIO | None:
    return sys.stdin.buffer if sys.stdin is not None else None


def _silence_stdout() -> None:
    """After a failed write to the real stdout, point it at /dev/null: the interpreter flushes
    stdout again at exit and would print its own traceback for the same broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        pass


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: BinaryIO | None = None,
) -> int:
    err = stderr or sys.stderr or io.StringIO()  # stderr closed: errors have nowhere to go
    args = build_parser().parse_args(argv)
    out = stdout or sys.stdout
    if out is None:  # started with stdout closed (``>&-``)
        print("gpu-auditor: cannot write the report: stdout is closed", file=err)
        return EXIT_OUTPUT
    try:
        if args.command == "diagnose":
            code = _diagnose(args, out, err, stdin if stdin is not None else _system_stdin())
        else:
            code = _check(args, out)
        out.flush()
    except OSError as exc:  # the input's errors are handled in _diagnose: this is the output's
        if out is sys.stdout:
            _silence_stdout()
        reason = exc.strerror or exc.__class__.__name__
        print(f"gpu-auditor: cannot write the report: {reason}", file=err)
        return EXIT_OUTPUT
    return code


if __name__ == "__main__":
    sys.exit(main())
