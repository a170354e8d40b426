{{/* The chart's name: the name label. */}}
{{- define "runway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Every object's name: the release's, then the chart's unless the release's name holds it
(`helm install runway` gives runway, `helm install blue` blue-runway), as every chart Runway
renders does; fullnameOverride replaces it. At most 55 characters, so that
`<name>-ingress` is a Service name (63).
*/}}
{{- define "runway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The image's tag as the reference names it: image.tag, else appVersion unless a digest
names the image; empty when the digest alone does. */}}
{{- define "runway.tag" -}}
{{- if .Values.image.tag }}
{{- .Values.image.tag }}
{{- else if not .Values.image.digest }}
{{- .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* The image reference: repository[:tag][@digest]. */}}
{{- define "runway.image" -}}
{{- required "set image.repository: an image holding the runway binary" .Values.image.repository }}
{{- with include "runway.tag" . }}:{{ . }}{{ end }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* The labels that select the server's pod; stable across upgrades (a StatefulSet's
selector and claim template cannot change). */}}
{{- define "runway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "runway.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: server
{{- end }}

{{/* Labels on every object: the standard set, the version only when a tag names the image. */}}
{{- define "runway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/name: {{ include "runway.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- with include "runway.tag" . }}
app.kubernetes.io/version: {{ . | trunc 63 | trimAll "-_." | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/part-of: runway
{{- end }}

{{/* The server's ServiceAccount, which each environment's RoleBinding names. */}}
{{- define "runway.serviceAccountName" -}}
{{- include "runway.fullname" . }}
{{- end }}

{{/* The namespaces, one per environment, as a JSON list of {env, namespace}; fails on a
name Kubernetes would refuse, or on the release's own namespace (which Helm does not own). */}}
{{- define "runway.namespaces" -}}
{{- $out := list }}
{{- range .Values.environments }}
{{- $namespace := replace "{env}" . $.Values.namespacePattern }}
{{- if gt (len $namespace) 63 }}
{{- fail (printf "namespacePattern: %q for environment %q is longer than 63 characters" $namespace .) }}
{{- end }}
{{- if eq $namespace $.Release.Namespace }}
{{- fail (printf "namespacePattern: environment %q's namespace %q is the release's own: give the release another namespace" . $namespace) }}
{{- end }}
{{- $out = append $out (dict "env" . "namespace" $namespace) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
`runway server`'s configuration: what the values above decide, deep-merged with
serverConfig (whose schema refuses the keys set here, so neither replaces the other).
*/}}
{{- define "runway.serverConfig" -}}
{{- $fullname := include "runway.fullname" . }}
{{- $api := printf "%s-api" $fullname }}
{{- $ns := .Release.Namespace }}
{{- $hostnames := list "localhost" "127.0.0.1" $api (printf "%s.%s" $api $ns) (printf "%s.%s.svc" $api $ns) (printf "%s.%s.svc.cluster.local" $api $ns) }}
{{- $hostnames = concat $hostnames .Values.apiHostnames | uniq }}
{{- $managed := dict
  "api" (dict
    "listen" "0.0.0.0:7443"
    "environments" .Values.environments
    "tls" (dict "hostnames" $hostnames))
  "ingress" (dict
    "https" "0.0.0.0:8443"
    "http" "0.0.0.0:8080"
    "admin" "0.0.0.0:9090")
  "control" (dict "domain" .Values.domain)
  "runtime" (dict
    "kind" "kubernetes"
    "kubernetes" (dict "namespace_pattern" .Values.namespacePattern)) }}
{{- mustMergeOverwrite (deepCopy .Values.serverConfig) $managed | toYaml }}
{{- end }}

{{/* Whether the API serves HTTPS (api.tls.enabled, true unless serverConfig says false). */}}
{{- define "runway.apiScheme" -}}
{{- $tls := dig "api" "tls" "enabled" true .Values.serverConfig }}
{{- if $tls }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}
