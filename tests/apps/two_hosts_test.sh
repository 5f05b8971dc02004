#!/usr/bin/env bash
# A job on two "hosts": two network namespaces joined by a veth pair, each
# with its own address (192.0.2.1 and 192.0.2.2, a documentation range that
# nothing routes), host name and /etc/hosts (ip netns exec mounts
# /etc/netns/NS/hosts), 2 ranks on each. dp1 x tp2 x pp2 over the 4 ranks:
# the TP shards of stage 0 on host a, of stage 1 on host b, so every
# activation and gradient crosses the veth pair. UCX_TLS=tcp,self: nothing
# may go through shared memory, and loopback cannot reach the other
# namespace, so no shortcut can pass. Every step's loss equals the same
# layout in one process to 1e-12, the single device to 1e-5. Skips (77)
# where namespaces cannot be made (not root, no iproute2).
# Modes:
#   node    one `merak node` per host, started by hand with the rendezvous
#           and a token on the command line
#   mpirun  one `mpirun -H host-a:2,host-b:2` on host a that starts host b's
#           daemon through an rsh agent entering the other namespace; no
#           MASTER_ADDR, MASTER_PORT or token set: the ranks find rank 0
#           through Open MPI's PMIx server (skips without mpirun)
# Usage: two_hosts_test.sh MERAK [node|mpirun]
set -euo pipefail
merak=$(realpath "$1")
mode=${2:-node}
[[ $mode == mpirun ]] && ! command -v mpirun >/dev/null && { echo "skip: no mpirun"; exit 77; }
command -v ip >/dev/null && command -v unshare >/dev/null || { echo "skip: no ip/unshare"; exit 77; }
ns_a=merak-a-$$ ns_b=merak-b-$$
work=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  rm -rf "$work" "/etc/netns/$ns_a" "/etc/netns/$ns_b"
}
trap cleanup EXIT
if ! ip netns add "$ns_a" 2>/dev/null || ! ip netns add "$ns_b" 2>/dev/null; then
  echo "skip: this kernel or user cannot make network namespaces"
  exit 77
fi
if ! ip link add "va$$" netns "$ns_a" type veth peer name "vb$$" netns "$ns_b" 2>/dev/null; then
  echo "skip: this kernel or user cannot make veth pairs"
  exit 77
fi
ip -n "$ns_a" addr add 192.0.2.1/24 dev "va$$"
ip -n "$ns_b" addr add 192.0.2.2/24 dev "vb$$"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n192.0.2.1 host-a\n192.0.2.2 host-b\n' >"/etc/netns/$ns/hosts"
done
ip -n "$ns_a" link set "va$$" up
ip -n "$ns_b" link set "vb$$" up
# UCX lists only interfaces that are running: wait for both ends' carrier.
for _ in $(seq 100); do
  ip -n "$ns_a" link show "va$$" | grep -q "state UP" && ip -n "$ns_b" link show "vb$$" | grep -q "state UP" && break
  sleep 0.05
done

cat "$(dirname "$0")"/../../README.md "$(dirname "$0")"/../../docs/*.md >"$work/text.txt"
model=(--data "$work/text.txt" --layers 2 --dim 64 --heads 2 --seq 32 --batch 12 --eval-batches 2
  --lend-cores off --step-timeout 60 --steps 4 --tp 2 --pp 2 --micro-batches 2)
# host NS NAME ARGS...: runs ARGS in namespace NS as host NAME.
host() {
  local ns=$1 name=$2
  shift 2
  ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
}
case $mode in
  node)
    port=29517
    node=(node --procs 2 --world-size 4 --master-addr 192.0.2.1 --master-port "$port"
      --token two-hosts --timeout 150)
    host "$ns_b" host-b env UCX_TLS=tcp,self "$merak" "${node[@]}" --first-rank 2 train \
      "${model[@]}" 2>"$work/b.err" &
    b=$!
    host "$ns_a" host-a env UCX_TLS=tcp,self "$merak" "${node[@]}" --first-rank 0 train \
      "${model[@]}" --metrics "$work/mp.jsonl" --log-level debug 2>"$work/a.err" ||
      { echo "FAIL: host a"; cat "$work/a.err" "$work/b.err"; exit 1; }
    wait "$b" || { echo "FAIL: host b"; cat "$work/b.err"; exit 1; }
    ;;
  mpirun)
    # mpirun's rsh agent: runs the daemon's command line in the namespace
    # of the host it names, as ssh would on that host.
    cat >"$work/rsh.sh" <<EOF
#!/usr/bin/env bash
case \$1 in host-a) ns=$ns_a ;; host-b) ns=$ns_b ;; *) echo "no host '\$1'" >&2; exit 1 ;; esac
name=\$1
shift
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$name" "\$*"
EOF
    chmod +x "$work/rsh.sh"
    root=()
    [[ $(id -u) == 0 ]] && root=(--allow-run-as-root)
    host "$ns_a" host-a env -u MASTER_ADDR -u MASTER_PORT -u MERAK_JOB_TOKEN \
      -u MERAK_JOB_TOKEN_FILE mpirun "${root[@]}" --oversubscribe --bind-to none \
      -H host-a:2,host-b:2 -np 4 --mca plm_rsh_agent "$work/rsh.sh" -x UCX_TLS=tcp,self \
      "$merak" train "${model[@]}" --threads 1 --metrics "$work/mp.jsonl" --log-level debug \
      >"$work/a.out" 2>"$work/a.err" || { echo "FAIL: mpirun"; cat "$work/a.err"; exit 1; }
    grep "rank 0 of 4 listens" "$work/a.err" | sed 's/.*\] //'
    grep -q "rendezvous host-a, from the launcher's PMIx server" "$work/a.err" ||
      { echo "FAIL: rank 0 not found through PMIx"; cat "$work/a.err"; exit 1; }
    ;;
  *) echo "two_hosts_test.sh: unknown mode '$mode' (node, mpirun)" >&2; exit 2 ;;
esac
# UCX keeps to the job's interface (the veth pair), not every interface.
grep -q "tensor channel over UCX (tcp,self;net=va$$)" "$work/a.err" ||
  { echo "FAIL: UCX not restricted to va$$:"; grep "tensor channel" "$work/a.err"; exit 1; }
grep "processes (placement" "$work/a.err" | sed 's/.*\] //'
grep -q "4 processes (placement 0,1,2,3)" "$work/a.err" || { cat "$work/a.err"; exit 1; }

"$merak" train "${model[@]}" --metrics "$work/ip.jsonl" 2>/dev/null
"$merak" train --data "$work/text.txt" --layers 2 --dim 64 --heads 2 --seq 32 --batch 12 \
  --eval-batches 2 --steps 4 --metrics "$work/one.jsonl" 2>/dev/null
python3 - "$work/mp.jsonl" "$work/ip.jsonl" "$work/one.jsonl" "$mode" <<'PY'
import json, sys
mp, ip, one = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
assert len(mp) == len(ip) == len(one) == 4, (len(mp), len(ip), len(one))
close = lambda a, b, t: abs(a - b) <= t * max(abs(a), abs(b))
for a, b, c in zip(mp, ip, one):
    for k in ("loss", "grad_norm"):
        assert close(a[k], b[k], 1e-12), (a["step"], k, a[k], b[k])
        assert close(a[k], c[k], 1e-5), (a["step"], k, a[k], c[k])
assert close(mp[-1]["val_loss"], ip[-1]["val_loss"], 1e-12)
print(f"ok: tp2 x pp2 over two hosts ({sys.argv[4]}) equals one process to 1e-12 (last loss {mp[-1]['loss']:.6f})")
PY
