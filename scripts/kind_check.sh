#!/usr/bin/env bash
# The Kubernetes variant on a real (local) cluster: kind + Kueue + KWOK fake GPU nodes, the eks stack's
# rendered objects applied (server dry run, then for real), and the budget controller against a local
# ledger. Shows: the controller's AdmissionCheck marked Active, a job admitted within budget, a job held
# past it (Retry: evicted and requeued by Kueue, retryCount rising, never deactivated), a job that no
# budget period could carry rejected, a held queue when parked, and a workload deactivated past its
# execution time. The same scenarios run in CI against the Kueue fake (tests/cli/k8s/test_kueue_conformance.py).
#
# NOT RUN in parkbrake's CI or on its development machines: they have no Docker and no API server
# (docs/kubernetes.md says what is exercised where). Needs: docker, kind, kubectl, and parkbrake
# installed (pip install -e .) in the current shell. Usage:
#
#   scripts/kind_check.sh            # creates cluster parkbrake-check, leaves it for a look
#   KEEP=0 scripts/kind_check.sh     # deletes it at the end
set -euo pipefail

CLUSTER=${CLUSTER:-parkbrake-check}
KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}
KARPENTER_VERSION=${KARPENTER_VERSION:-v1.14.1}
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.93.0}
KWOK_VERSION=${KWOK_VERSION:-v0.7.0}
PG_PORT=${PG_PORT:-55432}
WORK=$(mktemp -d)
say() { printf '\n== %s\n' "$*"; }
for tool in docker kind kubectl curl parkbrake; do
  command -v "$tool" >/dev/null || { echo "kind_check: $tool is not on PATH" >&2; exit 2; }
done

cleanup() {
  [[ -n "${CONTROLLER_PID:-}" ]] && kill "$CONTROLLER_PID" 2>/dev/null || true
  docker rm -f parkbrake-check-ledger >/dev/null 2>&1 || true
  [[ "${KEEP:-1}" == 0 ]] && kind delete cluster --name "$CLUSTER" || true
}
trap cleanup EXIT

say "kind cluster $CLUSTER"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
kubectl config use-context "kind-$CLUSTER" >/dev/null

say "Kueue $KUEUE_VERSION, KWOK $KWOK_VERSION, Karpenter $KARPENTER_VERSION and Prometheus operator CRDs"
kubectl apply --server-side -f "https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
kubectl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=180s
kubectl apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION/kwok.yaml"
kubectl apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION/stage-fast.yaml"
for crd in karpenter.sh_nodepools karpenter.sh_nodeclaims karpenter.k8s.aws_ec2nodeclasses; do
  kubectl apply --server-side -f \
    "https://raw.githubusercontent.com/aws/karpenter-provider-aws/$KARPENTER_VERSION/pkg/apis/crds/$crd.yaml"
done
for crd in podmonitors servicemonitors; do
  kubectl apply --server-side -f \
    "https://raw.githubusercontent.com/prometheus-operator/prometheus-operator/$PROMETHEUS_OPERATOR_VERSION/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml"
done

say "fake GPU nodes (KWOK): two g5.12xlarge (4 GPUs each), one g5.xlarge"
fake_node() { # name instance-type gpus nodepool (Karpenter's label: the tenant pool's flavor selects it)
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {type: kwok, node.kubernetes.io/instance-type: $2, karpenter.sh/nodepool: $4, kubernetes.io/hostname: $1}
spec:
  taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}, {key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]
status:
  allocatable: {cpu: "48", memory: 192Gi, pods: "110", nvidia.com/gpu: "$3"}
  capacity: {cpu: "48", memory: 192Gi, pods: "110", nvidia.com/gpu: "$3"}
EOF
}
{ fake_node gpu-a g5.12xlarge 4 research-training; echo ---; fake_node gpu-b g5.12xlarge 4 research-training; echo ---
  fake_node gpu-c g5.xlarge 1 product-inference; } \
  | kubectl apply -f -

say "parkbrake k8s render --stack eks: server-side dry run, then for real"
parkbrake k8s render --stack eks > "$WORK/eks.yaml"
kubectl apply --server-side --dry-run=server -f "$WORK/eks.yaml"
kubectl apply --server-side -f "$WORK/eks.yaml"
# The in-cluster controller's image is not in kind: run it from this shell instead (below).
kubectl -n parkbrake scale deployment/parkbrake-budget-controller --replicas=0 || true

say "a local ledger (PostgreSQL in Docker on :$PG_PORT)"
docker run -d --rm --name parkbrake-check-ledger -e POSTGRES_PASSWORD=check -p "$PG_PORT:5432" postgres:16 >/dev/null
export PARKBRAKE_DATABASE_URL="postgresql://postgres:check@127.0.0.1:$PG_PORT/postgres"
until parkbrake ledger migrate >/dev/null 2>&1; do sleep 1; done
parkbrake ledger budget research --limit-usd 30 --actions notify,deny

say "the budget controller, as the stack's service account"
kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$WORK/ca.crt"
kubectl -n parkbrake create token parkbrake-budget-controller > "$WORK/token"
kubectl -n parkbrake create token parkbrake-park > "$WORK/park-token"  # the brake's own account
SERVER=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
parkbrake k8s controller --stack eks --server "$SERVER" --token-file "$WORK/token" --ca-file "$WORK/ca.crt" \
  --health-port 18081 > "$WORK/controller.log" 2>&1 &
