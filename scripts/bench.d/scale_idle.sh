# scripts/bench.d/scale_idle.sh — the "idle" scale run of scripts/bench --scale
# (issue 17): one daemon mirroring 10 000 idle partitions (100 topics x 100
# partitions by default) with its defaults.
#
# Sourced by scripts/bench; uses its functions (say, note, start_bg, stop_pid,
# probe, probe_exec, kmirror_daemon, kmirror_cli, pid_ticks, check, f, FIG, RES,
# SRC, DST). Measures, on a release build:
#   - first start: `kmirror mirror start` to every partition MIRRORING;
#   - RSS (current and VmHWM) and CPU-seconds per minute over a 60 s window
#     while a trickle of SCALE_IDLE_RATE records/s (default 100, over all the
#     partitions round-robin) runs;
#   - restart: the daemon stopped (SIGTERM) and started again on the same data
#     dir, from process start to every partition MIRRORING again.
# "Every partition MIRRORING" is read from /metrics (kmirror_MirroringPartitionState,
# polled every 250 ms). The brokers hold 10 000 partitions each: start the bed
# with a bigger heap if 512m is not enough (KMIRROR_BROKER_HEAP, scripts/kafka).
#
# Environment: SCALE_IDLE_TOPICS (100), SCALE_IDLE_PARTITIONS (100 per topic),
# SCALE_IDLE_RATE (100 records/s; 0 = no trickle at all), SCALE_IDLE_WINDOW (60 s).

SCALE_IDLE_TOPICS="${SCALE_IDLE_TOPICS:-100}"
SCALE_IDLE_PARTITIONS="${SCALE_IDLE_PARTITIONS:-100}"
SCALE_IDLE_RATE="${SCALE_IDLE_RATE:-100}"
SCALE_IDLE_WINDOW="${SCALE_IDLE_WINDOW:-60}"

# Prints the daemon's count of MIRRORING partitions (empty if /metrics fails).
scale_idle_mirroring() {
  curl -fs --max-time 10 "$KMIRROR_ADMIN/metrics" 2>/dev/null | awk '$1 == "kmirror_MirroringPartitionState" { print $2; exit }'
}

# Waits until N partitions are MIRRORING (or TIMEOUT_S passes; then returns 1).
#   scale_idle_wait_mirroring N TIMEOUT_S
scale_idle_wait_mirroring() {
  local want=$1 deadline=$(($(date +%s) + $2)) have
  while true; do
    have=$(scale_idle_mirroring)
    [ "${have:-0}" != "$want" ] || return 0
    kill -0 "$MIRROR_PID" 2>/dev/null || return 1
    [ "$(date +%s)" -lt "$deadline" ] || { note "scale_idle: ${have:-?} of $want partitions MIRRORING after $2 s"; return 1; }
    sleep 0.25
  done
}

scale_idle_kb() { # PID FIELD -> kB from /proc/PID/status
  awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null
}

