{{/* Labels Helm adds to every object, on top of the ones the kustomize bases carry. */}}
{{- define "kfed.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "kfed.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
The facts that differ between the two components. Names are fixed, not release-prefixed:
the webhook configurations, the leader-election Lease and the certificate Secret are
cluster-wide singletons named in the code and in the RBAC rules.
*/}}
{{- define "kfed.component" -}}
{{- if eq . "manager" -}}
name: kfed-manager
component: manager
module: manager
container: manager
webhookService: kfed-webhook-service
metricsService: kfed-metrics
{{- else -}}
name: kfed-worker-agent
component: worker-agent
module: worker_agent
container: worker-agent
webhookService: kfed-agent-webhook-service
metricsService: kfed-agent-metrics
{{- end -}}
{{- end -}}
