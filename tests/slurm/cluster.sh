#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for the workflow's SLURM tests (tests/workflow/test_cluster.py) and CI.
#
#   tests/slurm/cluster.sh install   apt-get install munge, slurmctld, slurmd, slurm-client (Debian; root)
#   tests/slurm/cluster.sh start     install if needed, write the config, start munged, slurmctld, slurmd
#                                    and wait until the node is idle
#   tests/slurm/cluster.sh stop      stop the three daemons, each by the PID in its pidfile
#   tests/slurm/cluster.sh status    sinfo
#
# Everything lives under $PERTURBED_LM_SLURM_DIR (default /tmp/perturbed-lm-slurm): slurm.conf, gres.conf (which
# slurmd reads next to its slurm.conf) and the fake GPUs' files, the munge key and socket, state, spool, logs and
# pidfiles. The one file outside it is the symlink /etc/slurm/slurm.conf -> that slurm.conf, where SLURM commands
# look: SLURM_CONF would not do, because the executor's job step drops SLURM_* variables before its `srun`.
# `start` refuses to run on a machine that has a slurm.conf of its own, and `stop` removes the symlink.
#
# The node has the machine's real CPUs and memory (`slurmd -C`), but at least MIN_CPUS CPUs; accounting is off
# (no slurmdbd), so `sacct` cannot report jobs and the executor plugin must poll with `--slurm-status-command
# squeue`. Two partitions share the node, `cpu` (default) and `gpu`, so the profile's partition routing is
# exercised. The node also has 4 fake GPUs, a generic resource (GresTypes=gpu; gres.conf names empty files as
# their devices), so that jobs submitted with `sbatch --gpus=N` (a rule with resource gpu=N) are scheduled, and
# the tests can read each job's GPU request from squeue. Such a job gets no device (no CUDA_VISIBLE_DEVICES):
# the code falls back to the CPU when CUDA is unavailable. A GPU job also asks for the profile's cpus_per_gpu
# CPUs per GPU (4, or 8 for training), which sbatch refuses on a smaller node ("Requested node configuration is
# not available"): on a machine with fewer CPUs than MIN_CPUS the node claims MIN_CPUS
# (SlurmdParameters=config_overrides), and its jobs share the real ones.
set -euo pipefail

DIR=${PERTURBED_LM_SLURM_DIR:-/tmp/perturbed-lm-slurm}
CONF=$DIR/slurm.conf
GRES_CONF=$DIR/gres.conf
SYSTEM_CONF=/etc/slurm/slurm.conf
GPUS=4  # fake ones (no devices): a 4-GPU training job, as the paper's study asks for
MIN_CPUS=32  # the largest GPU job the SLURM tests submit: training on 4 GPUs x the profile's cpus_per_gpu (8)
CTLD_PORT=${PERTURBED_LM_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${PERTURBED_LM_SLURMD_PORT:-6818}
PACKAGES=(munge slurmctld slurmd slurm-client)

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo > /dev/null; then sudo "$@"; else
        echo "cluster.sh: installing needs root (or sudo): $*" >&2; return 1; fi
}

installed() {
    command -v munged > /dev/null && command -v slurmctld > /dev/null && command -v slurmd > /dev/null \
        && command -v sbatch > /dev/null
}

install() {
    installed && return 0
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" > /dev/null
    installed
}

alive() {  # alive PIDFILE: the process named in PIDFILE runs
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2> /dev/null
}

write_config() {
    local host node overrides=""
    host=$(hostname -s)
    # "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
    node=$(slurmd -C | head -n 1 | sed -e "s/^NodeName=[^ ]*/NodeName=$host/")
    if [ "$(echo "$node" | sed -n -e 's/.* CPUs=\([0-9]*\).*/\1/p')" -lt "$MIN_CPUS" ]; then
        node="NodeName=$host CPUs=$MIN_CPUS $(echo "$node" | grep -o 'RealMemory=[0-9]*')"
        overrides=$'# The node claims more CPUs than the machine has.\nSlurmdParameters=config_overrides'
    fi
    cat > "$CONF" <<EOF
# Written by tests/slurm/cluster.sh: a one-node test cluster, state under $DIR.
ClusterName=perturbedlm
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu
$overrides
# squeue reports a finished job for MinJobAge seconds: the executor's status polls must see it in that time.
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
$node Gres=gpu:$GPUS NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL Default=NO MaxTime=INFINITE State=UP
EOF
    # slurmd reads gres.conf from slurm.conf's directory. Its gpu plugin drops a GPU without File= ("Removing
    # file-less GPU"), and the node would be drained for reporting fewer GPUs than slurm.conf names; empty regular
    # files will do (slurmd logs that each "is not a valid character or block device", and sets no
    # CUDA_VISIBLE_DEVICES in the job).
    local files=() i
    for i in $(seq 0 $((GPUS - 1))); do
        : > "$DIR/gpu$i"
        files+=("$DIR/gpu$i")
    done
    cat > "$GRES_CONF" <<EOF
# Written by tests/slurm/cluster.sh: $GPUS fake GPUs, files but no devices, so that jobs with --gpus are scheduled.
NodeName=$host Name=gpu File=$(IFS=,; echo "${files[*]}")
EOF
}

start() {
    install
    if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid"; then
        echo "cluster.sh: already running ($CONF)"
        return 0
    fi
    if [ -e "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" != "$CONF" ]; then
        echo "cluster.sh: $SYSTEM_CONF exists and is not this test cluster's; not starting one here" >&2
        return 1
    fi
    stop > /dev/null
    mkdir -p "$DIR"/{munge,state,spool,log}
    chmod 700 "$DIR/munge"
    [ -s "$DIR/munge/munge.key" ] || mungekey --create --keyfile "$DIR/munge/munge.key"
    chmod 400 "$DIR/munge/munge.key"
    munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
    write_config
    mkdir -p "$(dirname "$SYSTEM_CONF")"
    ln -sfn "$CONF" "$SYSTEM_CONF"
    slurmctld -c -f "$CONF"
    slurmd -f "$CONF"
    for _ in $(seq 1 120); do
        if [ "$(sinfo -h -N -o %t 2> /dev/null | sort -u)" = "idle" ]; then
            echo "cluster.sh: node idle ($SYSTEM_CONF -> $CONF)"
            return 0
        fi
        sleep 0.5
    done
    echo "cluster.sh: the node did not become idle within 60 s; logs under $DIR/log" >&2
    sinfo -N -l >&2 || true
    tail -n 20 "$DIR"/log/*.log >&2 || true
    return 1
}

stop_pidfile() {  # stop_pidfile NAME PIDFILE: TERM, then KILL after 10 s
    local pid
    alive "$2" || { rm -f "$2"; return 0; }
    pid=$(cat "$2")
    kill "$pid" 2> /dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2> /dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2> /dev/null; then
        kill -9 "$pid" 2> /dev/null || true
    fi
    rm -f "$2"
    echo "cluster.sh: stopped $1 (pid $pid)"
}

stop() {
    stop_pidfile slurmd "$DIR/slurmd.pid"
    stop_pidfile slurmctld "$DIR/slurmctld.pid"
    stop_pidfile munged "$DIR/munge/munged.pid"
    if [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then rm -f "$SYSTEM_CONF"; fi
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) sinfo -N -l ;;
    *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
