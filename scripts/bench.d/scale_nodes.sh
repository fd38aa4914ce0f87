# scripts/bench.d/scale_nodes.sh — `scripts/bench --nodes N` (issue 15): the
# clustered daemon's copy throughput with N nodes against 1 node, and what
# running clustered costs against one unclustered node, on the same clusters
# and the same data.
#
# A bed of its own: a one-broker source and a three-broker destination (so the
# state topic has replication factor 3, as in production). NODES_TOPICS topics
# of NODES_PARTITIONS partitions are loaded with --records records in all, and
# one mirror per topic copies it (a clustered daemon spreads its work by
# mirror: each mirror runs on the node owning its coordinator shard). Rounds:
# one unclustered node on the cold bed (`cold`, a fact only: a first round is
# slower whoever runs it), then twice one clustered node and one unclustered
# node (`plain`: its log in sled, plain idempotent producers), then N
# clustered nodes. Each round
# starts fresh nodes (a data dir, or a cluster id and state topic, of its
# own), waits until they are ready (the group owns every shard), creates and
# starts the mirrors through node 1, and watches the destination's end
# offsets until they hold every record. Figures per round: MB/s while copying (as the copy row: from
# the last sample at 0), wall time from the first `mirror create`, the nodes'
# CPU-seconds summed, their peak RSS summed, and how many mirrors each node
# coordinated.
#
# The clustered mode's cost (issue 15 asks for "the transactional mode's
# cost"). Its fence is the one issue 15 prefers: data produced idempotently,
# not in transactions, under the producer id and epoch of a per-partition
# transactional id (tests/tests/fencing.rs proves each assumption against
# Kafka), so no transaction is ever open on a data partition and a
# read_committed consumer should see each record as soon as a
# read_uncommitted one. The one-node rounds measure it: the copy rate
# clustered against plain, and, once the first copy of each is done, the lag each adds at
# CURVE_GOAL_RATE records/s on one more mirror, seen at the same time by a
# read_uncommitted and a read_committed destination consumer of one lag probe
# (the same records in the same window).
#
# A last round runs one mirror of every topic, its partitions spread over the
# N nodes (`[cluster] spread_partitions = true`, `mirror.partitions.spread=true`,
# experimental): what one mirror gains from N nodes, against the same one
# clustered node as the mirror-per-topic rounds.
#
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

# The lag one mirror adds at CURVE_GOAL_RATE records/s, through the node at
# ADMIN, seen by a read_uncommitted and a read_committed destination consumer
# of one probe (the same records, the same window). Sets
# FIG[P.lag_ISOLATION.*] (added p50/p99 and count, end-to-end p99, missing).
#   nodes_lag P ADMIN SRC DST
nodes_lag() {
  local p=$1 admin=$2 src=$3 dst=$4 topic="nodes_lag_${1#scale_nodes.}" load iso line
  local rate=$CURVE_GOAL_RATE out="$RES/$1.lagprobe"
  topic_create "$src" "$topic" "$NODES_PARTITIONS"
  KMIRROR_ADMIN=$admin kmirror_cli "$RES/$p.cli" mirror create --mirror "$topic" --mirror-config "$RES/nodes.properties"
  KMIRROR_ADMIN=$admin kmirror_cli "$RES/$p.cli" mirror start --mirror "$topic" --topics "$topic"
  perf_test "$src" "$topic" 1000 "$BATCH_SIZE" -1 >/dev/null
  probe watch "$dst" "$topic" 1000 0 200 180 >"$RES/$p.lag.prime" 2>&1 \
    || die "$p: the lag mirror did not start copying within 180 s (logs $RES/nodes-*.log)"
  perf_argv "$src" "$topic" $((rate * (CURVE_WARMUP + CURVE_SECONDS + 120))) "$BATCH_SIZE" "$rate"
  LOG="$RES/$p.lag.load" start_bg "${PERF[@]}"
  load=$BG_PID
  probe_jit lag "$src" "$dst" "$topic" "+$((CURVE_WARMUP * 1000))" "+$((CURVE_SECONDS * 1000))" 60 - \
    read_uncommitted,read_committed >"$out" 2>&1 || true
  kill -0 "$load" 2>/dev/null || note "$p: the load ended before the probe did ($RES/$p.lag.load)"
  stop_pid "$load"
  for iso in read_uncommitted read_committed; do
    line=$(grep "^added.$iso " "$out" || true)
    [ -n "$line" ] || die "$p: the lag probe gave no figures for $iso ($out)"
    read -r _ "FIG[$p.lag_$iso.added_n]" "FIG[$p.lag_$iso.added_p50]" _ "FIG[$p.lag_$iso.added_p99]" _ _ <<<"$line"
    read -r _ _ _ _ "FIG[$p.lag_$iso.p99]" _ _ "FIG[$p.lag_$iso.missing]" <<<"$(grep "^destination.$iso " "$out")"
    note "$p: at $rate records/s a $iso consumer saw lag added p50 $(f "$p.lag_$iso.added_p50") ms, p99 $(f "$p.lag_$iso.added_p99") ms over $(f "$p.lag_$iso.added_n") records (end-to-end p99 $(f "$p.lag_$iso.p99") ms, missing $(f "$p.lag_$iso.missing"))"
  done
}

