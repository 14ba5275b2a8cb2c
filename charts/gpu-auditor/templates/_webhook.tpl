{{/* The admission webhook server (docs/webhook.md): names, labels, its Service's DNS names. */}}
{{- define "gpu-auditor.webhook.fullname" -}}
{{- printf "%s-webhook" (include "gpu-auditor.fullname" .) }}
{{- end }}

{{- define "gpu-auditor.webhook.labels" -}}
{{ include "gpu-auditor.labels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "gpu-auditor.webhook.selectorLabels" -}}
{{ include "gpu-auditor.selectorLabels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "gpu-auditor.webhook.tlsSecretName" -}}
{{- printf "%s-tls" (include "gpu-auditor.webhook.fullname" .) }}
{{- end }}

{{/* The names the serving certificate is valid for: the Service's, as the API server calls it. */}}
{{- define "gpu-auditor.webhook.dnsNames" -}}
{{- $svc := include "gpu-auditor.webhook.fullname" . }}
{{- $ns := (include "gpu-auditor.namespace" .) }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/*
The namespaces no webhook is ever called for: kube-system, the release's own (the webhook must
never stand in the way of its own pods) and webhook.excludeNamespaces. A matchExpression.
*/}}
{{- define "gpu-auditor.webhook.excludedNamespaces" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values:
    {{- toYaml (concat (list "kube-system" (include "gpu-auditor.namespace" .)) .Values.webhook.excludeNamespaces | uniq) | nindent 4 }}
{{- end }}

{{/* What each webhook entry shares: never a refusal of its own, no side effects, v1 reviews. */}}
{{- define "gpu-auditor.webhook.common" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
failurePolicy: Ignore
matchPolicy: Equivalent
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{- end }}

{{/* The clientConfig of a webhook entry; args: root context, path. */}}
{{- define "gpu-auditor.webhook.clientConfig" -}}
{{- $root := index . 0 -}}
service:
  name: {{ include "gpu-auditor.webhook.fullname" $root }}
  namespace: {{ include "gpu-auditor.namespace" $root }}
  path: {{ index . 1 }}
  port: {{ $root.Values.webhook.service.port }}
{{- with index . 2 }}
caBundle: {{ . }}
{{- end }}
{{- end }}
