# scripts/bench.d/scale_wide.sh — the wide scale run of `scripts/bench --scale`
# (issue 17): one mirror over many topics and many consumer groups.
#
# 200 topics x 5 partitions are created and loaded on the source (records =
# --records spread evenly, at least one per partition), then a fresh daemon
# is started with a mirror whose pattern matches them all, and it measures:
#   - discovery: `kmirror mirror start --topics 'wide.*'` → every partition
#     MIRRORING (the HTTP API polled every 100 ms);
#   - the backlog copy of those partitions (MB/s, peak RSS), as context;
#   - describe latency: p50/p99 of 200 GETs of /mirrors/bench/partitions on the
#     admin HTTP API (curl's time_total, so no CLI process start is in it);
#   - group sync: 1 000 groups commit offsets on the source (one topic each,
#     every partition); from the end of those commits until every group holds
#     exactly those offsets on the destination (read there by the Java admin
#     client, many groups per OffsetFetch), the sync's interval included.
# Sourced by scripts/bench; uses its functions and FIG, RES, SRC, DST.
# shellcheck shell=bash

WIDE_TOPICS=200
WIDE_PARTITIONS=5
WIDE_GROUPS=1000
WIDE_DESCRIBES=200

# Compiles scripts/bench.d/WideProbe.java once per content into the cache.
WIDE_CP=""
wide_probe_build() {
  local src="$REPO/scripts/bench.d/WideProbe.java" sum out log
  sum=$(sha1sum "$src" | cut -c1-12)
  out="$CACHE_ROOT/wide-probe/$sum"
  if [ ! -f "$out/.complete" ]; then
    rm -rf "$out"
    mkdir -p "$out"
    log=$(javac -nowarn -d "$out" -cp "$KAFKA_LIBS/*" "$src" 2>&1) || { echo "$log" >&2; die "could not compile $src"; }
    touch "$out/.complete"
  fi
  WIDE_CP="$out:$KAFKA_LIBS/*"
}

wide_probe() {
  # shellcheck disable=SC2046
  java $(jvm_opts 512m) -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$CACHE_ROOT/tools-log4j2.properties" \
    -cp "$WIDE_CP" WideProbe "$@"
}
wide_probe_exec() {
  # shellcheck disable=SC2046
  exec java $(jvm_opts 256m) -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$CACHE_ROOT/tools-log4j2.properties" \
    -cp "$WIDE_CP" WideProbe "$@"
}

# How many of the mirror's partitions are MIRRORING, from the admin API.
wide_mirroring() {
  curl -fs --max-time 10 "$KMIRROR_ADMIN/mirrors/bench/partitions" 2>/dev/null \
    | python3 -c 'import json, sys
d = json.load(sys.stdin)
d = d.get("partitions", d) if isinstance(d, dict) else d
print(sum(1 for p in d if p.get("state") == "MIRRORING"))' 2>/dev/null || echo 0
}

