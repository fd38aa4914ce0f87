# scripts/bench.d/scale_nodes.sh — `scripts/bench --nodes N` (issue 15): the
# clustered daemon's copy throughput with N nodes against 1 node, on the same
# clusters and the same data.
#
# A bed of its own: a one-broker source and a three-broker destination (so the
# state topic has replication factor 3, as in production). NODES_TOPICS topics
# of NODES_PARTITIONS partitions are loaded with --records records in all, and
# one mirror per topic copies it (a clustered daemon spreads its work by
# mirror: each mirror runs on the node owning its coordinator shard). Each
# round starts fresh nodes (a cluster id and state topic of its own), waits
# until the group owns every shard, creates and starts the mirrors through
# node 1, and watches the destination's end offsets until they hold every
# record. Figures per round: MB/s while copying (as the copy row: from the last
# sample at 0), wall time from the first `mirror create`, the nodes' CPU-seconds
# summed, their peak RSS summed, and how many mirrors each node coordinated.
# Between rounds the destination topics are deleted.
# Sourced by scripts/bench; uses its functions and FIG, RES, DIR, KMIRROR_BIN.
# shellcheck shell=bash

NODES_TOPICS="${NODES_TOPICS:-12}"
NODES_PARTITIONS="${NODES_PARTITIONS:-2}"
NODES_SHARDS=12

# py_get ADMIN PATH EXPR: EXPR (Python, `d` = the JSON of GET ADMIN+PATH);
# prints nothing if the node does not answer.
nodes_py() {
  python3 - "$1" "$2" "$3" <<'PY' 2>/dev/null || true
import json, sys, urllib.request
admin, path, expr = sys.argv[1:]
try:
    d = json.load(urllib.request.urlopen(admin + path, timeout=5))
except Exception:
    sys.exit(0)
print(eval(expr))
PY
}

# Mirrors coordinated per node ("a/b/c", in node order), from node 1's /cluster:
# mirror m<i> lives on the owner of shard abs(javaHashCode(name)) % shards.
nodes_spread() {
  python3 - "$1" "$NODES_SHARDS" "$NODES_TOPICS" "${@:2}" <<'PY' 2>/dev/null || echo n/a
import json, sys, urllib.request
admin, shards, topics, urls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
d = json.load(urllib.request.urlopen(admin + "/cluster", timeout=5))
owner = {s: m["url"] for m in d["members"] for s in m["shards"]}
count = {u: 0 for u in urls}
for i in range(topics):
    h, units = 0, f"m{i}".encode("utf-16-be")  # Java's String.hashCode
    for j in range(0, len(units), 2):
        h = (31 * h + (units[j] << 8 | units[j + 1])) & 0xFFFFFFFF
    url = owner[(h & 0x7FFFFFFF) % shards]  # Kafka's Utils.abs
    count[url] = count.get(url, 0) + 1
print("/".join(str(count[u]) for u in urls))
PY
}

