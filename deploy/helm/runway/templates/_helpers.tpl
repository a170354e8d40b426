{{/* The chart's name: the name label. */}}
{{- define "runway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Every object's name: the release's, then the chart's unless the release's name holds it
(`helm install runway` gives runway, `helm install blue` blue-runway), as every chart Runway
renders does; fullnameOverride replaces it. At most 55 characters, so that
`<name>-ingress` is a Service name (63); see runway.controlServiceName for the longer one.
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

{{/* The labels that select the server's pods (the StatefulSet's one, or the Deployment's
replicas with a database); stable across upgrades (a StatefulSet's selector and claim
template cannot change). */}}
{{- define "runway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "runway.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: server
{{- end }}

{{/* The labels that select the ingress's pods. */}}
{{- define "runway.ingressSelectorLabels" -}}
app.kubernetes.io/name: {{ include "runway.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: ingress
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

{{/* The ingress's ServiceAccount: no rights, no token. */}}
{{- define "runway.ingressServiceAccountName" -}}
{{- printf "%s-ingress" (include "runway.fullname" .) }}
{{- end }}

{{/* The headless Service that lists every ingress pod's control port, for the server: the
base name cut to 47 characters, so that the name is a DNS label (63). */}}
{{- define "runway.controlServiceName" -}}
{{- printf "%s-ingress-control" (include "runway.fullname" . | trunc 47 | trimSuffix "-") }}
{{- end }}

{{/* Where the pods mount the Secrets: the serving certificate authority (ca.pem,
ca-key.pem), and each side's control-channel certificates (ca.crt, tls.crt, tls.key). Not
under /etc/runway, the ConfigMap's read-only volume. */}}
{{- define "runway.caMount" -}}/etc/runway-ca{{- end }}
{{- define "runway.controlTlsMount" -}}/etc/runway-control-tls{{- end }}

{{/* Where the server's pods mount, with a database (store.urlSecret), the file holding its
URL (`url`), the authority its certificate must come from (`ca.crt`) and the master key
(`master.key`): each a key of a Secret (or a ConfigMap, for the authority) under a name of
its own, whatever the key is called there. */}}
{{- define "runway.storeUrlMount" -}}/etc/runway-store{{- end }}
{{- define "runway.storeCaMount" -}}/etc/runway-store-ca{{- end }}
{{- define "runway.masterKeyMount" -}}/etc/runway-master-key{{- end }}

{{/* The ingress's control port, which only the server reaches. */}}
{{- define "runway.controlPort" -}}9444{{- end }}

{{/* The Secrets' names: the values' when given, else the chart's own. */}}
{{- define "runway.caSecretName" -}}
{{- .Values.serviceCA.existingSecret | default (printf "%s-ca" (include "runway.fullname" .)) }}
{{- end }}
{{- define "runway.ingressControlSecretName" -}}
{{- .Values.controlTLS.ingressSecret | default (printf "%s-ingress-control-tls" (include "runway.fullname" .)) }}
{{- end }}
{{- define "runway.serverControlSecretName" -}}
{{- .Values.controlTLS.serverSecret | default (printf "%s-server-control-tls" (include "runway.fullname" .)) }}
{{- end }}
{{- define "runway.masterKeySecretName" -}}
{{- .Values.store.masterKey.existingSecret | default (printf "%s-master-key" (include "runway.fullname" .)) }}
{{- end }}

{{/*
"true" when the server keeps its state in a PostgreSQL database (store.urlSecret.name): then
it runs as a Deployment of server.replicas pods sharing it; empty for the SQLite store on the
data directory's claim, one pod in a StatefulSet. Fails on what the schema cannot see: the
database's authority given twice, the store's other values without a database, and a pod
that could not read the master key's Secret (mounted 0440, owned by root and the pod's
fsGroup: the server reads it through its own group, so that group must be fsGroup).
*/}}
{{- define "runway.database" -}}
{{- $store := .Values.store }}
{{- if and $store.caSecret.name $store.caConfigMap.name }}
{{- fail "store: caSecret.name and caConfigMap.name are both set: give the database's authority from one of the two" }}
{{- end }}
{{- if $store.urlSecret.name }}
{{- if .Values.registry.host }}
{{- fail "registry.host: with a database (store.urlSecret) each server pod keeps its own data directory, and so its own platform registry: images cannot be mirrored into it; leave registry.host empty, or mirror to a registry of your own (registry.external)" }}
{{- end }}
{{- $pod := .Values.podSecurityContext | default dict }}
{{- if not (hasKey $pod "fsGroup") }}
{{- fail "podSecurityContext.fsGroup: with a database (store.urlSecret) the master key's Secret is mounted 0440 for the pod's fsGroup, the group the server reads it through: set one" }}
{{- end }}
{{- if and (hasKey $pod "runAsGroup") (ne (int $pod.runAsGroup) (int $pod.fsGroup)) }}
{{- fail (printf "podSecurityContext: runAsGroup (%d) is not fsGroup (%d): with a database (store.urlSecret) the master key's Secret is mounted 0440 for fsGroup, and the server reads it through its own group" (int $pod.runAsGroup) (int $pod.fsGroup)) }}
{{- end }}
{{- "true" }}
{{- else }}
{{- range $key, $value := dict "caSecret.name" $store.caSecret.name "caConfigMap.name" $store.caConfigMap.name "masterKey.existingSecret" $store.masterKey.existingSecret }}
{{- if $value }}
{{- fail (printf "store.%s is set but store.urlSecret.name is not: it is for a PostgreSQL database (without one, the store and the master key are in the data directory's claim)" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The master key the chart makes, base64 (a Secret's `data`), with a database and no
store.masterKey.existingSecret; empty otherwise. 32 random bytes (randBytes, crypto/rand) on
the first install; on an upgrade the key in the Secret already there (lookup), whatever it
holds: another key would seal nothing the store holds. Without a cluster (`helm template`,
`--dry-run`, Argo CD) lookup finds nothing and every render makes a new one: name a Secret of
your own there (the Secret the chart makes is immutable, so such a render applied over it is
refused rather than taken).
*/}}
{{- define "runway.masterKey" -}}
{{- if and (include "runway.database" .) (not .Values.store.masterKey.existingSecret) }}
{{- $data := get (lookup "v1" "Secret" .Release.Namespace (include "runway.masterKeySecretName" .)) "data" | default dict }}
{{- if hasKey $data "master.key" }}
{{- index $data "master.key" }}
{{- else }}
{{- randBytes 32 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The certificates the chart makes, as JSON, with each Secret's `data` (base64): "ca" (ca.pem,
ca-key.pem) unless serviceCA.existingSecret names one; "ingress" and "server" (ca.crt,
tls.crt, tls.key) unless controlTLS names them; "names", the three Secrets' names. Made on the
first install (genCA, genSignedCert); taken from the Secrets already in the namespace on an
upgrade (lookup), so that clients keep trusting the same ca.pem and both sides of the control
channel keep a common authority (the two control Secrets are kept together or made again
together). Without a cluster (`helm template`, `--dry-run`) lookup finds nothing: new ones.
Made once per render, kept on the root context, so that the Secrets and the pods' checksums
agree.
*/}}
{{- define "runway.tls" -}}
{{- if not (hasKey . "runwayTls") }}
{{- $fullname := include "runway.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $out := dict "names" (list (include "runway.caSecretName" .) (include "runway.ingressControlSecretName" .) (include "runway.serverControlSecretName" .)) }}
{{- if not .Values.serviceCA.existingSecret }}
{{- $data := get (lookup "v1" "Secret" $ns (printf "%s-ca" $fullname)) "data" | default dict }}
{{- if and (hasKey $data "ca.pem") (hasKey $data "ca-key.pem") }}
{{- $_ := set $out "ca" (pick $data "ca.pem" "ca-key.pem") }}
{{- else }}
{{- $ca := genCA "Runway local certificate authority" 3650 }}
{{- $_ := set $out "ca" (dict "ca.pem" (b64enc $ca.Cert) "ca-key.pem" (b64enc $ca.Key)) }}
{{- end }}
{{- end }}
{{- $ingressSecret := .Values.controlTLS.ingressSecret }}
{{- $serverSecret := .Values.controlTLS.serverSecret }}
{{- if and $ingressSecret (not $serverSecret) }}
{{- fail "controlTLS: ingressSecret is set but serverSecret is not: give both (certificates from one authority), or neither" }}
{{- end }}
{{- if and $serverSecret (not $ingressSecret) }}
{{- fail "controlTLS: serverSecret is set but ingressSecret is not: give both (certificates from one authority), or neither" }}
{{- end }}
{{- if not $ingressSecret }}
{{- $ingress := get (lookup "v1" "Secret" $ns (printf "%s-ingress-control-tls" $fullname)) "data" | default dict }}
{{- $server := get (lookup "v1" "Secret" $ns (printf "%s-server-control-tls" $fullname)) "data" | default dict }}
{{- $kept := true }}
{{- range list "ca.crt" "tls.crt" "tls.key" }}
{{- if not (and (hasKey $ingress .) (hasKey $server .)) }}
{{- $kept = false }}
{{- end }}
{{- end }}
{{- if and $kept (eq (index $ingress "ca.crt") (index $server "ca.crt")) }}
{{- $_ := set $out "ingress" (pick $ingress "ca.crt" "tls.crt" "tls.key") }}
{{- $_ := set $out "server" (pick $server "ca.crt" "tls.crt" "tls.key") }}
{{- else }}
{{- /* The authority's key is not kept: another certificate means both made again. */}}
{{- $ca := genCA "Runway control channel authority" 3650 }}
{{- $ingressCert := genSignedCert "runway-ingress-control" nil (list "runway-ingress-control") 3650 $ca }}
{{- $serverCert := genSignedCert "runway-control-plane" nil nil 3650 $ca }}
{{- $_ := set $out "ingress" (dict "ca.crt" (b64enc $ca.Cert) "tls.crt" (b64enc $ingressCert.Cert) "tls.key" (b64enc $ingressCert.Key)) }}
{{- $_ := set $out "server" (dict "ca.crt" (b64enc $ca.Cert) "tls.crt" (b64enc $serverCert.Cert) "tls.key" (b64enc $serverCert.Key)) }}
{{- end }}
{{- end }}
{{- $_ := set . "runwayTls" $out }}
{{- end }}
{{- get . "runwayTls" | toJson }}
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
serverConfig (whose schema refuses the keys set here, so neither replaces the other). The
ingress is the Deployment's pods, found through the headless control Service (each of its
addresses is a pod) and fed over mutual TLS; the URLs name the ingress Service's port. With a
database, `store` names the files the pods mount and `leader` the lease's length.
*/}}
{{- define "runway.serverConfig" -}}
{{- $fullname := include "runway.fullname" . }}
{{- $api := printf "%s-api" $fullname }}
{{- $ns := .Release.Namespace }}
{{- $hostnames := list "localhost" "127.0.0.1" $api (printf "%s.%s" $api $ns) (printf "%s.%s.svc" $api $ns) (printf "%s.%s.svc.cluster.local" $api $ns) }}
{{- $hostnames = concat $hostnames .Values.apiHostnames }}
{{- with .Values.registry.host }}
{{- $hostnames = append $hostnames (regexReplaceAll ":[0-9]+$" . "") }}
{{- end }}
{{- $hostnames = uniq $hostnames }}
{{- $control := printf "%s.%s.svc:%s" (include "runway.controlServiceName" .) $ns (include "runway.controlPort" .) }}
{{- $managed := dict
  "api" (dict
    "listen" "0.0.0.0:7443"
    "environments" .Values.environments
    "tls" (dict "hostnames" $hostnames "ca_dir" (include "runway.caMount" .)))
  "ingress" (dict
    "remote" (dict
      "addresses" (list $control)
      "tls_dir" (include "runway.controlTlsMount" .)
      "https_port" (int .Values.ingressService.httpsPort)))
  "control" (dict "domain" .Values.domain)
  "registry" (include "runway.registryConfig" . | fromYaml)
  "runtime" (dict
    "kind" "kubernetes"
    "kubernetes" (dict
      "namespace_pattern" .Values.namespacePattern
      "image_pull_secrets" .Values.servicesImagePullSecrets)) }}
{{- if include "runway.database" . }}
{{- /* The files the pods mount: the URL holds a password, so server.yml names the file. */}}
{{- $store := dict
  "url_file" (printf "%s/url" (include "runway.storeUrlMount" .))
  "master_key" (printf "%s/master.key" (include "runway.masterKeyMount" .)) }}
{{- if or .Values.store.caSecret.name .Values.store.caConfigMap.name }}
{{- $_ := set $store "ca_file" (printf "%s/ca.crt" (include "runway.storeCaMount" .)) }}
{{- end }}
{{- $_ := set $managed "store" $store }}
{{- /* leader.replica is left to its default, the host's name (the pod's) and the pid. */}}
{{- $_ := set $managed "leader" (dict "lease_ms" (mul (int .Values.server.leaseSeconds) 1000)) }}
{{- end }}
{{- mustMergeOverwrite (deepCopy .Values.serverConfig) $managed | toYaml }}
{{- end }}

{{/* Whether the API serves HTTPS (api.tls.enabled, true unless serverConfig says false). */}}
{{- define "runway.apiScheme" -}}
{{- $tls := dig "api" "tls" "enabled" true .Values.serverConfig }}
{{- if $tls }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/*
server.yml's registry section: mirrors into the platform registry at registry.host, or
pushed to registry.external.repository with pushSecret's logins, or none.
*/}}
{{- define "runway.registryConfig" -}}
{{- $registry := .Values.registry }}
{{- $external := $registry.external | default dict }}
{{- if $external.repository }}
{{- if not $external.pushSecret }}
{{- fail "registry.external.pushSecret: name the kubernetes.io/dockerconfigjson Secret whose logins may push to registry.external.repository" }}
{{- end }}
mirror: true
external:
  repository: {{ $external.repository | quote }}
{{- with $registry.host }}
host: {{ . | quote }}
{{- end }}
{{- else if $registry.host }}
mirror: true
host: {{ $registry.host | quote }}
{{- else }}
mirror: false
{{- end }}
{{- if and $registry.processBase (or $external.repository $registry.host) }}
process_base: {{ $registry.processBase | quote }}
{{- end }}
{{- end }}