# Partitions each node runs ("a/b/c", in the order of its arguments): each
# node's own answer to /partitions, a request marked forwarded (not gathered).
nodes_partitions() {
  python3 - "$@" <<'PY' 2>/dev/null || echo n/a
import json, sys, urllib.request
counts = []
for admin in sys.argv[1:]:
    gen = json.load(urllib.request.urlopen(admin + "/cluster", timeout=5))["generation"]
    req = urllib.request.Request(admin + "/partitions", headers={"kmirror-forwarded": str(gen)})
    counts.append(str(len(json.load(urllib.request.urlopen(req, timeout=10)))))
print("/".join(counts))
PY
}

# One round: K clustered nodes, or (MODE plain) one unclustered node, or
# (MODE spread) K clustered nodes running one mirror of every topic, its
# partitions spread over them. Sets FIG[scale_nodes.LABEL.*]; the rounds
# labelled 1a and plaina also measure the lag (nodes_lag), as
# FIG[scale_nodes.1.*] and FIG[scale_nodes.plain.*].
#   nodes_round MODE K LABEL SRC DST TOPICS TARGET   (MODE: cluster, plain or spread)
nodes_round() {
  local mode=$1 k=$2 label=$3 src=$4 dst=$5 topics=$6 target=$7 i port conf
  local p="scale_nodes.$label" admins=() pids=() urls=()
  for ((i = 1; i <= k; i++)); do
    port=$(free_port)
    conf="$RES/nodes-$label-$i.toml"
    {
      echo "admin_listen = \"127.0.0.1:$port\""
      echo "state_topic = \"__kmirror_state_bench_$label\""
      echo "state_topic_num_partitions = $NODES_SHARDS"
      [ "$mode" != plain ] || echo "data_dir = \"$RES/nodes-$label-$i.data\""
      printf '[destination]\nbootstrap_servers = "%s"\n' "$dst"
      [ "$mode" = plain ] || printf '[cluster]\nid = "bench-%s"\nsession_timeout_ms = 6000\nheartbeat_interval_ms = 1000\n' "$label"
      [ "$mode" != spread ] || echo "spread_partitions = true"
    } >"$conf"
    LOG="$RES/nodes-$label-$i.log" start_bg "$KMIRROR_BIN" daemon --config "$conf"
    pids+=("$BG_PID")
    admins+=("http://127.0.0.1:$port")
  done
  # Ready: a plain node answers /health; clustered ones once the group owns every shard.
  local n=0 ready="" path=/cluster want="len(d['members']) == $k and sorted(s for m in d['members'] for s in m['shards']) == list(range($NODES_SHARDS))"
  [ "$mode" != plain ] || { path=/health; want=True; }
  while [ "$n" -lt 480 ]; do
    ready=$(nodes_py "${admins[0]}" "$path" "$want")
    [ "$ready" != True ] || break
    n=$((n + 1)); sleep 0.25
  done
  [ "$ready" = True ] || die "$p: the $label node(s) were not ready in 120 s (logs $RES/nodes-$label-*.log)"
  urls=("${admins[0]}")
  [ "$mode" = plain ] || urls=($(nodes_py "${admins[0]}" /cluster "' '.join(m['url'] for m in sorted(d['members'], key=lambda m: m['url']))"))
  local t0 ticks0=0 ticks1=0 pid hwm=0 rc=0
  for pid in "${pids[@]}"; do ticks0=$((ticks0 + $(pid_ticks "$pid"))); done
  printf 'bootstrap.servers=%s\n' "$src" >"$RES/nodes.properties"
  printf 'bootstrap.servers=%s\nmirror.partitions.spread=true\n' "$src" >"$RES/nodes-spread.properties"
  t0=$(date +%s%3N)
  if [ "$mode" = spread ]; then
    KMIRROR_ADMIN=${admins[0]} kmirror_cli "$RES/nodes-$label.cli" mirror create --mirror ms --mirror-config "$RES/nodes-spread.properties"
    KMIRROR_ADMIN=${admins[0]} kmirror_cli "$RES/nodes-$label.cli" mirror start --mirror ms --topics "$topics"
  else
    for ((i = 0; i < NODES_TOPICS; i++)); do
      KMIRROR_ADMIN=${admins[0]} kmirror_cli "$RES/nodes-$label.cli" mirror create --mirror "m$i" --mirror-config "$RES/nodes.properties"
      KMIRROR_ADMIN=${admins[0]} kmirror_cli "$RES/nodes-$label.cli" mirror start --mirror "m$i" --topics "nodes_$i"
    done
  fi
  probe watch "$dst" "$topics" "$target" 0 200 $((target * RECORD_SIZE / 10485760 + 120)) >"$RES/$p.timeline" 2>"$RES/$p.watch.err" || rc=$?
  for pid in "${pids[@]}"; do
    ticks1=$((ticks1 + $(pid_ticks "$pid")))
    hwm=$((hwm + $(awk '$1 == "VmHWM:" { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)))
  done
  case $mode in
    plain) FIG[$p.spread]=$NODES_TOPICS ;;
    cluster) FIG[$p.spread]=$(nodes_spread "${admins[0]}" "${urls[@]}") ;;
    spread) FIG[$p.spread]=$(nodes_partitions "${admins[@]}") ;;
  esac
  [ "$rc" -eq 0 ] || die "$p: $label node(s) did not copy $target records (watch exit $rc; logs $RES/nodes-$label-*.log)"
  case $label in 1a | plaina) nodes_lag "scale_nodes.${label%a}" "${admins[0]}" "$src" "$dst" ;; esac
  for pid in "${pids[@]}"; do stop_pid "$pid"; done
  summarize_copy "$p" "$RES/$p.timeline" "$target" "$t0"
  local clk gib
  clk=$(getconf CLK_TCK)
  gib=$(awk -v t="$target" -v rs="$RECORD_SIZE" 'BEGIN { print t * rs / 1073741824 }')
  FIG[$p.cpu]=$(awk -v a="$ticks0" -v b="$ticks1" -v clk="$clk" 'BEGIN { printf "%.1f", (b - a) / clk }')
  FIG[$p.cpu_per_gib]=$(awk -v c="${FIG[$p.cpu]}" -v g="$gib" 'BEGIN { printf "%.1f", c / g }')
  FIG[$p.rss]=$(awk -v k="$hwm" 'BEGIN { printf "%.1f", k / 1024 }')
  note "$p: $label: ${FIG[$p.mbs]} MB/s while copying, ${FIG[$p.wall]} s from the first mirror create, ${FIG[$p.cpu]} CPU-s, peak RSS ${FIG[$p.rss]} MiB summed, $([ "$mode" = spread ] && echo partitions || echo mirrors) per node ${FIG[$p.spread]}"
}

