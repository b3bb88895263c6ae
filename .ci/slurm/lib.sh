# shellcheck shell=bash
# Shared by .ci/slurm/{up,down,env}: where the three-node cluster lives and what its nodes are
# called. Sourced, not run.
#
# Everything the cluster writes (config, munge key and socket, state, spool, logs, pid files) is
# under one directory, $RUNNER_SLURM_DIR (default: target/slurm of the repository), so starting
# and stopping it changes nothing else on the machine beyond the installed packages.

# The cluster's nodes, each one slurmd on this host (`slurmd -N <name>`).
# shellcheck disable=SC2034 # used by the scripts that source this file
slurm_nodes=(n1 n2 n3)

# The pid file of node $2's slurmd in cluster directory $1 (SlurmdPidFile=.../slurmd-%n.pid).
slurmd_pidfile() {
    echo "$1/run/slurmd-$2.pid"
}

slurm_repo_root() {
    (cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
}

# The cluster's directory, absolute (the daemons chdir to / and must find it again).
slurm_dir() {
    local dir=${RUNNER_SLURM_DIR:-$(slurm_repo_root)/target/slurm}
    [[ $dir == /* ]] || dir=$PWD/$dir
    echo "${dir%/}"
}

# Reads a pid file; prints the pid only if that process is alive and runs the expected program
# (a stale file whose pid was reused by something else must not be signalled).
slurm_live_pid() {
    local pidfile=$1 program=$2 pid
    [[ -s $pidfile ]] || return 1
    read -r pid <"$pidfile" || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/comm ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$program" ]] || return 1
    echo "$pid"
}

# The memory cgroup (v1) the cluster's job cgroups nest under: a child of this process's own
# memory cgroup, named after the cluster directory so two clusters never share job cgroups.
slurm_cgroup_child_name() {
    echo "runner-slurm-$(printf '%s' "$1" | md5sum | cut -c1-12)"
}