scale_idle_run() {
  local p=scale_idle n=$((SCALE_IDLE_TOPICS * SCALE_IDLE_PARTITIONS)) clk
  clk=$(getconf CLK_TCK)
  FIG[$p.partitions]=$n
  note "$p: creating $SCALE_IDLE_TOPICS topics x $SCALE_IDLE_PARTITIONS partitions on the source"
  probe topics "$SRC" scale_idle_ "$SCALE_IDLE_TOPICS" "$SCALE_IDLE_PARTITIONS" >/dev/null \
    || die "$p: could not create the source topics"
  printf 'bootstrap.servers=%s\n' "$SRC" >"$RES/$p.properties"
  kmirror_daemon "$RES/$p.data" "$RES/$p.log"
  kmirror_cli "$RES/$p.cli" mirror create --mirror scale --mirror-config "$RES/$p.properties"
  local t0 t1
  t0=$(date +%s%3N)
  # Ten topics per call: one start of 100 topics x 100 partitions creates
  # them one by one on the destination and outlasts the CLI's 60 s timeout.
  local i names
  for ((i = 0; i < SCALE_IDLE_TOPICS; i += 10)); do
    names=$(seq -s, -f "scale_idle_%g" "$i" "$((i + 9 < SCALE_IDLE_TOPICS - 1 ? i + 9 : SCALE_IDLE_TOPICS - 1))")
    kmirror_cli "$RES/$p.cli" mirror start --mirror scale --topics "$names"
  done
  if scale_idle_wait_mirroring "$n" 600; then
    t1=$(date +%s%3N)
    FIG[$p.first_start_s]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
  else
    FIG[$p.first_start_s]=n/a
  fi
  note "$p: mirror start to $n partitions MIRRORING: ${FIG[$p.first_start_s]} s"

  local load=""
  if [ "$SCALE_IDLE_RATE" -gt 0 ]; then
    LOG="$RES/$p.trickle" start_bg probe_exec trickle "$SRC" scale_idle_ "$SCALE_IDLE_TOPICS" "$SCALE_IDLE_RATE" 100000
    load=$BG_PID
  fi
  sleep 10
  local c0 c1
  c0=$(pid_ticks "$MIRROR_PID")
  sleep "$SCALE_IDLE_WINDOW"
  c1=$(pid_ticks "$MIRROR_PID")
  FIG[$p.cpu_per_min]=$(awk -v a="$c0" -v b="$c1" -v clk="$clk" -v w="$SCALE_IDLE_WINDOW" 'BEGIN { printf "%.2f", (b - a) / clk / (w / 60) }')
  FIG[$p.rss]=$(awk -v k="$(scale_idle_kb "$MIRROR_PID" VmRSS)" 'BEGIN { printf "%.1f", k / 1024 }')
  FIG[$p.hwm]=$(awk -v k="$(scale_idle_kb "$MIRROR_PID" VmHWM)" 'BEGIN { printf "%.1f", k / 1024 }')
  note "$p: over ${SCALE_IDLE_WINDOW} s at $SCALE_IDLE_RATE records/s: ${FIG[$p.cpu_per_min]} CPU-s per minute, RSS ${FIG[$p.rss]} MiB (peak ${FIG[$p.hwm]} MiB)"

  stop_pid "$MIRROR_PID"
  t0=$(date +%s%3N)
  kmirror_daemon "$RES/$p.data" "$RES/${p}_restart.log"
  if scale_idle_wait_mirroring "$n" 600; then
    t1=$(date +%s%3N)
    FIG[$p.restart_s]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
  else
    FIG[$p.restart_s]=n/a
  fi
  FIG[$p.restart_hwm]=$(awk -v k="$(scale_idle_kb "$MIRROR_PID" VmHWM)" 'BEGIN { printf "%.1f", k / 1024 }')
  note "$p: restart to $n partitions MIRRORING: ${FIG[$p.restart_s]} s (peak RSS ${FIG[$p.restart_hwm]} MiB)"
  stop_pid "$MIRROR_PID"
  [ -z "$load" ] || { stop_pid "$load"; FIG[$p.trickle]=$(grep '^sent' "$RES/$p.trickle" || echo "n/a"); }
}

scale_idle_rows() {
  local n
  n=$(f scale_idle.partitions)
  echo "idle RSS, $n partitions (MiB)|-|-|$(f scale_idle.rss)|<= 256 MiB"
  echo "idle peak RSS (VmHWM), $n partitions (MiB)|-|-|$(f scale_idle.hwm)|"
  echo "idle CPU-s per minute, $n partitions|-|-|$(f scale_idle.cpu_per_min)|<= 5"
  echo "restart to all MIRRORING, $n partitions (s)|-|-|$(f scale_idle.restart_s)|<= 5 s"
  echo "first mirror start to all MIRRORING, $n partitions (s)|-|-|$(f scale_idle.first_start_s)|"
}

scale_idle_goals() {
  local n
  n=$(f scale_idle.partitions)
  echo "RSS <= 256 MiB at $n idle partitions|$(unit scale_idle.hwm MiB) peak, $(unit scale_idle.rss MiB) now|$(check "$(f scale_idle.hwm)" '<=' 256)"
  echo "CPU <= 5 s per minute at $n idle partitions|$(unit scale_idle.cpu_per_min s)|$(check "$(f scale_idle.cpu_per_min)" '<=' 5)"
  echo "restart to all MIRRORING <= 5 s at $n partitions|$(unit scale_idle.restart_s s)|$(check "$(f scale_idle.restart_s)" '<=' 5)"
}

scale_idle_facts() {
  echo "- idle scale run: $(f scale_idle.partitions) partitions ($SCALE_IDLE_TOPICS topics x $SCALE_IDLE_PARTITIONS), a trickle of $SCALE_IDLE_RATE records/s over all of them ($(f scale_idle.trickle)); brokers' heap ${KMIRROR_BROKER_HEAP:-512m}; the restarted daemon's peak RSS $(f scale_idle.restart_hwm) MiB"
}

scale_idle_method() {
  echo "- **idle scale** (kmirror only, \`scripts/bench.d/scale_idle.sh\`): $SCALE_IDLE_TOPICS topics of $SCALE_IDLE_PARTITIONS partitions on the source, one daemon with its defaults, \`mirror start --topics\` ten topics at a time (one call for all outlasts the CLI's 60 s timeout: the destination topics are created one by one). *First start*: from the first call to every partition MIRRORING (\`kmirror_MirroringPartitionState\` on /metrics, polled every 250 ms). Then a trickle of $SCALE_IDLE_RATE records/s, round-robin over all partitions (\`BenchProbe trickle\`, 100 B values); 10 s later a ${SCALE_IDLE_WINDOW} s window: CPU-s per minute is the daemon's utime+stime over it, RSS is VmRSS at its end and the peak VmHWM. *Restart*: the daemon is stopped (SIGTERM) and started again on the same data dir; from the new process's start to every partition MIRRORING again, the figure an operator waits for after an upgrade."
}
