"""helm --post-renderer: mount a host folder holding a fake NVML file at /fake (read-only) in
the agent DaemonSet, which the chart has no value for (no extraVolumes).

    helm install ... --post-renderer <python> --post-renderer-args <this file> \\
        --post-renderer-args <host folder>

Reads the rendered manifests on stdin, writes them on stdout; only the agent DaemonSet changes.
"""

from __future__ import annotations

import sys

import yaml


def main() -> int:
    folder = sys.argv[1]
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    agents = [d for d in docs if d.get("kind") == "DaemonSet"
              and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "agent"]
    if len(agents) != 1:
        print(f"fake_nvml_post_renderer: expected one agent DaemonSet, found {len(agents)}",
              file=sys.stderr)
        return 1
    spec = agents[0]["spec"]["template"]["spec"]
    spec.setdefault("volumes", []).append(
        {"name": "fake-nvml", "hostPath": {"path": folder, "type": "Directory"}})
    spec["containers"][0].setdefault("volumeMounts", []).append(
        {"name": "fake-nvml", "mountPath": "/fake", "readOnly": True})
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
