{{/*
The server's pod, as the StatefulSet (SQLite on the claim, statefulset.yaml) and the
Deployment (a PostgreSQL database, server-deployment.yaml) both run it: `runway server` with
server.yml from the ConfigMap, the certificate authority's and the control channel's
Secrets, and with a database the Secrets that name it and hold the master key, read-only.
The data volume is the StatefulSet's claim, or the Deployment's emptyDir.
*/}}
{{- define "runway.serverPodTemplate" -}}
{{- $fullname := include "runway.fullname" . }}
{{- $grace := dig "api" "limits" "shutdown_grace_seconds" 30 .Values.serverConfig | int }}
{{- $database := include "runway.database" . }}
{{- $store := .Values.store }}
{{- $pushSecret := and .Values.registry.external.repository .Values.registry.external.pushSecret -}}
metadata:
  labels:
    {{- include "runway.labels" . | nindent 4 }}
    app.kubernetes.io/component: server
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # A change of configuration restarts the server.
    checksum/config: {{ include "runway.serverConfig" . | sha256sum | quote }}
    # So do new certificates.
    checksum/tls: {{ include "runway.tls" . | sha256sum | quote }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "runway.serviceAccountName" . | quote }}
  # The driver reaches the cluster's API with this pod's token.
  automountServiceAccountToken: true
  enableServiceLinks: false
  # The API's shutdown grace, then a margin for the process to end.
  terminationGracePeriodSeconds: {{ add $grace 15 }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: runway
      image: {{ include "runway.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: [runway]
      args: [server, --config, /etc/runway/server.yml, --data-dir, /var/lib/runway]
      {{- if $pushSecret }}
      # The logins mirrors are pushed to registry.external with.
      env:
        - name: DOCKER_CONFIG
          value: /etc/runway-docker
      {{- end }}
      ports:
        - name: api
          containerPort: 7443
          protocol: TCP
      # Up once the driver has listed every environment's namespace (at most 30 s) and
      # the API serves.
      startupProbe:
        httpGet:
          path: /healthz
          port: api
          scheme: {{ include "runway.apiScheme" . }}
        periodSeconds: 2
        failureThreshold: 45
      livenessProbe:
        httpGet:
          path: /healthz
          port: api
          scheme: {{ include "runway.apiScheme" . }}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 6
      # Ready when the API answers: the API Service sends requests then.
      readinessProbe:
        httpGet:
          path: /healthz
          port: api
          scheme: {{ include "runway.apiScheme" . }}
        periodSeconds: 5
        timeoutSeconds: 3
      {{- with .Values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.securityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - name: config
          mountPath: /etc/runway
          readOnly: true
        - name: data
          mountPath: /var/lib/runway
        - name: tmp
          mountPath: /tmp
        # The API's certificate is issued from it (api.tls.ca_dir).
        - name: ca
          mountPath: {{ include "runway.caMount" . }}
          readOnly: true
        # The client certificate the ingresses obey (ingress.remote.tls_dir).
        - name: control-tls
          mountPath: {{ include "runway.controlTlsMount" . }}
          readOnly: true
        {{- if $pushSecret }}
        - name: registry-push
          mountPath: /etc/runway-docker
          readOnly: true
        {{- end }}
        {{- if $database }}
        # The database's URL (store.url_file), read at the start.
        - name: store-url
          mountPath: {{ include "runway.storeUrlMount" . }}
          readOnly: true
        {{- if or $store.caSecret.name $store.caConfigMap.name }}
        # The authority the database's certificate must come from (store.ca_file).
        - name: store-ca
          mountPath: {{ include "runway.storeCaMount" . }}
          readOnly: true
        {{- end }}
        # The key that seals secrets, the same in every replica (store.master_key).
        - name: master-key
          mountPath: {{ include "runway.masterKeyMount" . }}
          readOnly: true
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ printf "%s-config" $fullname | quote }}
    - name: ca
      secret:
        secretName: {{ include "runway.caSecretName" . | quote }}
    - name: control-tls
      secret:
        secretName: {{ include "runway.serverControlSecretName" . | quote }}
    - name: tmp
      emptyDir: {}
    {{- if $pushSecret }}
    - name: registry-push
      secret:
        secretName: {{ $pushSecret | quote }}
        items:
          - key: .dockerconfigjson
            path: config.json
    {{- end }}
    {{- if $database }}
    # Nothing here outlives the pod: the store is the database, the certificate authority
    # and the master key are Secrets; the image cache (tags pinned to digests) fills again.
    - name: data
      emptyDir: {}
    # Read by the server's own group (the pod's fsGroup) alone: the URL holds a password,
    # and the server refuses a master key others may read.
    - name: store-url
      secret:
        secretName: {{ $store.urlSecret.name | quote }}
        defaultMode: 288 # 0440
        items:
          - key: {{ $store.urlSecret.key | quote }}
            path: url
    {{- if $store.caSecret.name }}
    - name: store-ca
      secret:
        secretName: {{ $store.caSecret.name | quote }}
        items:
          - key: {{ $store.caSecret.key | quote }}
            path: ca.crt
    {{- else if $store.caConfigMap.name }}
    - name: store-ca
      configMap:
        name: {{ $store.caConfigMap.name | quote }}
        items:
          - key: {{ $store.caConfigMap.key | quote }}
            path: ca.crt
    {{- end }}
    - name: master-key
      secret:
        secretName: {{ include "runway.masterKeySecretName" . | quote }}
        defaultMode: 288 # 0440
        items:
          - key: master.key
            path: master.key
    {{- end }}
  {{- if $database }}
  # Over nodes, as far as they go: a node's loss leaves the API served by the others, and
  # one of them takes the lease over.
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: ScheduleAnyway
      labelSelector:
        matchLabels:
          {{- include "runway.selectorLabels" . | nindent 10 }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