CONTROLLER_PID=$!

say "the controller marks its AdmissionCheck (controllerName parkbrake.dev/budget) Active; Kueue's queues follow"
for _ in $(seq 60); do
  active=$(kubectl get admissionchecks -o jsonpath='{range .items[?(@.spec.controllerName=="parkbrake.dev/budget")]}{.status.conditions[?(@.type=="Active")].status}{end}')
  [[ "$active" == True* ]] && break
  sleep 2
done
[[ "$active" == True* ]] || { echo "kind_check: the budget AdmissionCheck never became Active" >&2; tail -20 "$WORK/controller.log" >&2; exit 1; }
kubectl get clusterqueues -o custom-columns=NAME:.metadata.name,ACTIVE:'.status.conditions[?(@.type=="Active")].status'
curl -fsS http://127.0.0.1:18081/healthz

job() { # name gpus seconds-of-work max-exec-seconds
  cat <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: $1
  namespace: research
  labels: {kueue.x-k8s.io/queue-name: research, kueue.x-k8s.io/max-exec-time-seconds: "$4"}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {type: kwok}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}, {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
      containers:
      - {name: train, image: busybox, command: [sleep, "$3"], resources: {requests: {nvidia.com/gpu: "$2"}, limits: {nvidia.com/gpu: "$2"}}}
EOF
}
workload_field() { # workload-owner-job jsonpath-below-the-item
  kubectl -n research get workloads -l "kueue.x-k8s.io/job-uid=$(kubectl -n research get job "$1" -o jsonpath='{.metadata.uid}')" \
    -o jsonpath="{.items[0]$2}" 2>/dev/null
}
check_state() { workload_field "$1" '.status.admissionChecks[?(@.name=="parkbrake-budget")].state'; }
retry_count() { workload_field "$1" '.status.admissionChecks[?(@.name=="parkbrake-budget")].retryCount'; }
wait_state() { # job state
  for _ in $(seq 60); do [[ "$(check_state "$1")" == "$2" ]] && { echo "$1: $2"; return; }; sleep 2; done
  echo "kind_check: $1 never reached $2 (now: $(check_state "$1"))" >&2; tail -20 "$WORK/controller.log" >&2; exit 1
}

say "0. a GPU job without kueue.x-k8s.io/max-exec-time-seconds is refused by the API server (the stack's policy)"
if job unlabelled 1 60 0 | sed 's/, kueue.x-k8s.io\/max-exec-time-seconds: "0"//' | kubectl apply -f - 2>"$WORK/refused"; then
  echo "kind_check: a job without max-exec-time-seconds was admitted" >&2; exit 1
fi
grep -q "max-exec-time-seconds" "$WORK/refused" && cat "$WORK/refused"

say "1. a job within budget (4 GPUs, 1 h: \$5.67 of \$30) is admitted"
job small 4 600 3600 | kubectl apply -f -
wait_state small Ready

say "2. a job past what is left (4 GPUs for 5 h: \$28.36, \$24.33 left) is held: Retry, evicted and requeued, never deactivated"
job held 4 600 18000 | kubectl apply -f -
for _ in $(seq 60); do [[ "$(retry_count held)" -ge 1 ]] 2>/dev/null && break; sleep 2; done
[[ "$(retry_count held)" -ge 1 ]] || { echo "kind_check: held was never sent back with Retry" >&2; exit 1; }
[[ "$(workload_field held .spec.active)" != false ]] || { echo "kind_check: held was deactivated" >&2; exit 1; }
echo "held: retryCount $(retry_count held), $(workload_field held '.status.admissionChecks[0].message')"

say "2b. a job no budget period could carry (4 GPUs for 8 h: \$45.38 > the \$30 limit) is rejected"
job large 4 600 28800 | kubectl apply -f -
wait_state large Rejected
kubectl -n research get workloads

say "3. parked: the queues hold and drain, GPU limits 0, GPU Deployments 0, the pools' NodeClaims go"
parkbrake k8s park --stack eks --now --server "$SERVER" --token-file "$WORK/park-token" --ca-file "$WORK/ca.crt"
kubectl get clusterqueues -o custom-columns=NAME:.metadata.name,STOP:.spec.stopPolicy
job while-parked 1 60 600 | kubectl apply -f -
sleep 10
kubectl -n research get workloads
parkbrake k8s park --stack eks --now --unpark --server "$SERVER" --token-file "$WORK/park-token" --ca-file "$WORK/ca.crt"

say "4. a workload past its execution time (30 s of a 300 s job) is deactivated by Kueue"
kubectl -n research delete job small held large while-parked --ignore-not-found
job overrun 1 300 30 | kubectl apply -f -
wait_state overrun Ready
for _ in $(seq 60); do
  active=$(kubectl -n research get workloads -o jsonpath='{.items[?(@.metadata.ownerReferences[0].name=="overrun")].spec.active}')
  [[ "$active" == false ]] && { echo "overrun: deactivated (spec.active=false)"; break; }
  sleep 2
done
[[ "$active" == false ]] || { echo "kind_check: overrun was never deactivated" >&2; exit 1; }

say "the controller's log"
cat "$WORK/controller.log"
say "kind check passed"
