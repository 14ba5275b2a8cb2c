"""``gpu-auditor check-manifest FILE|DIR|- ...``: the admission webhook's allocator checks for
CI pipelines and pre-commit, over any Kubernetes YAML or JSON (multi-document files, Lists,
``helm template`` output).

Each finding is one line, ``FILE:LINE: KIND NAMESPACE/NAME: container "C": VARIABLE: message``
(the file's name in printable ASCII: a terminal escape or any other character is shown as
``?``), at most MAX_PRINTED per input (then one line on stderr counts the rest). Exit status: 0
when nothing was found, or only settings whose value the manifest does not hold (a
``valueFrom``, a ``$(VAR)`` an envFrom source fills: printed as ``value unknown``); 1 on other
findings; 2 when an input cannot be read, is not a regular file (a
pipe, FIFO or device: a symlink to /proc/self/fd/1 would wait for ourselves forever; stdin is
read with ``-``), is not YAML or holds a value YAML cannot construct, or was not checked to its
end (its work bound: `admission.findings.MAX_WORK`). Each such input is named with the reason;
the others are still checked and printed. Needs PyYAML (the ``operator`` or ``agent`` extra, or
the pre-commit hook's environment).
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO, TextIO

from .admission.findings import MAX_WORK, Budget, shown
from .admission.objects import check_object

COMMAND = "check-manifest"
SUFFIXES = (".yaml", ".yml", ".json")
MAX_INPUT = 64 << 20
"""Bytes read of one input; a larger one is refused (no manifest is that large)."""
MAX_PRINTED = 1000
"""Findings printed for one input; the rest are counted on stderr (an input whose aliases name
one bad pod 64,000 times printed 16 MB)."""
MAX_SHOWN_PATH = 4096
"""Characters of an input's name printed (PATH_MAX)."""
EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def add_parser(sub: Any) -> None:
    """Register the subcommand on the CLI's subparsers."""
    parser = sub.add_parser(COMMAND, help="check the allocator settings in Kubernetes manifests")
    parser.add_argument("paths", nargs="*", default=["-"], metavar="FILE|DIR|-",
                        help="manifest files, folders (their *.yaml, *.yml, *.json, recursively) "
                             "or - for stdin (default)")


class BadInput(Exception):
    """An input that cannot be read or parsed; the message says why."""


def inputs(paths: list[str]) -> Iterator[tuple[str, str | OSError | None]]:
    """(name, path) of every input: a folder's manifests in sorted order; None for stdin. A
    folder that cannot be listed is an input of its own, with its error for `read` to name."""
    for path in paths:
        if path == "-":
            yield "stdin", None
        elif os.path.isdir(path):
            unlisted: list[OSError] = []
            found = sorted(
                os.path.join(root, name)
                for root, dirs, files in os.walk(path, onerror=unlisted.append)
                if not dirs.sort()  # walk in a stable order
                for name in files if name.endswith(SUFFIXES)
            )
            yield from ((name, name) for name in found)
            yield from ((str(error.filename), error) for error in unlisted)
        else:
            yield path, path


def read(path: str | OSError | None, stdin: BinaryIO | None) -> bytes:
    try:
        if isinstance(path, OSError):
            raise path
        if path is None:
            if stdin is None:
                raise BadInput("stdin is closed")
            data = stdin.read(MAX_INPUT + 1)
        else:
            data = _read_regular(path)
    except OSError as exc:
        raise BadInput(exc.strerror or type(exc).__name__) from None
    if len(data) > MAX_INPUT:
        raise BadInput(f"larger than {MAX_INPUT >> 20} MiB")
    return data


def _read_regular(path: str) -> bytes:
    """A regular file's bytes (MAX_INPUT + 1 at most). Opened without blocking and looked at
    before any read: a FIFO, a pipe (a symlink to /proc/self/fd/1), a terminal or a device is
    refused, where a read would wait forever or never end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BadInput(f"not a regular file ({_file_type(mode)}); pipe it to - instead")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_INPUT:
            chunk = os.read(fd, min(1 << 20, MAX_INPUT + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _file_type(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO or pipe"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return kind
    return "not a file"


def documents(data: bytes) -> Iterator[tuple[int, object]]:
    """(first line, object) of each YAML document; `BadInput` for one that is not YAML, or whose
    values YAML cannot construct (``2023-02-30``, ``!!int abc``, an int of 5,000 digits: the
    constructor's ValueError), or nested deeper than the loader follows (the pure-Python loader's
    RecursionError; libyaml stops at its own limit)."""
    import yaml

    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_class(data)
    line = 1
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            line = node.start_mark.line + 1
            yield line, loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        helm = "; a Helm template? render it first: helm template ... | gpu-auditor " \
               "check-manifest -" if b"{{" in data else ""
        raise BadInput(f"not YAML: {where}{shown(str(problem), 200)}{helm}") from None
    except RecursionError:
        position = getattr(loader, "line", None)  # the pure-Python reader's line
        at = position + 1 if isinstance(position, int) else line
        raise BadInput(f"not YAML that can be read: line {at}: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise BadInput(f"a value YAML cannot construct in the document at line {line}: "
                       f"{shown(str(exc), 200)}") from None
    finally:
        loader.dispose()


def check_input(name: str, data: bytes, out: TextIO, err: TextIO) -> int:
    """Print the findings of one input (MAX_PRINTED at most, then a count on ``err``); the
    number of problems among them (an unknown value is printed, not counted). `BadInput` when
    it cannot be read to its end, after what was found before."""
    found = problems = 0
    budget = Budget()
    for line, obj in documents(data):
        for checked in check_object(obj, budget):
            for finding in checked.findings:
                if found < MAX_PRINTED:
                    print(f"{name}:{line}: {checked.ref}: {finding.text()}", file=out)
                found += 1
                problems += finding.problem
        if budget.spent:
            raise BadInput(f"checked up to the document at line {line} only: its YAML aliases "
                           "name more objects, containers and settings than the work bound "
                           f"({MAX_WORK} units); findings up to there are printed")
    if found > MAX_PRINTED:
        print(f"gpu-auditor: {name}: {found - MAX_PRINTED} more findings not printed (the first "
              f"{MAX_PRINTED} are)", file=err)
    return problems


def run(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: BinaryIO | None) -> int:
    try:
        import yaml  # noqa: F401
    except ImportError:
        print("gpu-auditor: check-manifest needs PyYAML: pip install PyYAML (or "
              "'gpu-auditor[operator]')", file=err)
        return EXIT_USAGE
    found, bad = 0, 0
    for raw_name, path in inputs(list(args.paths)):
        name = shown(raw_name, MAX_SHOWN_PATH)  # a file's name is the repository's, not ours
        try:
            found += check_input(name, read(path, stdin), out, err)
        except BadInput as exc:
            print(f"gpu-auditor: {name}: {exc}", file=err)
            bad += 1
    if bad:
        return EXIT_USAGE
    return EXIT_FINDINGS if found else EXIT_OK
