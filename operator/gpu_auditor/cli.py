"""``gpu-auditor``: diagnose OOM logs, explain a pod's diagnosis, or check an allocator
setting, from the command line. The commands live in `gpu_auditor.commands`; this is the shell.

    gpu-auditor diagnose [--json] [--exit-code] [--torch-version X.Y] [--alloc-conf CURRENT]
                         [--backend native|cudaMallocAsync] [FILE...|-]
    gpu-auditor explain [-n NAMESPACE] [--json] POD        (also: kubectl gpu-auditor explain)
    gpu-auditor check-alloc-conf VALUE [--torch-version X.Y] [--backend ...]

Exit status: 0 after a diagnosis (whether or not a log holds an OOM; with ``--exit-code``, 0 when
none does and 1 when one does); 1 when ``check-alloc-conf`` finds problems; 2 for bad usage or
unreadable input (a missing file, a closed stdin, a pod that cannot be read); 3 when the report
cannot be written (stdout closed, or a pipe whose reader has gone, as in
``gpu-auditor diagnose big.log | head -1``). Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from typing import BinaryIO, TextIO

from . import checkmanifest
from .commands import diagnose, explain
from .diagnosis import validate_alloc_conf
from .diagnosis.allocconf import BACKENDS
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
    diag = sub.add_parser("diagnose", help="diagnose the last OOM in each log")
    diagnose.add_arguments(diag)
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
    explain.add_parser(sub)
    checkmanifest.add_parser(sub)
    return parser


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
    prog: str = "gpu-auditor",
) -> int:
    err = stderr or sys.stderr or io.StringIO()  # stderr closed: errors have nowhere to go
    parser = build_parser()
    parser.prog = prog
    args = parser.parse_args(argv)
    out = stdout or sys.stdout
    if out is None:  # started with stdout closed (``>&-``)
        print("gpu-auditor: cannot write the report: stdout is closed", file=err)
        return EXIT_OUTPUT
    try:
        if args.command == "diagnose":
            code = diagnose.run(args, out, err, stdin if stdin is not None else _system_stdin())
        elif args.command == "explain":
            code = explain.run(args, out, err)
        elif args.command == checkmanifest.COMMAND:
            code = checkmanifest.run(args, out, err,
                                     stdin if stdin is not None else _system_stdin())
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


def kubectl_main() -> int:
    """`kubectl-gpu_auditor`: kubectl runs it for `kubectl gpu-auditor ...` (krew's naming)."""
    return main(prog="kubectl gpu-auditor")


if __name__ == "__main__":
    sys.exit(main())