# Deletes the topics a round made: on the destination all of them, on the
# source the lag topic; waits until the destination has none left.
#   nodes_clear SRC DST
nodes_clear() {
  local src=$1 dst=$2 n=0
  delete_topics "$src" 'nodes_lag_.*' --if-exists
  delete_topics "$dst" 'nodes_.*' --if-exists
  while "$REPO/scripts/kafka" tool kafka-topics --bootstrap-server "$dst" --list 2>>"$RES/nodes-topics.log" | grep -q '^nodes_'; do
    n=$((n + 1)); [ "$n" -lt 60 ] || die "destination topics nodes_* still exist 120 s after their deletion"
    sleep 2
  done
}

# The mean of two figures, n/a if either is.
nodes_mean() { awk -v a="$(f "$1")" -v b="$(f "$2")" 'BEGIN { if (a == "n/a" || b == "n/a") print "n/a"; else printf "%.1f", (a + b) / 2 }'; }

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
  # Rounds of one node vary by 15 % or more here, and the first on a fresh
  # bed is slower whoever runs it (stop 35, five runs): an unclustered round
  # on the cold bed first, shown as a fact, not compared; then clustered and
  # unclustered alternate twice, and each one-node figure is the mean of its
  # two rounds (RSS: the larger).
  nodes_round plain 1 cold "$src" "$dst" "$names" "$target"
  local pass m
  for pass in a b; do
    nodes_clear "$src" "$dst"
    nodes_round cluster 1 "1$pass" "$src" "$dst" "$names" "$target"
    nodes_clear "$src" "$dst"
    nodes_round plain 1 "plain$pass" "$src" "$dst" "$names" "$target"
  done
  for m in 1 plain; do
    FIG[scale_nodes.$m.runs]="$(f "scale_nodes.${m}a.mbs") and $(f "scale_nodes.${m}b.mbs")"
    FIG[scale_nodes.$m.mbs]=$(nodes_mean "scale_nodes.${m}a.mbs" "scale_nodes.${m}b.mbs")
    FIG[scale_nodes.$m.wall]=$(nodes_mean "scale_nodes.${m}a.wall" "scale_nodes.${m}b.wall")
    FIG[scale_nodes.$m.cpu_per_gib]=$(nodes_mean "scale_nodes.${m}a.cpu_per_gib" "scale_nodes.${m}b.cpu_per_gib")
    FIG[scale_nodes.$m.rss]=$(awk -v a="$(f "scale_nodes.${m}a.rss")" -v b="$(f "scale_nodes.${m}b.rss")" 'BEGIN { print (a + 0 > b + 0) ? a : b }')
  done
  nodes_clear "$src" "$dst"
  nodes_round cluster "$NODES" "$NODES" "$src" "$dst" "$names" "$target"
  FIG[scale_nodes.ratio]=$(ratio "${FIG[scale_nodes.$NODES.mbs]}" "${FIG[scale_nodes.1.mbs]}")
  nodes_clear "$src" "$dst"
  nodes_round spread "$NODES" "${NODES}s" "$src" "$dst" "$names" "$target"
  FIG[scale_nodes.spread_ratio]=$(ratio "${FIG[scale_nodes.${NODES}s.mbs]}" "${FIG[scale_nodes.1.mbs]}")
  FIG[scale_nodes.cost]=$(ratio "${FIG[scale_nodes.1.mbs]}" "${FIG[scale_nodes.plain.mbs]}")
  "$REPO/scripts/kafka" down --dir "$bed" >/dev/null 2>&1 || true
}

