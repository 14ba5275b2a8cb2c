"""The distributed-job kinds whose pods the operator groups, and the labels their controllers set.

One table for the operator (which kinds it follows, where their objects are) and for `gpu-auditor
explain KIND/NAME` (which object to read, which pods are its own). Each kind's facts come from
its controller's source (docs/operator.md, "One job, many pods"): JobSet v0.11, Kubeflow Trainer
v2.1 and training-operator v1.9, mpi-operator v0.6, LeaderWorkerSet v0.8, KubeRay v1.5, and
Kubernetes' own Indexed Jobs.

`switch` is the word of the operator's `--job-kinds` flag and of the chart's
`operator.jobKinds` values: one switch may cover two kinds (`ray`: RayCluster and RayJob) or two
versions of one (`mpijob`: training-operator's v1 and mpi-operator's v2beta1 share the CRD
`mpijobs.kubeflow.org`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpu_auditor.base import names


@dataclass(frozen=True)
class JobKind:
    switch: str
    kind: str
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def path(self, namespace: str, name: str) -> str:
        """The object's path; raises `names.InvalidName` for a name that is not valid."""
        return (f"/apis/{self.group}/{self.version}/namespaces/"
                f"{names.segment(names.namespace(namespace))}/{self.plural}/"
                f"{names.segment(names.object_name(name))}")


JOB: Final = JobKind("job", "Job", "batch", "v1", "jobs")
JOBSET: Final = JobKind("jobset", "JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets")
TRAINJOB: Final = JobKind("trainjob", "TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs")
PYTORCHJOB: Final = JobKind("pytorchjob", "PyTorchJob", "kubeflow.org", "v1", "pytorchjobs")
TFJOB: Final = JobKind("tfjob", "TFJob", "kubeflow.org", "v1", "tfjobs")
XGBOOSTJOB: Final = JobKind("xgboostjob", "XGBoostJob", "kubeflow.org", "v1", "xgboostjobs")
PADDLEJOB: Final = JobKind("paddlejob", "PaddleJob", "kubeflow.org", "v1", "paddlejobs")
JAXJOB: Final = JobKind("jaxjob", "JAXJob", "kubeflow.org", "v1", "jaxjobs")
MPIJOB_V1: Final = JobKind("mpijob", "MPIJob", "kubeflow.org", "v1", "mpijobs")
MPIJOB: Final = JobKind("mpijob", "MPIJob", "kubeflow.org", "v2beta1", "mpijobs")
LEADERWORKERSET: Final = JobKind("leaderworkerset", "LeaderWorkerSet",
                                 "leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
RAYCLUSTER: Final = JobKind("ray", "RayCluster", "ray.io", "v1", "rayclusters")
RAYJOB: Final = JobKind("ray", "RayJob", "ray.io", "v1", "rayjobs")

KINDS: Final = (JOB, JOBSET, TRAINJOB, PYTORCHJOB, TFJOB, XGBOOSTJOB, PADDLEJOB, JAXJOB, MPIJOB_V1,
                MPIJOB, LEADERWORKERSET, RAYCLUSTER, RAYJOB)
SWITCHES: Final = tuple(dict.fromkeys(k.switch for k in KINDS))
"""`--job-kinds` words, in the table's order."""

TRAINING_OPERATOR: Final = {
    "pytorchjob-controller": PYTORCHJOB, "tfjob-controller": TFJOB,
    "xgboostjob-controller": XGBOOSTJOB, "paddlejob-controller": PADDLEJOB,
    "jaxjob-controller": JAXJOB, "mpijob-controller": MPIJOB_V1, "mpi-operator": MPIJOB,
}
"""`training.kubeflow.org/operator-name` -> the kind whose pods carry it (mpi-operator's
v2beta1 MPIJob sets `mpi-operator`; training-operator v1 one `<kind>-controller` each)."""

# Labels (and one annotation) the controllers put on their pods.
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
"""Annotation and (since Kubernetes 1.28) label of an Indexed Job's pod: its index."""
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID: Final = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_RESTART: Final = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
JOBSET_GLOBAL_INDEX: Final = "jobset.sigs.k8s.io/job-global-index"
TRAINING_JOB_NAME: Final = "training.kubeflow.org/job-name"
TRAINING_OPERATOR_NAME: Final = "training.kubeflow.org/operator-name"
TRAINING_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
TRAINING_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"
TRAINING_JOB_ROLE: Final = "training.kubeflow.org/job-role"
LWS_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"
RAY_CLUSTER: Final = "ray.io/cluster"
RAY_NODE_TYPE: Final = "ray.io/node-type"
RAY_GROUP: Final = "ray.io/group"
RAY_ORIGIN_NAME: Final = "ray.io/originated-from-cr-name"
RAY_ORIGIN_KIND: Final = "ray.io/originated-from-crd"


def by_reference(api_version: object, kind: object) -> JobKind | None:
    """The kind an owner reference names (apiVersion and kind as written), or None."""
    return next((k for k in KINDS if k.api_version == api_version and k.kind == kind), None)


def by_word(word: str) -> tuple[JobKind, ...]:
    """The kinds `gpu-auditor explain WORD/NAME` may mean: a kind's name in any case
    (`jobset`, `PyTorchJob`), its plural, or `lws` (both MPIJob versions for `mpijob`)."""
    word = word.lower()
    if word == "lws":
        return (LEADERWORKERSET,)
    return tuple(k for k in KINDS if word in (k.kind.lower(), k.plural))


def pod_selector(kind: JobKind, name: str) -> str | None:
    """The label selector of the pods of the `kind` object `name` (a RayJob's are its
    RayCluster's: read `status.rayClusterName`), or None for a kind selected otherwise."""
    if kind in (JOBSET, TRAINJOB):  # a TrainJob's JobSet has the TrainJob's name
        return f"{JOBSET_NAME}={name}"
    if kind.group == "kubeflow.org":
        return f"{TRAINING_JOB_NAME}={name}"
    if kind is LEADERWORKERSET:
        return f"{LWS_NAME}={name}"
    if kind is RAYCLUSTER:
        return f"{RAY_CLUSTER}={name}"
    if kind is JOB:
        return f"{JOB_NAME_LABEL}={name}"
    return None
