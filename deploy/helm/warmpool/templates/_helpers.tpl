{{/* The objects' name: the release's when it holds "warmpool", else <release>-warmpool. */}}
{{- define "warmpool.fullname" -}}
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

{{/* The agents' namespace. */}}
{{- define "warmpool.agentsNamespace" -}}
{{- default (printf "%s-agents" .Release.Namespace) .Values.agents.namespace -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "warmpool.labels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/part-of: warmpool
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels that select the replicas. */}}
{{- define "warmpool.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/component: server
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of the agent pods the kubernetes driver creates. */}}
{{- define "warmpool.agentLabels" -}}
app.kubernetes.io/managed-by: warmpool
{{- end -}}

{{/* An env entry from a Secret: (list $ "NAME" .Values.x). */}}
{{- define "warmpool.secretEnv" -}}
{{- $root := index . 0 -}}
{{- $v := index . 2 -}}
- name: {{ index . 1 }}
  valueFrom:
    secretKeyRef:
      name: {{ default $root.Values.existingSecret $v.secret.name }}
      key: {{ $v.secret.key }}
{{- end -}}

{{/* An env entry in the clear when the value's url is set, else from its Secret. */}}
{{- define "warmpool.urlEnv" -}}
{{- $v := index . 2 -}}
{{- if $v.url -}}
- name: {{ index . 1 }}
  value: {{ $v.url | quote }}
{{- else -}}
{{ include "warmpool.secretEnv" . }}
{{- end -}}
{{- end -}}

{{/* A NetworkPolicy peer of namespace and pod labels: (dict "ns" NAME "pods" LABELS). */}}
{{- define "warmpool.peer" -}}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ .ns }}
  podSelector:
    matchLabels:
      {{- toYaml .pods | nindent 6 }}
{{- end -}}

{{/* A NetworkPolicy peer of any namespace selector: (dict "ns" SELECTOR "pods" LABELS). */}}
{{- define "warmpool.selectorPeer" -}}
- namespaceSelector:
    {{- if .ns }}
    matchLabels:
      {{- toYaml .ns | nindent 6 }}
    {{- else }} {}
    {{- end }}
  podSelector:
    matchLabels:
      {{- toYaml .pods | nindent 6 }}
{{- end -}}

{{/* DNS: kube-dns in kube-system, port 53. */}}
{{- define "warmpool.dnsEgress" -}}
- to:
  - namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: kube-system
    podSelector:
      matchLabels:
        k8s-app: kube-dns
  ports:
  - port: 53
    protocol: UDP
  - port: 53
    protocol: TCP
{{- end -}}
