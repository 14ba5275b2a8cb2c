"""`gpu-auditor explain POD`: one pod's diagnosis for a person, read from the cluster.

    gpu-auditor explain -n ml finetune-7b
    kubectl gpu-auditor explain -n ml finetune-7b      # the same, as a kubectl plugin
    gpu-auditor explain ml/finetune-7b --json

It reads (GETs only) the pod's annotations, the operator's Events about it, its owner chain and
its node's GPUNodeReport with the user's kubeconfig (`--kubeconfig`, else `$KUBECONFIG`, else
`~/.kube/config`; `--context`; exec credential plugins as kubectl runs them), and prints the
diagnosis, its figures, the GPU's other tenants by pod, the actions in order and the setting
as a line to paste.

Exit status: 0 after an explanation (with or without a diagnosis on the pod; `--exit-code`:
1 when the pod carries a diagnosis); 2 for bad usage, a bad kubeconfig, a pod that cannot be
read (not found, forbidden, API server unreachable, an answer that is not JSON or is nested too
deeply), said in one line on stderr, and for a pod whose `actions` or `evidence` annotation is
not of its shape (not JSON, nested too deeply, the wrong type): the explanation is printed
without it first.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import TextIO, TypeVar

from gpu_auditor.base import jobkinds, names
from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.contract import DEFAULT_ANNOTATION_PREFIX
from gpu_auditor.base.errors import APIError, APIForbiddenError, APINotFoundError, ConfigError
from gpu_auditor.base.kubeconfig import ClusterConfig, load_config, load_kubeconfig
from gpu_auditor.commands import explaintext, jobreads, jobviewtext, podreads
from gpu_auditor.commands.explanation import explain
from gpu_auditor.commands.jobview import job_view

EXIT_OK = 0
EXIT_DIAGNOSED = 1
EXIT_USAGE = 2
USER_AGENT = "gpu-auditor-explain"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("explain", help="print a pod's diagnosis, read from the cluster",
                       description="Print a pod's gpu-auditor diagnosis for a person: cause, "
                       "figures, the GPU's other tenants, actions, the setting to apply.")
    p.add_argument("pod", help="POD, or NAMESPACE/POD; or KIND/NAME of a distributed job "
                   "(jobset/NAME, pytorchjob/NAME, lws/NAME, rayjob/NAME, job/NAME, ...): "
                   "its root cause")
    p.add_argument("-n", "--namespace", help="the pod's namespace (default: the context's)")
    p.add_argument("--kubeconfig", help="kubeconfig file(s) (default: $KUBECONFIG, then "
                   "~/.kube/config)")
    p.add_argument("--context", help="the kubeconfig context to use")
    p.add_argument("--annotation-prefix", default=DEFAULT_ANNOTATION_PREFIX,
                   help="the operator's --annotation-prefix (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--exit-code", action="store_true",
                   help="exit 1 when the pod carries a diagnosis, 0 when not")


def _config(args: argparse.Namespace) -> ClusterConfig:
    explicit = args.kubeconfig or os.environ.get("KUBECONFIG")
    if args.context:
        default = os.path.join(os.path.expanduser("~"), ".kube", "config")
        return load_kubeconfig(explicit or default, context=args.context)
    return load_config(args.kubeconfig)


def _target(args: argparse.Namespace, cfg: ClusterConfig) -> tuple[str, str]:
    namespace, _, name = args.pod.rpartition("/")
    if namespace and args.namespace and namespace != args.namespace:
        raise names.InvalidName(f"{args.pod!r} names namespace {namespace!r}, -n says "
                                f"{args.namespace!r}")
    namespace = namespace or args.namespace or cfg.namespace or "default"
    return names.namespace(namespace), names.object_name(name)


T = TypeVar("T")


def _read(args: argparse.Namespace, err: TextIO, what: str,
          read: Callable[[ClusterConfig, ApiClient], T]) -> T | int:
    """What ``read`` returns with the user's kubeconfig, or the usage exit code with the error
    said (a bad config or name, PyYAML missing, the API's answer): one place for both views."""
    try:
        cfg = _config(args)
        return read(cfg, ApiClient(cfg, user_agent=USER_AGENT))
    except (ConfigError, names.InvalidName) as exc:
        print(f"gpu-auditor explain: {exc}", file=err)
        return EXIT_USAGE
    except ModuleNotFoundError as exc:  # the light install: kubeconfig files need PyYAML
        if exc.name != "yaml":
            raise
        print("gpu-auditor explain: reading a kubeconfig needs PyYAML: "
              "pip install 'gpu-auditor[kubectl]'", file=err)
        return EXIT_USAGE
    except APIError as exc:
        said = ("not found" if isinstance(exc, APINotFoundError) else
                "forbidden to your account" if isinstance(exc, APIForbiddenError) else str(exc))
        print(f"gpu-auditor explain: {what}: {said}", file=err)
        return EXIT_USAGE


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    job = jobreads.target(args.pod)
    if job is not None:
        return run_job(args, job, out, err)

    def read(cfg: ClusterConfig, api: ApiClient) -> podreads.PodReads:
        namespace, name = _target(args, cfg)
        return podreads.read_all(api, namespace, name)

    reads = _read(args, err, f"pod {args.pod}", read)
    if isinstance(reads, int):
        return reads
    explanation = explain(reads.pod, events=reads.events, owners=reads.owners,
                          report=reads.report, report_note=reads.report_note,
                          prefix=args.annotation_prefix, notes=reads.notes)
    if args.json:
        print(json.dumps(explaintext.to_json(explanation), indent=2), file=out)
    else:
        print(explaintext.render(explanation), file=out)
    if explanation.malformed:  # printed without it; a script must not read "diagnosed" or "ok"
        print(f"gpu-auditor explain: pod {explanation.ref}: {'; '.join(explanation.malformed)} "
              "(printed without it)", file=err)
        return EXIT_USAGE
    diagnosed = explanation.diagnosis is not None or explanation.sharing is not None
    return EXIT_DIAGNOSED if args.exit_code and diagnosed else EXIT_OK


def run_job(args: argparse.Namespace, job: tuple[tuple[jobkinds.JobKind, ...], str],
            out: TextIO, err: TextIO) -> int:
    """`explain KIND/NAME`: a distributed job's view (its root cause, rank, consequences);
    `-n` gives the namespace. Exit 1 with `--exit-code` when the job names a root cause."""
    kinds, name = job

    def read(cfg: ClusterConfig, api: ApiClient) -> jobreads.JobReads:
        namespace = names.namespace(args.namespace or cfg.namespace or "default")
        return jobreads.read_all(api, kinds, namespace, name)

    reads = _read(args, err, args.pod, read)
    if isinstance(reads, int):
        return reads
    view = job_view(reads.kind, reads.obj, pods=reads.pods, events=reads.events,
                    prefix=args.annotation_prefix, notes=reads.notes)
    if args.json:
        print(json.dumps(jobviewtext.to_json(view), indent=2), file=out)
    else:
        print(jobviewtext.render(view), file=out)
    return EXIT_DIAGNOSED if args.exit_code and view.root_pod else EXIT_OK
