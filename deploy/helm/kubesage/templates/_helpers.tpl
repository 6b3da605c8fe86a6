{{/*
Names, labels and the mode switches shared by the templates.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "kubesage.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every resource name: fullnameOverride, else the release name when it already
contains the chart name (`helm install kubesage ...` gives "kubesage", as kustomize
names things), else "<release>-<chart>".
*/}}
{{- define "kubesage.fullname" -}}
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

{{/* Labels that select the pods (Deployment, Service, PDB, anti-affinity). */}}
{{- define "kubesage.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubesage.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kubesage
app.kubernetes.io/component: scheduler
{{- end }}

{{/* Labels on every object: the kustomize base's two plus Helm's bookkeeping. */}}
{{- define "kubesage.labels" -}}
app.kubernetes.io/name: {{ include "kubesage.name" . }}
app.kubernetes.io/part-of: kubesage
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret holding tls.crt, tls.key and ca.crt (either TLS source). */}}
{{- define "kubesage.tlsSecretName" -}}
{{- printf "%s-webhook-tls" (include "kubesage.fullname" .) }}
{{- end }}

{{/* The Service's in-cluster DNS name the certificate must cover. */}}
{{- define "kubesage.serviceHost" -}}
{{- printf "%s.%s.svc" (include "kubesage.fullname" .) .Release.Namespace }}
{{- end }}

{{/* Every DNS name a client may use for the Service (as core/k8s/tls.py service_dns_names). */}}
{{- define "kubesage.dnsNames" -}}
{{- $svc := include "kubesage.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/*
"true" when the process runs `--scheduler-name`: kubesage's own scheduler and its Lease,
which also elects the replica that runs the control loop (core/cli/serve_services.py).
*/}}
{{- define "kubesage.electsLeader" -}}
{{- if or (ne .Values.mode "extender") .Values.leaderElection.enabled }}true{{ end }}
{{- end }}

{{/* "true" when kube-scheduler is configured to call kubesage as an extender. */}}
{{- define "kubesage.extenderConfig" -}}
{{- if or (eq .Values.mode "extender") (eq .Values.mode "both") }}true{{ end }}
{{- end }}

{{/* Checks the schema cannot express. */}}
{{- define "kubesage.validate" -}}
{{- $ss := .Values.tls.selfSigned }}
{{- $given := 0 }}
{{- range (list $ss.cert $ss.key $ss.ca) }}{{ if . }}{{ $given = add1 $given }}{{ end }}{{ end }}
{{- if and (gt $given 0) (lt $given 3) }}
{{- fail "tls.selfSigned: give cert, key and ca together (or none, to have them generated)" }}
{{- end }}
{{- if and $given (ne .Values.tls.source "selfSigned") }}
{{- fail "tls.selfSigned.cert/key/ca are only used with tls.source=selfSigned" }}
{{- end }}
{{- end }}

{{/*
`kubesage serve`'s arguments as a JSON list. A loop or server value left null (or an
empty string) passes no flag, so the binary's default applies.
*/}}
{{- define "kubesage.args" -}}
{{- $args := list "serve" "--host=0.0.0.0" (printf "--port=%d" (int .Values.containerPort)) }}
{{- if include "kubesage.electsLeader" . }}
{{- $args = append $args (printf "--scheduler-name=%s" .Values.schedulerName) }}
{{- end }}
{{- $args = concat $args (list "--tls-cert=/etc/kubesage/tls/tls.crt" "--tls-key=/etc/kubesage/tls/tls.key") }}
{{- $args = concat $args (list (printf "--policy=%s" .Values.policy) (printf "--log-level=%s" .Values.logLevel)) }}
{{- if .Values.loop.dryRun }}
{{- $args = append $args "--dry-run" }}
{{- end }}
{{- $loop := .Values.loop }}
{{- $server := .Values.server }}
{{- $options := list
  (list "tick-s" $loop.tickS)
  (list "max-evictions-per-tick" $loop.maxEvictionsPerTick)
  (list "forecast-weight" $loop.forecastWeight)
  (list "topology" $loop.topology)
  (list "prometheus" $loop.prometheus)
  (list "metric-map" (include "kubesage.metricMapPath" .))
  (list "mig-config-map" $loop.migConfigMap)
  (list "forecast-model" (include "kubesage.forecastModelPath" .))
  (list "audit-log" $loop.auditLog)
  (list "max-url-bytes" $server.maxUrlBytes)
  (list "max-header-bytes" $server.maxHeaderBytes)
  (list "max-headers" $server.maxHeaders)
  (list "header-timeout-s" $server.headerTimeoutS)
  (list "keep-alive-s" $server.keepAliveS)
  (list "stall-timeout-s" $server.stallTimeoutS)
  (list "shutdown-delay-s" $server.shutdownDelayS) }}
{{- range $options }}
{{- $flag := index . 0 }}
{{- $value := index . 1 }}
{{- if and (not (kindIs "invalid" $value)) (ne (toString $value) "") }}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $args = append $args (printf "--%s=%d" $flag (int64 $value)) }}
{{- else }}
{{- $args = append $args (printf "--%s=%v" $flag $value) }}
{{- end }}
{{- end }}
{{- end }}
{{- concat $args .Values.extraArgs | toJson }}
{{- end }}

{{/*
The path of the mounted metric map (empty: the shipped one).
*/}}
{{- define "kubesage.metricMapPath" -}}
{{- with .Values.loop.metricMap }}{{ if .configMap }}/etc/kubesage/metric-map/{{ .key }}{{ end }}{{ end }}
{{- end }}

{{/*
The path of the mounted forecast model (empty: none configured).
*/}}
{{- define "kubesage.forecastModelPath" -}}
{{- with .Values.loop.forecastModel }}{{ if or .configMap .persistentVolumeClaim }}/etc/kubesage/forecast/{{ .key }}{{ end }}{{ end }}
{{- end }}
