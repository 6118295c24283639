{{/* The chart name, truncated to 63 characters (a DNS label). */}}
{{- define "khai.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name of the release's objects. */}}
{{- define "khai.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "khai.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "khai.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "khai.labels" -}}
helm.sh/chart: {{ include "khai.chart" . }}
{{ include "khai.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels the Deployment, Service and PodDisruptionBudget select on. */}}
{{- define "khai.selectorLabels" -}}
app.kubernetes.io/name: {{ include "khai.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
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
