{{/* The release name, or "<release>-remedy" unless it already says remedy. */}}
{{- define "remedy.fullname" -}}
{{- if contains "remedy" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-remedy" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "remedy.selectorLabels" -}}
app.kubernetes.io/name: remedy
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "remedy.labels" -}}
{{ include "remedy.selectorLabels" . }}
app.kubernetes.io/part-of: remedy
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "remedy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "remedy.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "remedy.tokenSecret" -}}
{{- default .Values.webhookToken.name .Values.webhookToken.existingSecret -}}
{{- end -}}

{{/* The container port: the port of config.listen. */}}
{{- define "remedy.port" -}}
{{- splitList ":" .Values.config.listen | last -}}
{{- end -}}

{{/* The config file: values.config plus what the chart decides (token path, lease namespace). */}}
{{- define "remedy.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "webhook" (merge (dict "token_file" "/var/run/secrets/remedy/webhook/token") (default (dict) $cfg.webhook)) -}}
{{- $le := default (dict) $cfg.leader_election -}}
{{- if not $le.namespace -}}
{{- $_ := set $le "namespace" .Release.Namespace -}}
{{- end -}}
{{- $_ := set $cfg "leader_election" $le -}}
{{- $_ := set $cfg "pause_switch" (include "remedy.pauseSwitch" . | fromYaml) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
The pause switch (config.pause_switch): the ConfigMap `remedy pause` writes
and every replica reads; in the release namespace, named remedy-pause,
unless set. configmap: "" turns it off.
*/}}
{{- define "remedy.pauseSwitch" -}}
{{- $ps := deepCopy (default (dict) .Values.config.pause_switch) -}}
{{- if not (hasKey $ps "namespace") -}}
{{- $_ := set $ps "namespace" .Release.Namespace -}}
{{- end -}}
{{- if not (hasKey $ps "configmap") -}}
{{- $_ := set $ps "configmap" "remedy-pause" -}}
{{- end -}}
{{- toYaml $ps -}}
{{- end -}}

{{/*
The episode record ConfigMap (config.leader_election.episode_record) every
replica writes webhook notifications into; remedy's own default when unset.
*/}}
{{- define "remedy.episodeRecord" -}}
{{- (.Values.config.leader_election | default dict).episode_record | default "remedy-episodes" -}}
{{- end -}}

{{/* The pod's affinity: values.affinity if set, else the podAntiAffinity rule. */}}
{{- define "remedy.affinity" -}}
{{- $mode := toString .Values.podAntiAffinity -}}
{{- if .Values.affinity -}}
{{- toYaml .Values.affinity -}}
{{- else if eq $mode "soft" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "remedy.selectorLabels" . | nindent 12 }}
{{- else if eq $mode "hard" -}}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "remedy.selectorLabels" . | nindent 10 }}
{{- else if ne $mode "none" -}}
{{- fail (printf "podAntiAffinity is %q: want soft, hard or none" $mode) -}}
{{- end -}}
{{- end -}}
