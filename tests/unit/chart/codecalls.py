"""What each component asks of the API server, found without an API server: the requests in its
source (from the syntax tree) and what kopf will watch and send for the operator (from kopf's
own registry and settings, in a fresh interpreter that imports the operator's entry point).

test_chart_rbac.py holds docs/install.md's table "What each component calls" to this. Every
form of kopf registration (decorators with positional or keyword arguments, `kopf.on.x(...)(fn)`
at module level, a handler in any module the entry point imports) lands in the same registry,
so the handlers are read there rather than recognised by their spelling; the requests are calls
of `ApiClient.request`/`request_bytes` whose HTTP method is a literal.

Anything the finder cannot judge is reported, never skipped: a request whose method is not a
literal, a call of kopf that is not known to send nothing, a module that opens HTTP connections
of its own, a kopf handler of a kind whose requests are not modelled here.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from apicalls import ROOT

# The transport: it sends whatever method its callers name. Its other methods that send a
# request (list_pods, ...) are attributed to the component whose code calls them.
TRANSPORT_MODULE = "gpu_auditor.base.client"
TRANSPORT = {f"{TRANSPORT_MODULE}.ApiClient.{name}" for name in ("request", "request_bytes",
                                                                  "_send")}
SENDING_METHODS = ("request", "request_bytes")
METHOD_VERBS = {"GET": {"get", "list"}, "POST": {"create"}, "PUT": {"update"},
                "PATCH": {"patch"}, "DELETE": {"delete", "deletecollection"}}

# Each component: its console script (pyproject.toml) and the folder of its own code.
COMPONENTS = {
    "agent": ("gpu-auditor-agent", ROOT / "node_agent"),
    "operator": ("gpu-auditor-operator", ROOT / "operator" / "gpu_auditor" / "controller"),
    # the webhook calls the API only for webhook.applyRecommendation's owner reads
    "webhook": ("gpu-auditor-webhook", ROOT / "operator" / "gpu_auditor" / "webhook"),
}
SOURCE_ROOTS = (ROOT / "operator", ROOT)

# Modules that make HTTP (or gRPC) connections. Only the transport may use one to reach the
# API server; the others that use one say here why it is not the API server.
HTTP_CLIENTS = ("http.client", "urllib.request", "urllib3", "aiohttp", "requests", "httpx",
                "kubernetes", "kubernetes_asyncio", "pykube", "grpc", "h2")
OTHER_CONNECTIONS = {
    TRANSPORT_MODULE: "the transport itself",
    "node_agent.podresources.unary": "gRPC (HTTP/2) to the kubelet's pod-resources unix socket",
}

# kopf functions our code may call that send no request.
KOPF_QUIET = {"kopf.run", "kopf.operator", "kopf.Memo", "kopf.OperatorSettings",
              "kopf.login_with_service_account", "kopf.login_with_kubeconfig",
              "kopf.ConnectionInfo", "kopf.TemporaryError", "kopf.PermanentError"}
# kopf functions that post an Event (through kopf's poster: kopf's post_event).
KOPF_POSTING = {"kopf.event", "kopf.info", "kopf.warn", "kopf.exception"}
# kopf registration: decorators, or `kopf.on.x(...)(fn)`; read from kopf's registry instead.
KOPF_REGISTRATION = ("kopf.on.", "kopf.daemon", "kopf.timer", "kopf.index")


# -- the source: request sites -----------------------------------------------------------------

@dataclass
class Sites:
    """Request sites found in some source files."""

    sites: dict[str, set[str]] = field(default_factory=dict)  # function -> HTTP methods
    non_literal: list[str] = field(default_factory=list)
    called: set[str] = field(default_factory=set)  # attribute names called (x.name(...))
    kopf_calls: dict[str, list[str]] = field(default_factory=dict)  # kopf.X -> where
    clients: dict[str, list[str]] = field(default_factory=dict)  # module -> HTTP clients used


def module_name(path: Path) -> str:
    for root in SOURCE_ROOTS:
        if path.is_relative_to(root):
            return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(
                ".__init__")
    raise ValueError(f"{path} is in no source root")


def module_path(module: str) -> Path | None:
    for root in SOURCE_ROOTS:
        for path in (root.joinpath(*module.split(".")).with_suffix(".py"),
                     root.joinpath(*module.split("."), "__init__.py")):
            if path.is_file():
                return path
    return None


def _dotted(node: ast.expr) -> str:
    return ast.unparse(node)


def _is_client(name: str) -> bool:
    return any(name == c or name.startswith(c + ".") for c in HTTP_CLIENTS)


def scan(source: str, module: str, out: Sites) -> None:
    """Add the request sites of one module's `source` to `out`."""

    def client(name: str) -> None:
        if _is_client(name):
            out.clients.setdefault(module, []).append(name)

    def visit(node: ast.AST, stack: list[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            outer: list[ast.AST] = [*node.decorator_list]
            if isinstance(node, ast.ClassDef):
                outer += [*node.bases, *node.keywords]
            else:
                outer += [d for d in (*node.args.defaults, *node.args.kw_defaults) if d]
            for part in outer:
                visit(part, stack)
            for statement in node.body:
                visit(statement, [*stack, node.name])
            return
        where = ".".join([module, *stack])
        if isinstance(node, ast.Import):
            for alias in node.names:
                client(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            client(node.module)
            for alias in node.names:
                client(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Call):
            func = node.func
            if (_dotted(func) in ("importlib.import_module", "__import__") and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                client(node.args[0].value)
            if isinstance(func, ast.Attribute):
                out.called.add(func.attr)
                if func.attr in SENDING_METHODS and where not in TRANSPORT:
                    first = node.args[0] if node.args else None
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        out.sites.setdefault(where, set()).add(first.value)
                    else:
                        out.non_literal.append(f"{where}: {ast.unparse(node)[:100]}")
            # kopf.on.event(...)(fn) registers; kopf.info(...) posts; kopf.run(...) runs.
            target = _dotted(func.func if isinstance(func, ast.Call) else func)
            if target.startswith("kopf.") and not target.startswith(KOPF_REGISTRATION):
                out.kopf_calls.setdefault(target, []).append(where)
        for child in ast.iter_child_nodes(node):
            visit(child, stack)

    visit(ast.parse(source), [])


@dataclass
class ComponentCode:
    """What one component's code sends."""

    sites: dict[str, set[str]]
    non_literal: list[str]
    kopf_calls: dict[str, list[str]]
    clients: dict[str, list[str]]
    modules: list[str]


def component_code(modules: Iterable[str]) -> ComponentCode:
    """The requests of the given modules, with the transport's own request methods counted
    where these modules call them."""
    mine, transport = Sites(), Sites()
    names = sorted(set(modules))
    for module in names:
        path = module_path(module)
        if path is None or "_pb2" in path.name:
            continue
        scan(path.read_text(), module, transport if module == TRANSPORT_MODULE else mine)
    sites = dict(mine.sites)
    for site, methods in transport.sites.items():
        if site.rsplit(".", 1)[1] in mine.called:
            sites[site] = methods
    clients = {m: c for m, c in {**mine.clients, **transport.clients}.items()
               if m not in OTHER_CONNECTIONS}
    return ComponentCode(sites=sites, non_literal=mine.non_literal + transport.non_literal,
                         kopf_calls=mine.kopf_calls, clients=clients, modules=names)


def folder_modules(folder: Path) -> Iterator[str]:
    for path in sorted(folder.rglob("*.py")):
        yield module_name(path)


# -- the entry points, in a fresh interpreter --------------------------------------------------

def entry_module(script: str) -> str:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return str(scripts[script]).split(":", 1)[0]


_PROBE = r"""
import asyncio, inspect, json, logging, sys
import importlib

entry = sys.argv[1]
importlib.import_module(entry)
first_party = sorted(m for m in sys.modules if m.split(".")[0] in ("gpu_auditor", "node_agent"))
out = {"modules": first_party, "kopf": None}
if "kopf" in sys.modules:
    import kopf
    from kopf._core.intents import registries
    registry = registries.get_default_registry()
    def ours(fn):
        return not fn.__module__.split(".")[0] == "kopf"
    def name(fn):
        module = entry if fn.__module__ == "__main__" else fn.__module__
        return f"{module}.{fn.__qualname__}"
    handlers = []
    for kind in ("indexing", "watching", "spawning", "changing", "webhooks"):
        for handler in getattr(registry, "_" + kind).get_all_handlers():
            s = handler.selector
            handlers.append({
                "function": name(handler.fn), "kind": kind,
                "group": None if s is None else s.group,
                "version": None if s is None else s.version,
                "resource": None if s is None else (s.plural or s.any_name),
                "other_names": [] if s is None else [n for n in (s.kind, s.singular, s.shortcut,
                                                                  s.category) if n],
                "specific": s is not None and s.is_specific,
            })
    activities = [{"function": name(h.fn), "activity": h.activity.value}
                  for h in registry._activities.get_all_handlers() if ours(h.fn)]
    # kopf applies the startup handlers to its settings before anything else starts: do the
    # same to fresh settings and read what they switched.
    settings = kopf.OperatorSettings()
    errors = []
    for h in registry._activities.get_all_handlers():
        if ours(h.fn) and h.activity.value == "startup":
            try:
                result = h.fn(settings=settings, memo=kopf.Memo(), logger=logging.getLogger(),
                              retry=0, activity=h.activity)
                if inspect.isawaitable(result):
                    asyncio.run(result)
            except Exception as exc:
                errors.append(f"{name(h.fn)}: {exc!r}")
    out["kopf"] = {"handlers": handlers, "activities": activities, "errors": errors,
                   "scanning": not settings.scanning.disabled,
                   "posting": bool(settings.posting.enabled),
                   "standalone": bool(settings.peering.standalone)}
print(json.dumps(out))
"""


@dataclass
class Handler:
    function: str
    kind: str  # kopf's registry: indexing, watching, spawning, changing, webhooks
    group: str | None
    version: str | None
    resource: str | None
    other_names: list[str]
    specific: bool


@dataclass
class KopfSetup:
    handlers: list[Handler]
    activities: dict[str, str]  # function -> activity (startup, cleanup, authentication, ...)
    errors: list[str]
    scanning: bool  # kopf's cluster discovery (CRDs; namespaces when namespaced)
    posting: bool  # kopf posts Events (its errors, kopf.event(...))
    standalone: bool  # no peering


@dataclass
class Entry:
    modules: list[str]
    kopf: KopfSetup | None


def probe_entry(module: str, pythonpath: Sequence[Path] = ()) -> Entry:
    """Import `module` in a fresh interpreter: the first-party modules it loads, and the kopf
    handlers and settings it registers (None without kopf)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [*map(str, pythonpath), *map(str, SOURCE_ROOTS), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _PROBE, module], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"importing {module} failed:\n{done.stderr[-3000:]}")
    raw = json.loads(done.stdout.splitlines()[-1])
    setup = None
    if raw["kopf"] is not None:
        k = raw["kopf"]
        setup = KopfSetup(handlers=[Handler(**h) for h in k["handlers"]],
                          activities={a["function"]: a["activity"] for a in k["activities"]},
                          errors=k["errors"], scanning=k["scanning"], posting=k["posting"],
                          standalone=k["standalone"])
    return Entry(modules=raw["modules"], kopf=setup)


# -- kopf's own requests -----------------------------------------------------------------------

# What kopf sends for a handler of each registry kind: event and index handlers keep no state
# (list and watch); change-detecting handlers, daemons and timers also write their progress,
# diff-base and finalizers onto the object (patch). Webhooks make kopf manage admission
# configurations: not modelled, so refused below.
HANDLER_VERBS = {"watching": {"list", "watch"}, "indexing": {"list", "watch"},
                 "changing": {"list", "watch", "patch"}, "spawning": {"list", "watch", "patch"}}
QUIET_ACTIVITIES = {"startup", "cleanup", "authentication", "probe"}

# kopf's machinery, by the function that sends, and when it runs.
KOPF_RESOURCE_OBSERVER = "kopf._core.reactor.observation.resource_observer"
KOPF_NAMESPACE_OBSERVER = "kopf._core.reactor.observation.namespace_observer"
KOPF_POST_EVENT = "kopf._cogs.clients.events.post_event"


def kopf_machinery(setup: KopfSetup) -> dict[str, str | None]:
    """kopf's own senders that run under `setup`: function -> None when always, or the chart
    value they need (the namespace observer runs only when the operator watches some
    namespaces, not all)."""
    live: dict[str, str | None] = {}
    if setup.scanning:
        live[KOPF_RESOURCE_OBSERVER] = None
        live[KOPF_NAMESPACE_OBSERVER] = "operator.namespaces"
    if setup.posting:
        live[KOPF_POST_EVENT] = None
    return live
