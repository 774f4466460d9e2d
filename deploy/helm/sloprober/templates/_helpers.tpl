{{/*
The objects' name: fullnameOverride, else the release's if it names
sloprober already, else <release>-sloprober. At most 52 characters: a
StatefulSet's pods carry a controller-revision-hash label of its name and 11
more, within 63.
*/}}
{{- define "sloprober.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sloprober.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sloprober.labels" -}}
{{ include "sloprober.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "sloprober.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "sloprober.configMapName" -}}
{{- .Values.existingConfigMap | default (printf "%s-config" (include "sloprober.fullname" .)) -}}
{{- end -}}

{{/*
The configuration: the config value, or the chart's default. Never passed
through tpl: a configuration is data, not a template.
*/}}
{{- define "sloprober.config" -}}
{{- .Values.config | default (.Files.Get "files/sloprober.yml") -}}
{{- end -}}