scale_nodes_rows() {
  local k iso g=$CURVE_GOAL_RATE two
  echo "unclustered copy, 1 node (MB/s, mean of 2 rounds)|-|-|$(f scale_nodes.plain.mbs)|"
  echo "unclustered copy, 1 node: CPU-s per GiB|-|-|$(f scale_nodes.plain.cpu_per_gib)|"
  for k in 1 "$NODES"; do
    two=""; [ "$k" != 1 ] || two=", mean of 2 rounds"
    echo "clustered copy, $k node(s) (MB/s$two)|-|-|$(f "scale_nodes.$k.mbs")|"
    echo "clustered copy, $k node(s): CPU-s per GiB, all nodes|-|-|$(f "scale_nodes.$k.cpu_per_gib")|"
    echo "clustered copy, $k node(s): peak RSS, all nodes (MiB)|-|-|$(f "scale_nodes.$k.rss")|"
  done
  echo "clustered copy, $NODES nodes / 1 node|-|-|$(f scale_nodes.ratio)|"
  echo "clustered copy, one mirror spread over $NODES nodes (MB/s)|-|-|$(f "scale_nodes.${NODES}s.mbs")|"
  echo "clustered copy, one mirror spread over $NODES nodes / 1 node|-|-|$(f scale_nodes.spread_ratio)|"
  echo "clustered copy, 1 node / unclustered 1 node (the clustered mode's cost)|-|-|$(f scale_nodes.cost)|"
  for k in plain 1; do
    for iso in read_uncommitted read_committed; do
      echo "lag added p50 / p99 at $g records/s, $([ "$k" = plain ] && echo unclustered || echo clustered) 1 node, $iso consumer (ms)|-|-|$(f "scale_nodes.$k.lag_$iso.added_p50") / $(f "scale_nodes.$k.lag_$iso.added_p99")|"
    done
  done
}

