{{/*
Chart name, cut to 63 characters (the DNS label limit of some name fields).
*/}}
{{- define "gpu-auditor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or the release name alone when it already holds the chart name.
Cut to 53 characters so that the longest suffix, "-dashboard" (10), still fits in 63.
*/}}
{{- define "gpu-auditor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 53 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version for the helm.sh/chart label.
*/}}
{{- define "gpu-auditor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "gpu-auditor.labels" -}}
helm.sh/chart: {{ include "gpu-auditor.chart" . }}
{{ include "gpu-auditor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-auditor
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels shared by all components; each component adds app.kubernetes.io/component.
*/}}
{{- define "gpu-auditor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-auditor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Agent: names and labels. */}}
{{- define "gpu-auditor.agent.fullname" -}}
{{- printf "%s-agent" (include "gpu-auditor.fullname" .) }}
{{- end }}

{{- define "gpu-auditor.agent.labels" -}}
{{ include "gpu-auditor.labels" . }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "gpu-auditor.agent.selectorLabels" -}}
{{ include "gpu-auditor.selectorLabels" . }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "gpu-auditor.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (include "gpu-auditor.agent.fullname" .) .Values.agent.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Operator: names and labels. */}}
{{- define "gpu-auditor.operator.fullname" -}}
{{- printf "%s-operator" (include "gpu-auditor.fullname" .) }}
{{- end }}

{{- define "gpu-auditor.operator.labels" -}}
{{ include "gpu-auditor.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "gpu-auditor.operator.selectorLabels" -}}
{{ include "gpu-auditor.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "gpu-auditor.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "gpu-auditor.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The namespace of every namespaced object: namespaceOverride, else the release's (as
prometheus-community charts do, for a chart installed as a dependency of another).
*/}}
{{- define "gpu-auditor.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/*
An image reference from an image value (registry, repository, tag, digest; a dict with "image",
"global" and "appVersion"): registry/repository@digest, else registry/repository:tag (the tag
defaults to appVersion). global.imageRegistry wins over the image's registry (a mirror of every
image of the chart). A repository that names its own registry host (its first part holds a dot
or a colon, or is localhost: registry.example.com/gpu-auditor) is used as it is, as before the
registry field existed.
*/}}
{{- define "gpu-auditor.imageReference" -}}
{{- $image := .image }}
{{- $registry := default $image.registry .global.imageRegistry }}
{{- $parts := splitList "/" $image.repository }}
{{- $host := first $parts }}
{{- $ownHost := and (gt (len $parts) 1) (or (contains "." $host) (contains ":" $host) (eq $host "localhost")) }}
{{- $name := $image.repository }}
{{- if and $registry (not $ownHost) }}
{{- $name = printf "%s/%s" (trimSuffix "/" $registry) $image.repository }}
{{- end }}
{{- if $image.digest }}
{{- printf "%s@%s" $name $image.digest }}
{{- else }}
{{- printf "%s:%s" $name (default .appVersion $image.tag) }}
{{- end }}
{{- end }}

{{/*
The chart's own image (agent, operator, webhook, the probe's init container, the test pod).
*/}}
{{- define "gpu-auditor.image" -}}
{{- include "gpu-auditor.imageReference" (dict "image" .Values.image "global" .Values.global "appVersion" .Chart.AppVersion) }}
{{- end }}

{{/*
The agent container's securityContext: the user from agent.runAsUser (0 only for the kubelet's
root-owned pod-resources socket), then agent.securityContext merged over it.
*/}}
{{- define "gpu-auditor.agent.securityContext" -}}
{{- $uid := int64 .Values.agent.runAsUser }}
{{- $user := dict "runAsUser" $uid "runAsNonRoot" (ne $uid 0) }}
{{- if ne $uid 0 }}
{{- $_ := set $user "runAsGroup" $uid }}
{{- end }}
{{- toYaml (mergeOverwrite $user (deepCopy .Values.agent.securityContext)) }}
{{- end }}

{{/*
The kube-rbac-proxy image of a component's metricsProxy values (a dict with "proxy" and
"global"), as gpu-auditor.imageReference.
*/}}
{{- define "gpu-auditor.metricsProxy.image" -}}
{{- include "gpu-auditor.imageReference" (dict "image" .proxy.image "global" .global "appVersion" "") }}
{{- end }}

{{/*
The kube-rbac-proxy container in front of a component's /metrics. Arguments (a dict): proxy (the
component's metricsProxy values), port (the metrics port it serves over TLS), ignorePaths (a path
passed on without a token, for the kubelet's probes; "" for none), global (.Values.global).
*/}}
{{- define "gpu-auditor.metricsProxy.container" -}}
{{- $proxy := .proxy -}}
- name: kube-rbac-proxy
  image: {{ include "gpu-auditor.metricsProxy.image" (dict "proxy" $proxy "global" .global) }}
  imagePullPolicy: {{ $proxy.image.pullPolicy }}
  args:
    - --secure-listen-address=0.0.0.0:{{ .port }}
    - --upstream=http://127.0.0.1:{{ $proxy.upstreamPort }}/
    {{- if .ignorePaths }}
    # Probes reach {{ .ignorePaths }} without a token; every other path needs a token allowed
    # to get the non-resource URL (SubjectAccessReview), e.g. /metrics.
    - --ignore-paths={{ .ignorePaths }}
    {{- else }}
    # Every path needs a token allowed to get the non-resource URL (SubjectAccessReview).
    {{- end }}
    - --proxy-endpoints-port={{ $proxy.healthPort }}
    {{- if $proxy.tlsSecretName }}
    - --tls-cert-file=/etc/kube-rbac-proxy/tls.crt
    - --tls-private-key-file=/etc/kube-rbac-proxy/tls.key
    {{- end }}
  ports:
    - name: metrics
      containerPort: {{ .port }}
      protocol: TCP
    - name: proxy-health
      containerPort: {{ $proxy.healthPort }}
      protocol: TCP
  # The proxy's own /healthz (its endpoints port): restart a proxy that stopped serving.
  livenessProbe:
    httpGet:
      path: /healthz
      port: proxy-health
      scheme: HTTPS
    initialDelaySeconds: 5
    periodSeconds: 20
    timeoutSeconds: 5
    failureThreshold: 3
  {{- with $proxy.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop:
        - ALL
  {{- if $proxy.tlsSecretName }}
  volumeMounts:
    - name: metrics-proxy-tls
      mountPath: /etc/kube-rbac-proxy
      readOnly: true
  {{- end }}
{{- end }}

{{/*
Stable Prometheus job names. The alert rules in files/prometheus-rules.yaml select on them,
so the ServiceMonitor/PodMonitor take the job name from this label instead of the object name.
*/}}
{{- define "gpu-auditor.jobLabelKey" -}}
gpu-auditor.io/job
{{- end }}

{{/*
Fail early on combinations that cannot work.
*/}}
{{- define "gpu-auditor.validate" -}}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled are both true: every target would be scraped twice; enable one" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.agent.enabled (not .Values.agent.service.enabled) }}
{{- fail "serviceMonitor.enabled needs agent.service.enabled (a ServiceMonitor selects a Service); or use podMonitor.enabled" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.operator.enabled (not .Values.operator.service.enabled) }}
{{- fail "serviceMonitor.enabled needs operator.service.enabled (a ServiceMonitor selects a Service); or use podMonitor.enabled" }}
{{- end }}
{{- if eq (int .Values.operator.metricsPort) (int .Values.operator.livenessPort) }}
{{- fail "operator.metricsPort and operator.livenessPort must differ" }}
{{- end }}
{{- if and .Values.agent.enabled .Values.agent.report .Values.agent.reportPolicy.enabled (semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail "agent.reportPolicy.enabled needs Kubernetes >= 1.30 (ValidatingAdmissionPolicy v1, node-bound ServiceAccount tokens); on an older cluster set agent.reportPolicy.enabled=false, and any agent can then write every node's GPUNodeReport" }}
{{- end }}
{{- if and .Values.agent.enabled .Values.agent.metricsProxy.enabled }}
{{- if .Values.podMonitor.enabled }}
{{- fail "agent.metricsProxy.enabled needs a scraper that sends its token: use serviceMonitor.enabled (a PodMonitor cannot use Prometheus' own token)" }}
{{- end }}
{{- $ports := list (int .Values.agent.port) (int .Values.agent.metricsProxy.upstreamPort) (int .Values.agent.metricsProxy.healthPort) }}
{{- if ne (len (uniq $ports)) 3 }}
{{- fail "agent.port, agent.metricsProxy.upstreamPort and agent.metricsProxy.healthPort must differ" }}
{{- end }}
{{- end }}
{{- if and .Values.operator.enabled .Values.operator.metricsProxy.enabled }}
{{- if .Values.podMonitor.enabled }}
{{- fail "operator.metricsProxy.enabled needs a scraper that sends its token: use serviceMonitor.enabled (a PodMonitor cannot use Prometheus' own token)" }}
{{- end }}
{{- $ports := list (int .Values.operator.metricsPort) (int .Values.operator.livenessPort) (int .Values.operator.metricsProxy.upstreamPort) (int .Values.operator.metricsProxy.healthPort) }}
{{- if ne (len (uniq $ports)) 4 }}
{{- fail "operator.metricsPort, operator.livenessPort, operator.metricsProxy.upstreamPort and operator.metricsProxy.healthPort must differ" }}
{{- end }}
{{- end }}
{{- if and (not (kindIs "invalid" .Values.agent.podResourcesSocketGroup)) (eq (int64 .Values.agent.runAsUser) 0) }}
{{- fail "agent.podResourcesSocketGroup is for a non-root agent: set agent.runAsUser too (root needs no group to reach the socket)" }}
{{- end }}
{{- end }}

{{/*
The distributed-job kinds the operator groups (operator.jobKinds), comma-separated in the
order of the values: each true, or auto and its CRD served (.Capabilities.APIVersions.Has; an
MPIJob of either API). One list for the operator's --job-kinds and its RBAC.
*/}}
{{- define "gpu-auditor.operator.jobKinds" -}}
{{- $served := dict
  "job" (list "batch/v1/Job")
  "jobset" (list "jobset.x-k8s.io/v1alpha2/JobSet")
  "trainjob" (list "trainer.kubeflow.org/v1alpha1/TrainJob")
  "pytorchjob" (list "kubeflow.org/v1/PyTorchJob")
  "tfjob" (list "kubeflow.org/v1/TFJob")
  "mpijob" (list "kubeflow.org/v2beta1/MPIJob" "kubeflow.org/v1/MPIJob")
  "xgboostjob" (list "kubeflow.org/v1/XGBoostJob")
  "paddlejob" (list "kubeflow.org/v1/PaddleJob")
  "jaxjob" (list "kubeflow.org/v1/JAXJob")
  "leaderworkerset" (list "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet")
  "ray" (list "ray.io/v1/RayCluster") -}}
{{- $on := list -}}
{{- range $switch := list "job" "jobset" "trainjob" "pytorchjob" "tfjob" "mpijob" "xgboostjob" "paddlejob" "jaxjob" "leaderworkerset" "ray" -}}
{{- $value := index $.Values.operator.jobKinds $switch -}}
{{- if eq (toString $value) "auto" -}}
{{- range $api := get $served $switch -}}
{{- if $.Capabilities.APIVersions.Has $api -}}{{- $on = append $on $switch -}}{{- end -}}
{{- end -}}
{{- else if $value -}}
{{- $on = append $on $switch -}}
{{- end -}}
{{- end -}}
{{- $on | uniq | join "," -}}
{{- end }}
