{{/* The chart name, truncated to 63 characters (a DNS label). */}}
{{- define "khai.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: the release name when it already holds the chart name
(release `khai-hello` gives `khai-hello`, the name `khai generate manifests` uses for operator
`hello`), else `<release>-<chart>`.
*/}}
{{- define "khai.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "khai.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "khai.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object: the selector labels and managed-by, as `khai generate manifests` writes
them, plus Helm's release labels (chart, instance, version).
*/}}
{{- define "khai.labels" -}}
helm.sh/chart: {{ include "khai.chart" . }}
{{ include "khai.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels the Deployment, Service and PodDisruptionBudget select on: the operator's name, as in
`khai generate manifests` (one operator per namespace; selectors do not cross namespaces).
*/}}
{{- define "khai.selectorLabels" -}}
app.kubernetes.io/name: {{ required "operator.name is required: the [operator] name of operator.toml" .Values.operator.name }}
{{- end }}

{{/* The ServiceAccount khai runs as. */}}
{{- define "khai.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "khai.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The ConfigMap holding operator.toml and the scripts. */}}
{{- define "khai.configMapName" -}}
{{- default (printf "%s-config" (include "khai.fullname" .)) .Values.config.existingConfigMap }}
{{- end }}