scale_nodes_facts() {
  echo "- clustered run (\`--nodes $NODES\`): $(f scale_nodes.records) records over $NODES_TOPICS topics x $NODES_PARTITIONS partitions, one mirror each, $NODES_SHARDS state-topic partitions (coordinator shards); mirrors per node with $NODES nodes: $(f "scale_nodes.$NODES.spread"); partitions per node of the one spread mirror: $(f "scale_nodes.${NODES}s.spread") ($(f "scale_nodes.${NODES}s.wall") s from its create, $(f "scale_nodes.${NODES}s.cpu_per_gib") CPU-s per GiB, peak RSS $(f "scale_nodes.${NODES}s.rss") MiB summed); wall time from the first mirror create: $(f scale_nodes.plain.wall) s unclustered, $(f scale_nodes.1.wall) s with 1 clustered node (means of two rounds), $(f "scale_nodes.$NODES.wall") s with $NODES; the two rounds of 1 clustered node copied at $(f scale_nodes.1.runs) MB/s, those of 1 unclustered node at $(f scale_nodes.plain.runs); the first round, unclustered on the cold bed and not compared, at $(f scale_nodes.cold.mbs)"
}

scale_nodes_method() {
  echo "- **clustered** (\`--nodes N\`, \`scripts/bench.d/scale_nodes.sh\`): a bed of its own with a 1-broker source and a 3-broker destination (the state topic at replication factor 3). $NODES_TOPICS topics of $NODES_PARTITIONS partitions hold --records records in all; one mirror per topic, since a clustered daemon spreads work by mirror (each runs on the node owning its coordinator shard, abs(javaHashCode(name)) % $NODES_SHARDS). A round starts fresh nodes (own data dir, or own cluster id and state topic), waits until they are ready (the group owns every shard), then creates and starts the mirrors through node 1 and polls the destination's end offsets every 200 ms; MB/s as for the copy row, CPU is every node's utime+stime summed, RSS every node's VmHWM summed. Round 1 runs 1 unclustered node on the cold bed and is not compared (a first round is slower whoever runs it); rounds 2 to 5 alternate 1 clustered node (log in the state topic, every partition written under its fence: idempotent data under a transactional id's producer id and epoch, no transaction open on data) and 1 unclustered node (log in sled, plain idempotent producers), and each one-node figure is the mean of its two rounds (one round alone varies by 15 % or more here); round 6 runs N clustered nodes; round 7 runs N clustered nodes with \`spread_partitions = true\` and one mirror of all $NODES_TOPICS topics created with \`mirror.partitions.spread=true\`, so its partitions run where their keys route (partitions per node: each node's own \`/partitions\`), compared with the same one-node figure; all on the same clusters, the destination topics deleted between rounds. The first clustered and the first unclustered one-node round then mirror one more topic loaded at $CURVE_GOAL_RATE records/s and measure the lag added (as the lag curve) with one probe whose two destination consumers, one read_uncommitted and one read_committed, see the same records in the same window: the clustered mode's cost for both. All of it shares the machine's 2 CPUs with the 5 broker JVMs, so N nodes can only show what spreading costs here, not what N machines would gain."
}
