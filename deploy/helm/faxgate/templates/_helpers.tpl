{{/* Chart name, truncated to the 63 characters a label value may hold. */}}
{{- define "faxgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full object name: release-chart, or the release name when it already holds the chart name. */}}
{{- define "faxgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "faxgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "faxgate.labels" -}}
helm.sh/chart: {{ include "faxgate.chart" . }}
{{ include "faxgate.selectorLabels" . }}
app.kubernetes.io/version: {{ include "faxgate.version" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the gateway's pods; never change them in an upgrade. */}}
{{- define "faxgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "faxgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of the helm test pod: its own name, so that no selector of the
gateway's pods (Deployment, Service, PDB, NetworkPolicy) takes it in, and the
NetworkPolicy's egress rules do not apply to it.
*/}}
{{- define "faxgate.testLabels" -}}
app.kubernetes.io/name: {{ include "faxgate.name" . | trunc 58 | trimSuffix "-" }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
{{- end }}

{{/* Labels of the gateway's pods: the standard labels, then podLabels (which cannot override them). */}}
{{- define "faxgate.podLabels" -}}
{{- $own := include "faxgate.labels" . | fromYaml }}
{{- toYaml (merge $own (.Values.podLabels | default dict)) }}
{{- end }}

{{- define "faxgate.version" -}}
{{- .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "faxgate.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- define "faxgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "faxgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Where the chart mounts what it owns inside the container. */}}
{{- define "faxgate.configDir" -}}/etc/faxgate/config{{- end }}
{{- define "faxgate.apiKeyDir" -}}/etc/faxgate/api-key{{- end }}
{{- define "faxgate.tlsDir" -}}/etc/faxgate/tls{{- end }}
{{- define "faxgate.clientCADir" -}}/etc/faxgate/client-ca{{- end }}
{{- define "faxgate.proxyAuthDir" -}}/etc/faxgate/proxy-auth{{- end }}

{{/*
faxgate.yaml: .Values.config with the keys the chart owns set from the
chart's values, and shadow.config_file pointing at shadow.yaml when
shadowConfig is set (a relative name: faxgate reads it from the live file's
directory, the same ConfigMap's).
*/}}
{{- define "faxgate.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- if .Values.shadowConfig }}
{{- $_ := set $cfg "shadow" (dict "config_file" "shadow.yaml") }}
{{- end }}
{{- include "faxgate.ownedKeys" (dict "root" . "cfg" $cfg) }}
{{- end }}

{{/*
shadow.yaml, the shadow candidate: .Values.config with .Values.shadowConfig
merged over it (faxgate.mergeInto) and the keys the chart owns set as in
faxgate.yaml, so that it differs from the live file only where shadowConfig
says; without a shadow section of its own (the candidate's is not read).
*/}}
{{- define "faxgate.shadowConfig" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- $_ := unset $cfg "shadow" }}
{{- $_ := include "faxgate.mergeInto" (list $cfg (deepCopy .Values.shadowConfig)) }}
{{- include "faxgate.ownedKeys" (dict "root" . "cfg" $cfg) }}
{{- end }}

{{/*
faxgate.mergeInto merges the second dict of a list into the first, in place:
a mapping key by key, anything else (a list, a single value, null) replacing
the first's whole. Not sprig's merge, where the first dict wins, nor its
mergeOverwrite, whose handling of empty values (false, 0, "", [], null: the
values that turn a setting off) follows the mergo release Helm links:
these rules are the chart's own, and its tests hold them.
*/}}
{{- define "faxgate.mergeInto" -}}
{{- $dst := index . 0 }}
{{- range $k, $v := index . 1 }}
{{- if and (kindIs "map" $v) (kindIs "map" (get $dst $k)) }}
{{- $_ := include "faxgate.mergeInto" (list (get $dst $k) $v) }}
{{- else }}
{{- $_ := set $dst $k $v }}
{{- end }}
{{- end }}
{{- end }}

{{/*
faxgate.ownedKeys renders a configuration (dict "root" $ "cfg" $cfg) with the
keys the chart owns set from the chart's values (the container ports, the
mounted API key and proxy credentials, the Redis and sentinel passwords'
environment variables, the TLS files), as YAML.
*/}}
{{- define "faxgate.ownedKeys" -}}
{{- $cfg := .cfg }}
{{- with .root }}
{{- $server := get $cfg "server" | default dict }}
{{- $_ := set $server "listen" ":8080" }}
{{- if .Values.tls.existingSecret }}
{{- $tls := get $server "tls" | default dict }}
{{- $_ := set $tls "mode" "files" }}
{{- $_ := set $tls "cert_file" (printf "%s/tls.crt" (include "faxgate.tlsDir" .)) }}
{{- $_ := set $tls "key_file" (printf "%s/tls.key" (include "faxgate.tlsDir" .)) }}
{{- if .Values.tls.clientCASecret }}
{{- $_ := set $tls "client_ca_file" (printf "%s/%s" (include "faxgate.clientCADir" .) .Values.tls.clientCAKey) }}
{{- end }}
{{- $_ := set $server "tls" $tls }}
{{- end }}
{{- $_ := set $cfg "server" $server }}
{{- $admin := get $cfg "admin" | default dict }}
{{- $_ := set $admin "listen" ":9090" }}
{{- /* The admin listener answers IP literals and localhost; these names are
the metrics Service's, which helm test and in-cluster clients use. */}}
{{- $_ := set $admin "allowed_hosts" (concat (include "faxgate.metricsHosts" . | fromYamlArray) (get $admin "allowed_hosts" | default list) | uniq) }}
{{- $_ := set $cfg "admin" $admin }}
{{- $rl := get $cfg "rate_limit" | default dict }}
{{- if not (get $rl "replicas_hint") }}
{{- $_ := set $rl "replicas_hint" (include "faxgate.maxPods" . | int) }}
{{- end }}
{{- $_ := set $cfg "rate_limit" $rl }}
{{- $upstream := get $cfg "upstream" | default dict }}
{{- $_ := set $upstream "api_key_file" (printf "%s/%s" (include "faxgate.apiKeyDir" .) .Values.apiKey.key) }}
{{- if .Values.proxyAuth.existingSecret }}
{{- $_ := set $upstream "proxy_auth_file" (printf "%s/%s" (include "faxgate.proxyAuthDir" .) .Values.proxyAuth.key) }}
{{- end }}
{{- $_ := set $cfg "upstream" $upstream }}
{{- if .Values.redisPassword.existingSecret }}
{{- $redis := get $cfg "redis" | default dict }}
{{- $_ := set $redis "password_env" "FAXGATE_REDIS_PASSWORD" }}
{{- $_ := set $cfg "redis" $redis }}
{{- end }}
{{- if .Values.redisSentinelPassword.existingSecret }}
{{- $redis := get $cfg "redis" | default dict }}
{{- $_ := set $redis "sentinel_password_env" "FAXGATE_REDIS_SENTINEL_PASSWORD" }}
{{- $_ := set $cfg "redis" $redis }}
{{- end }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
Seconds in a Go duration ("1h", "1.5h", "20m30s", "500ms"), as a decimal
string for float64: the token alerts' thresholds are shares of
token.refresh_before, which faxgate check accepts in any of these forms.
*/}}
{{- define "faxgate.durationSeconds" -}}
{{- $total := 0.0 }}
{{- $units := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001 }}
{{- range $part := regexFindAll "[0-9]*\\.?[0-9]+(ns|us|µs|ms|h|m|s)" (toString .) -1 }}
{{- $unit := regexFind "(ns|us|µs|ms|h|m|s)$" $part }}
{{- $total = addf $total (mulf (trimSuffix $unit $part | float64) (get $units $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/* A number as PromQL reads it: whole numbers without a fraction or an exponent. */}}
{{- define "faxgate.number" -}}
{{- $v := . | float64 }}
{{- if and (eq $v (floor $v)) (lt $v 1e15) }}{{ printf "%d" (int64 $v) }}{{ else }}{{ $v }}{{ end }}
{{- end }}

{{/* The termination grace period: the drain budget plus the preStop delay, with 5 s to spare. */}}
{{- define "faxgate.terminationGracePeriod" -}}
{{- $shutdown := 30 }}
{{- with .Values.config.server }}{{ with .shutdown_timeout }}{{ $shutdown = include "faxgate.durationSeconds" . | float64 | ceil | int }}{{ end }}{{ end }}
{{- $floor := add $shutdown .Values.preStopDelaySeconds }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $floor 5 }}
{{- else if le (int .Values.terminationGracePeriodSeconds) (int $floor) }}
{{- fail (printf "terminationGracePeriodSeconds %v must exceed config.server.shutdown_timeout (%ds) plus preStopDelaySeconds (%d): otherwise the kubelet kills faxgate before it has drained" .Values.terminationGracePeriodSeconds $shutdown (int .Values.preStopDelaySeconds)) }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* The in-cluster names of the metrics Service, as a YAML list. */}}
{{- define "faxgate.metricsHosts" -}}
{{- $svc := printf "%s-metrics" (include "faxgate.fullname" .) }}
{{- $ns := .Release.Namespace }}
- {{ $svc }}
- {{ $svc }}.{{ $ns }}
- {{ $svc }}.{{ $ns }}.svc
- {{ $svc }}.{{ $ns }}.svc.{{ .Values.clusterDomain | trimSuffix "." }}
{{- end }}

{{/* The most pods that can run at once: replicaCount, or autoscaling.maxReplicas. */}}
{{- define "faxgate.maxPods" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.maxReplicas | int }}{{ else }}{{ .Values.replicaCount | int }}{{ end }}
{{- end }}

{{- define "faxgate.tokenStore" -}}
{{- $store := "memory" }}
{{- with .Values.config.token }}{{ with .store }}{{ $store = . }}{{ end }}{{ end }}
{{- $store }}
{{- end }}

{{/* True when the PDB can do good: at least two pods at all times. */}}
{{- define "faxgate.pdbAllowed" -}}
{{- if .Values.autoscaling.enabled }}{{ if gt (int .Values.autoscaling.minReplicas) 1 }}true{{ end }}
{{- else if gt (int .Values.replicaCount) 1 }}true{{ end }}
{{- end }}
