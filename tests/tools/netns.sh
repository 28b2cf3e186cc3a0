#!/bin/sh
# netns.sh -- several hosts on this machine, for qkv.dist over TCP: network
# namespaces PREFIXh0 .. PREFIXh<N-1>, each with one interface eth0
# (10.9.0.<i+1>/24), plugged into a bridge in the namespace PREFIXs (the
# switch, port p<i> for host i). mpirun runs in h0 and starts Open MPI's
# daemon in each other host through this script as its launch agent (each
# host with its own hostname, h<i>, in a UTS namespace of its own); the
# ranks talk over TCP only (btl self,tcp; no shared memory). Needs root
# (CAP_NET_ADMIN and CAP_SYS_ADMIN), ip(8) and unshare(1). Used by
# tests/stdlib/test_dist_net.lua and bench/dist_tcp.lua.
#
#   netns.sh check                 why namespaces cannot be made here, or nothing
#   netns.sh up PREFIX N           makes the switch and N hosts
#   netns.sh down PREFIX N         deletes them (processes left in them are
#                                  not killed: the caller ends its own)
#   netns.sh mpirun PREFIX N ARGS...   `mpirun -np N ARGS...` in h0, as
#                                  host h0, on the N hosts (a hostfile of
#                                  h0 .. h<N-1>, one slot each), with the
#                                  environment below
#   netns.sh cut PREFIX I          takes host I's switch port down (its
#                                  cable pulled: nothing in or out, and no
#                                  error on the host's side)
#   netns.sh agent HOST CMD...     Open MPI's launch agent (plm_rsh_agent):
#                                  CMD in host HOST's namespace ($QKV_NETNS
#                                  is the prefix)
#
# A cut link is noticed by Open MPI's daemons through TCP keepalive on
# their connections: mpirun here sets oob_tcp_keepalive_time 2 s, _intvl 1 s,
# _probes 3 (Open MPI's defaults, 300 s, 20 s and 9, take 8 minutes),
# so that mpirun ends the job about 5 s after the cut. Keepalive probes
# only an idle connection: one with data not yet acknowledged (a message
# under way at the cut) is given up on after tcp_retries2 retransmissions
# (Linux's default 15, about 15 minutes), and a connection opened again
# after tcp_syn_retries (default 6, about 2 minutes); each host here has
# 5 and 2 (about 12 s and 7 s), in its own namespace. The ranks are not
# bound to cores (hwloc_base_binding_policy none): every host here is the
# whole machine, and Open MPI would bind each host's first rank to core 0,
# all of them to the same core; and a rank waiting for a message yields
# the core (mpi_yield_when_idle 1), which Open MPI does by itself only
# when it sees more ranks than cores on one host.
set -eu
self=$(readlink -f "$0")

case "${1:-}" in
check)
  [ "$(id -u)" = 0 ] || { echo "not root (network namespaces need CAP_NET_ADMIN)"; exit 0; }
  command -v ip >/dev/null 2>&1 || { echo "no ip(8) (iproute2)"; exit 0; }
  command -v unshare >/dev/null 2>&1 || { echo "no unshare(1) (util-linux)"; exit 0; }
  probe="qkvprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "ip netns add fails here (no CAP_NET_ADMIN, or no network namespaces)"; exit 0
  fi
  ok=yes
  ip -n "$probe" link add br0 type bridge 2>/dev/null || ok="no bridge (the kernel's bridge driver)"
  [ "$ok" = yes ] && { ip -n "$probe" link add p0 type veth peer name q0 2>/dev/null || ok="no veth pairs"; }
  [ "$ok" = yes ] && { ip netns exec "$probe" unshare --uts true 2>/dev/null || ok="unshare --uts fails (no CAP_SYS_ADMIN)"; }
  ip netns del "$probe"
  [ "$ok" = yes ] || echo "$ok"
  ;;
up)
  P=$2; N=$3
  ip netns add "${P}s"
  ip -n "${P}s" link add br0 type bridge
  ip -n "${P}s" link set br0 up
  i=0
  while [ "$i" -lt "$N" ]; do
    ip netns add "${P}h$i"
    ip -n "${P}s" link add "p$i" type veth peer name eth0 netns "${P}h$i"
    ip -n "${P}s" link set "p$i" master br0 up
    ip -n "${P}h$i" addr add "10.9.0.$((i + 1))/24" dev eth0
    ip -n "${P}h$i" link set eth0 up
    ip -n "${P}h$i" link set lo up
    # a peer behind a cut link given up on in seconds, not minutes (below)
    ip netns exec "${P}h$i" sh -c 'echo 5 > /proc/sys/net/ipv4/tcp_retries2 &&
      echo 2 > /proc/sys/net/ipv4/tcp_syn_retries'
    i=$((i + 1))
  done
  ;;
down)
  P=$2; N=$3
  i=0
  while [ "$i" -lt "$N" ]; do ip netns del "${P}h$i" 2>/dev/null || true; i=$((i + 1)); done
  ip netns del "${P}s" 2>/dev/null || true
  ;;
mpirun)
  P=$2; N=$3; shift 3
  hosts=$(mktemp)
  i=0
  while [ "$i" -lt "$N" ]; do echo "h$i slots=1" >> "$hosts"; i=$((i + 1)); done
  status=0
  env QKV_NETNS="$P" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp \
    OMPI_MCA_btl_tcp_if_include=10.9.0.0/24 OMPI_MCA_oob_tcp_if_include=10.9.0.0/24 \
    OMPI_MCA_plm_rsh_agent="$self agent" OMPI_MCA_plm_rsh_no_tree_spawn=1 \
    OMPI_MCA_oob_tcp_keepalive_time=2 OMPI_MCA_oob_tcp_keepalive_intvl=1 \
    OMPI_MCA_oob_tcp_keepalive_probes=3 OMPI_MCA_hwloc_base_binding_policy=none \
    OMPI_MCA_mpi_yield_when_idle=1 \
    ip netns exec "${P}h0" unshare --uts sh -c 'hostname h0 && exec "$@"' sh \
    mpirun -np "$N" --hostfile "$hosts" "$@" || status=$?
  rm -f "$hosts"
  exit "$status"
  ;;
cut)
  ip -n "$2s" link set "p$3" down
  ;;
agent)
  h=$2; shift 2
  # Open MPI passes the daemon's command as words for a remote shell
  exec ip netns exec "${QKV_NETNS}$h" unshare --uts sh -c "hostname $h && $*"
  ;;
*)
  sed -n '2,30p' "$self" >&2
  exit 2
  ;;
esac