# One round with K nodes. Sets FIG[scale_nodes.K.*].
#   nodes_round K SRC DST TOPICS TARGET
nodes_round() {
  local k=$1 src=$2 dst=$3 topics=$4 target=$5 p="scale_nodes.$1" i port
  local admins=() pids=() urls=()
  for ((i = 1; i <= k; i++)); do
    port=$(free_port)
    cat >"$RES/nodes-$k-$i.toml" <<EOF
admin_listen = "127.0.0.1:$port"
state_topic = "__kmirror_state_bench_$k"
state_topic_num_partitions = $NODES_SHARDS
[destination]
bootstrap_servers = "$dst"
[cluster]
id = "bench-$k"
session_timeout_ms = 6000
heartbeat_interval_ms = 1000
EOF
    LOG="$RES/nodes-$k-$i.log" start_bg "$KMIRROR_BIN" daemon --config "$RES/nodes-$k-$i.toml"
    pids+=("$BG_PID")
    admins+=("http://127.0.0.1:$port")
  done
  local n=0 settled=""
  while [ "$n" -lt 480 ]; do
    settled=$(nodes_py "${admins[0]}" /cluster "len(d['members']) == $k and sorted(s for m in d['members'] for s in m['shards']) == list(range($NODES_SHARDS))")
    [ "$settled" != True ] || break
    n=$((n + 1)); sleep 0.25
  done
  [ "$settled" = True ] || die "$p: the $k nodes' group did not settle in 120 s (logs $RES/nodes-$k-*.log)"
  urls=($(nodes_py "${admins[0]}" /cluster "' '.join(m['url'] for m in sorted(d['members'], key=lambda m: m['url']))"))
  local t0 ticks0=0 ticks1=0 pid hwm=0 rc=0
  for pid in "${pids[@]}"; do ticks0=$((ticks0 + $(pid_ticks "$pid"))); done
  printf 'bootstrap.servers=%s\n' "$src" >"$RES/nodes.properties"
  t0=$(date +%s%3N)
  for ((i = 0; i < NODES_TOPICS; i++)); do
    KMIRROR_ADMIN=${admins[0]} kmirror_cli "$RES/nodes-$k.cli" mirror create --mirror "m$i" --mirror-config "$RES/nodes.properties"
    KMIRROR_ADMIN=${admins[0]} kmirror_cli "$RES/nodes-$k.cli" mirror start --mirror "m$i" --topics "nodes_$i"
  done
  probe watch "$dst" "$topics" "$target" 0 200 $((target * RECORD_SIZE / 10485760 + 120)) >"$RES/$p.timeline" 2>"$RES/$p.watch.err" || rc=$?
  for pid in "${pids[@]}"; do
    ticks1=$((ticks1 + $(pid_ticks "$pid")))
    hwm=$((hwm + $(awk '$1 == "VmHWM:" { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)))
  done
  FIG[$p.spread]=$(nodes_spread "${admins[0]}" "${urls[@]}")
  for pid in "${pids[@]}"; do stop_pid "$pid"; done
  [ "$rc" -eq 0 ] || die "$p: $k nodes did not copy $target records (watch exit $rc; logs $RES/nodes-$k-*.log)"
  summarize_copy "$p" "$RES/$p.timeline" "$target" "$t0"
  local clk gib
  clk=$(getconf CLK_TCK)
  gib=$(awk -v t="$target" -v rs="$RECORD_SIZE" 'BEGIN { print t * rs / 1073741824 }')
  FIG[$p.cpu]=$(awk -v a="$ticks0" -v b="$ticks1" -v clk="$clk" 'BEGIN { printf "%.1f", (b - a) / clk }')
  FIG[$p.cpu_per_gib]=$(awk -v c="${FIG[$p.cpu]}" -v g="$gib" 'BEGIN { printf "%.1f", c / g }')
  FIG[$p.rss]=$(awk -v k="$hwm" 'BEGIN { printf "%.1f", k / 1024 }')
  note "$p: $k node(s): ${FIG[$p.mbs]} MB/s while copying, ${FIG[$p.wall]} s from the first mirror create, ${FIG[$p.cpu]} CPU-s, peak RSS ${FIG[$p.rss]} MiB summed, mirrors per node ${FIG[$p.spread]}"
}

scale_nodes_run() {
  [ -n "$NODES" ] || return 0
  local bed="$DIR/nodes-bed" src dst i names="" target per
  say "clustered bed: a 1-broker source and a 3-broker destination in $bed"
  EXTRA_BEDS+=("$bed")
  "$REPO/scripts/kafka" up --clusters 2 --brokers 1,3 --dir "$bed" --owner-pid $$ "${BED_CONFIG[@]}" >"$RES/nodes-bed.env" \
    || die "could not start the clustered bed (see $RES/nodes-bed.env)"
  src=$(sed -n 's/^CLUSTER_1=//p' "$RES/nodes-bed.env")
  dst=$(sed -n 's/^CLUSTER_2=//p' "$RES/nodes-bed.env")
  [[ "$src" == 127.0.0.1:* && "$dst" == 127.0.0.1:* ]] || die "unexpected clustered bed addresses: $src $dst"
  per=$(((RECORDS + NODES_TOPICS - 1) / NODES_TOPICS))
  note "loading $NODES_TOPICS topics x $NODES_PARTITIONS partitions, $per records each"
  for ((i = 0; i < NODES_TOPICS; i++)); do
    topic_create "$src" "nodes_$i" "$NODES_PARTITIONS"
    perf_test "$src" "nodes_$i" "$per" "$BATCH_SIZE" -1 >/dev/null
    names+="${names:+,}nodes_$i"
  done
  target=$(probe endsum "$src" "$names")
  FIG[scale_nodes.records]=$target
  nodes_round 1 "$src" "$dst" "$names" "$target"
  delete_topics "$dst" 'nodes_.*'
  local n=0
  while "$REPO/scripts/kafka" tool kafka-topics --bootstrap-server "$dst" --list 2>>"$RES/nodes-topics.log" | grep -q '^nodes_'; do
    n=$((n + 1)); [ "$n" -lt 60 ] || die "destination topics nodes_* still exist 120 s after their deletion"
    sleep 2
  done
  nodes_round "$NODES" "$src" "$dst" "$names" "$target"
  FIG[scale_nodes.ratio]=$(ratio "${FIG[scale_nodes.$NODES.mbs]}" "${FIG[scale_nodes.1.mbs]}")
  "$REPO/scripts/kafka" down --dir "$bed" >/dev/null 2>&1 || true
}

scale_nodes_rows() {
  local k
  for k in 1 "$NODES"; do
    echo "clustered copy, $k node(s) (MB/s)|-|-|$(f "scale_nodes.$k.mbs")|"
    echo "clustered copy, $k node(s): CPU-s per GiB, all nodes|-|-|$(f "scale_nodes.$k.cpu_per_gib")|"
    echo "clustered copy, $k node(s): peak RSS, all nodes (MiB)|-|-|$(f "scale_nodes.$k.rss")|"
  done
  echo "clustered copy, $NODES nodes / 1 node|-|-|$(f scale_nodes.ratio)|"
}

scale_nodes_facts() {
  echo "- clustered run (\`--nodes $NODES\`): $(f scale_nodes.records) records over $NODES_TOPICS topics x $NODES_PARTITIONS partitions, one mirror each, $NODES_SHARDS state-topic partitions (coordinator shards); mirrors per node with $NODES nodes: $(f "scale_nodes.$NODES.spread"); wall time from the first mirror create: $(f scale_nodes.1.wall) s with 1 node, $(f "scale_nodes.$NODES.wall") s with $NODES"
}

scale_nodes_method() {
  echo "- **clustered** (\`--nodes N\`, \`scripts/bench.d/scale_nodes.sh\`): a bed of its own with a 1-broker source and a 3-broker destination (the state topic at replication factor 3). $NODES_TOPICS topics of $NODES_PARTITIONS partitions hold --records records in all; one mirror per topic, since a clustered daemon spreads work by mirror (each runs on the node owning its coordinator shard, abs(javaHashCode(name)) % $NODES_SHARDS). A round starts fresh nodes (own cluster id and state topic), waits until the group owns every shard, then creates and starts the mirrors through node 1 and polls the destination's end offsets every 200 ms; MB/s as for the copy row, CPU is every node's utime+stime summed, RSS every node's VmHWM summed. Round 1 runs 1 node, round 2 N nodes on the same clusters, the destination topics deleted between them. All of it shares the machine's 2 CPUs with the 5 broker JVMs, so N nodes can only show what spreading costs here, not what N machines would gain."
}
