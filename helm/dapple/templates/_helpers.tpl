{{/* Chart name, at most 63 characters (a DNS label). */}}
{{- define "dapple.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name; the coordinator's Service is called exactly this. */}}
{{- define "dapple.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dapple.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "dapple.labels" -}}
helm.sh/chart: {{ include "dapple.chart" . }}
app.kubernetes.io/name: {{ include "dapple.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dapple
{{- end -}}

{{/* Selector labels of one component (coordinator | worker); call with (list . "worker"). */}}
{{- define "dapple.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "dapple.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* repository:tag of an image value; the tag defaults to the chart's appVersion. */}}
{{- define "dapple.image" -}}
{{- $img := index . 0 -}}
{{- $root := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $root.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* The coordinator's address as workers and dapplectl inside the cluster see it. */}}
{{- define "dapple.coordinatorAddress" -}}
{{- printf "%s.%s.svc:%d" (include "dapple.fullname" .) .Release.Namespace (int .Values.coordinator.grpcPort) -}}
{{- end -}}

{{- define "dapple.dbClaimName" -}}
{{- default (printf "%s-db" (include "dapple.fullname" .)) .Values.coordinator.persistence.existingClaim -}}
{{- end -}}

{{- define "dapple.checkpointClaimName" -}}
{{- default (printf "%s-checkpoints" (include "dapple.fullname" .)) .Values.checkpoints.existingClaim -}}
{{- end -}}

{{/* Number of worker containers per pod: one per GPU, or one cpu worker. */}}
{{- define "dapple.workersPerPod" -}}
{{- max 1 (int .Values.worker.gpusPerNode) -}}
{{- end -}}

{{/* The training data volume (worker.dataset), mounted read-only by every worker and by the
coordinator, which reads a text dataset's file when a job is submitted. */}}
{{- define "dapple.datasetVolume" -}}
{{- $ds := .Values.worker.dataset -}}
- name: dataset
  {{- if $ds.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ $ds.existingClaim }}
    readOnly: true
  {{- else }}
  hostPath:
    path: {{ $ds.hostPath }}
    type: DirectoryOrCreate
  {{- end }}
{{- end -}}

{{/* The Secret of the coordinator's TLS certificate (tls.crt, tls.key, ca.crt). */}}
{{- define "dapple.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "dapple.fullname" .)) .Values.tls.existingSecret -}}
{{- end -}}

{{/* The Secret holding the workers' join token (key join.token). */}}
{{- define "dapple.joinTokenSecretName" -}}
{{- if .Values.worker.joinToken -}}
{{- printf "%s-join-token" (include "dapple.fullname" .) -}}
{{- else -}}
{{- .Values.worker.joinTokenSecret -}}
{{- end -}}
{{- end -}}

{{/* The tenants file (--tenants-file) of the values' cohorts and tenants. */}}
{{- define "dapple.tenantsFile" -}}
{{- toYaml (dict "cohorts" .Values.cohorts "tenants" .Values.tenants) -}}
{{- end -}}
