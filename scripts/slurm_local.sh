#!/usr/bin/env bash
# A one-node Slurm on this machine (Debian's slurm-wlm, as root), for trying spmdlab under
# srun as on a cluster: tests/test_cluster.py runs when `sinfo` answers. Usage:
#   sudo bash scripts/slurm_local.sh        # install, configure, start slurmctld + slurmd
#   srun -n 4 -O --mpi=pmi2 .venv/bin/python examples/digits_spmd.py
# The MPICH wheel talks to Slurm through PMI-2 (--mpi=pmi2); --mpi=none starts N
# unrelated one-worker jobs. Open MPI's wheel needs PMIx (--mpi=pmix, libpmix2 and
# libpmix-dev).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# Slurm's pmix plugin opens the unversioned libpmix.so, which only libpmix-dev provides
# (without it an Open MPI job under srun --mpi=pmix fails: "can not load PMIx library")
pkgs=()
command -v slurmctld >/dev/null || pkgs+=(slurm-wlm munge)
ldconfig -p | grep -q 'libpmix\.so ' || pkgs+=(libpmix2 libpmix-dev)
if [ ${#pkgs[@]} -gt 0 ]; then
  apt-get update -q
  apt-get install -y -q "${pkgs[@]}"
fi
mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /etc/munge
if [ ! -f /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || munged --force
host=$(hostname)
# at least 8 CPUs whatever this machine has (SlurmdParameters=config_overrides), so that
# `salloc -n 4` is granted as on a cluster node; Slurm's own MpiDefault (none), so that a
# test shows which --mpi plugin a command needs
cpus=$(nproc)
if [ "$cpus" -lt 8 ]; then cpus=8; fi
node="NodeName=$host CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=1000"
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=local
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
$node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
pkill -x slurmd || true
pkill -x slurmctld || true
sleep 1
slurmctld
slurmd
for _ in $(seq 30); do
  sinfo -h -o %t 2>/dev/null | grep -q idle && break
  sleep 1
done
sinfo