scale_wide_run() {
  local p=scale_wide parts=$((WIDE_TOPICS * WIDE_PARTITIONS)) per
  per=$((RECORDS / parts)); [ "$per" -ge 1 ] || per=1
  FIG[$p.per]=$per
  wide_probe_build
  say "wide: $WIDE_TOPICS topics x $WIDE_PARTITIONS partitions on the source, $per records of $RECORD_SIZE B each"
  wide_probe topics "$SRC" wide "$WIDE_TOPICS" "$WIDE_PARTITIONS" || die "wide: could not create the topics"
  wide_probe load "$SRC" wide "$WIDE_TOPICS" "$WIDE_PARTITIONS" "$per" "$RECORD_SIZE" >"$RES/$p.load" 2>&1 \
    || { tail -n 20 "$RES/$p.load" >&2; die "wide: load failed ($RES/$p.load)"; }

  local cfg="$RES/$p.properties"
  echo "bootstrap.servers=$SRC" >"$cfg"
  kmirror_daemon "$RES/$p.data" "$RES/$p.log"
  local mpid=$MIRROR_PID
  kmirror_cli "$RES/$p.cli" mirror create --mirror bench --mirror-config "$cfg"
  local start_ms target=$((parts * per))
  LOG="$RES/$p.timeline" start_bg wide_probe_exec watch "$DST" wide "$WIDE_TOPICS" "$target" "$mpid" 200 600
  local watcher=$BG_PID
  start_ms=$(date +%s%3N)
  kmirror_cli "$RES/$p.cli" mirror start --mirror bench --topics 'wide.*'
  local n=0 m=0
  while [ "$m" -lt "$parts" ]; do
    n=$((n + 1)); [ "$n" -lt 3000 ] || die "wide: only $m of $parts partitions MIRRORING after 300 s (log $RES/$p.log)"
    sleep 0.1
    m=$(wide_mirroring)
  done
  FIG[$p.discovery_s]=$(awk -v a="$start_ms" -v b="$(date +%s%3N)" 'BEGIN { printf "%.2f", (b - a) / 1000 }')
  note "wide: all $parts partitions MIRRORING ${FIG[$p.discovery_s]} s after \`mirror start\`"
  wait "$watcher" || die "wide: the backlog ($target records) was not copied (timeline $RES/$p.timeline, log $RES/$p.log)"
  summarize_copy "$p.copy" "$RES/$p.timeline" "$target" "$start_ms"
  note "wide: backlog copy ${FIG[$p.copy.mbs]} MB/s, peak RSS ${FIG[$p.copy.rss]} MiB"

  local i t times="$RES/$p.describe"
  : >"$times"
  for ((i = 0; i < WIDE_DESCRIBES; i++)); do
    t=$(curl -fs -o "$RES/$p.describe.json" -w '%{time_total}' --max-time 30 "$KMIRROR_ADMIN/mirrors/bench/partitions") \
      || die "wide: describe failed"
    echo "$t" >>"$times"
  done
  read -r "FIG[$p.describe_p50]" "FIG[$p.describe_p99]" "FIG[$p.describe_max]" <<<"$(sort -n "$times" | awk '{ v[NR] = $1 * 1000 }
    END { i50 = int(NR * 0.50 + 0.999); i99 = int(NR * 0.99 + 0.999); printf "%.1f %.1f %.1f\n", v[i50], v[i99], v[NR] }')"
  FIG[$p.describe_bytes]=$(wc -c <"$RES/$p.describe.json")
  note "wide: describe of $parts partitions p50 ${FIG[$p.describe_p50]} ms, p99 ${FIG[$p.describe_p99]} ms, max ${FIG[$p.describe_max]} ms (${FIG[$p.describe_bytes]} B of JSON)"

  local cpu0 commit_ms
  cpu0=$(pid_ticks "$mpid")
  wide_probe commit "$SRC" wide-group- "$WIDE_GROUPS" wide "$WIDE_TOPICS" "$WIDE_PARTITIONS" "$per" >"$RES/$p.commit" 2>&1 \
    || { tail -n 20 "$RES/$p.commit" >&2; die "wide: committing the source groups failed"; }
  commit_ms=$(date +%s%3N)
  wide_probe groupwait "$DST" wide-group- "$WIDE_GROUPS" wide "$WIDE_TOPICS" "$WIDE_PARTITIONS" "$per" "$commit_ms" 600 \
    >"$RES/$p.groups" 2>&1 || { tail -n 5 "$RES/$p.groups" >&2; die "wide: the $WIDE_GROUPS groups were not all synced within 600 s (log $RES/$p.log)"; }
  FIG[$p.group_sync_s]=$(awk '$1 == "done" { printf "%.2f", $2 / 1000 }' "$RES/$p.groups")
  FIG[$p.group_sync_cpu]=$(awk -v a="$cpu0" -v b="$(pid_ticks "$mpid")" -v clk="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (b - a) / clk }')
  FIG[$p.rss_end]=$(awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$mpid/status" 2>/dev/null || echo n/a)
  note "wide: $WIDE_GROUPS groups translated and committed on the destination ${FIG[$p.group_sync_s]} s after the source commits (daemon CPU ${FIG[$p.group_sync_cpu]} s over that time incl. the probe's polling answers; peak RSS ${FIG[$p.rss_end]} MiB)"
  stop_pid "$mpid"
}

scale_wide_rows() {
  local parts=$((WIDE_TOPICS * WIDE_PARTITIONS))
  echo "wide: discovery, $WIDE_TOPICS topics x $WIDE_PARTITIONS to all MIRRORING (s)|-|-|$(f scale_wide.discovery_s)|"
  echo "wide: describe of $parts partitions p50 (ms)|-|-|$(f scale_wide.describe_p50)|"
  echo "wide: describe of $parts partitions p99 (ms)|-|-|$(f scale_wide.describe_p99)|<= 100 ms"
  echo "wide: group sync of $WIDE_GROUPS groups (s)|-|-|$(f scale_wide.group_sync_s)|"
  echo "wide: backlog copy, $parts partitions (MB/s)|-|-|$(f scale_wide.copy.mbs)|"
  echo "wide: peak RSS, $parts partitions (MiB)|-|-|$(f scale_wide.rss_end)|"
}

scale_wide_goals() {
  echo "describe of $((WIDE_TOPICS * WIDE_PARTITIONS)) partitions <= 100 ms|p99 $(unit scale_wide.describe_p99 ms) (p50 $(f scale_wide.describe_p50))|$(check "$(f scale_wide.describe_p99)" '<=' 100)"
}

scale_wide_facts() {
  echo "- wide scale run: $WIDE_TOPICS topics x $WIDE_PARTITIONS partitions, $(f scale_wide.per) records of $RECORD_SIZE B per partition; $WIDE_GROUPS groups, each committed on every partition of one topic; describe answered $(f scale_wide.describe_bytes) B of JSON, max $(f scale_wide.describe_max) ms over $WIDE_DESCRIBES calls; the daemon used $(f scale_wide.group_sync_cpu) CPU-s during the group sync; the copy took $(f scale_wide.copy.wall) s from \`mirror start\`"
}

scale_wide_method() {
  echo "- **wide** (kmirror only, \`scripts/bench.d/scale_wide.sh\`, Kafka clients in \`WideProbe.java\`): the $WIDE_TOPICS topics are created in one CreateTopics call and loaded by one producer; a fresh daemon gets one mirror, started with \`--topics 'wide.*'\`. **Discovery** is from \`mirror start\` until the admin API lists every partition MIRRORING (polled every 100 ms). **Backlog copy** is measured as the copy throughput above, over the sum of all the topics' end offsets. **Describe** is $WIDE_DESCRIBES sequential \`GET /mirrors/bench/partitions\` on the admin HTTP API once the copy is done (curl's time_total: request, answer and transfer, no CLI process start). **Group sync**: $WIDE_GROUPS groups commit (standalone, AlterConsumerGroupOffsets) an offset on every partition of one topic each on the source; the figure runs from the end of those commits until every group holds exactly those offsets on the destination (the offsets are identical, the source being contiguous), read with the Java admin client every 100 ms; the sync's interval (\`mirror.groups.sync.interval.ms\`, default 1 s) is inside it."
}
