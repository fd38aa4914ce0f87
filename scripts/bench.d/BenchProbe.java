// scripts/bench.d/BenchProbe.java — the measuring side of scripts/bench.
//
// One small Kafka client, compiled once by scripts/bench against the cached
// Kafka jars, so that polling offsets or timing records does not start a
// fresh JVM per sample (a JVM start costs about a CPU-second on this box and
// would disturb the figures it measures).
//
//   endsum BOOTSTRAP TOPIC
//       prints the sum of the topic's end offsets (0 if the topic is missing).
//   watch BOOTSTRAP TOPIC TARGET PID INTERVAL_MS TIMEOUT_S
//       every INTERVAL_MS prints "wall_ms end_offset_sum cpu_ticks rss_kb hwm_kb"
//       (cpu_ticks = utime+stime of PID from /proc/PID/stat, rss/hwm from
//       /proc/PID/status; -1 when PID is 0 or gone) until the sum reaches
//       TARGET (exit 0), TIMEOUT_S passes (exit 2) or PID exits (exit 3).
//   lag SRC_BOOTSTRAP DST_BOOTSTRAP TOPIC FROM_MS TO_MS GRACE_S [TIMELINE_FILE|-] [ISOLATIONS]
//       consumes TOPIC from the end on both clusters (assigned partitions, no
//       group) and, for every record whose timestamp lies in [FROM_MS, TO_MS),
//       takes lag = wall clock when poll() handed it over - record timestamp.
//       FROM_MS "+W" opens the window W ms after both consumers are positioned
//       and TO_MS "+S" closes it S ms after it opens: a load started before the
//       probe then has W ms of warm-up however long the JVMs took to start (on
//       a busy machine that is seconds). Prints "ready FROM_MS TO_MS" once
//       positioned, with the window's wall-clock bounds.
//       The record timestamp is CreateTime, stamped by the source producer at
//       send(); MirrorMaker 2 (and kmirror) keep it, so the destination lag is
//       end to end: producer -> source -> mirror -> destination -> consumer.
//       The source side is the baseline without the mirror. Ends when the
//       destination has every record the source had in the window (or
//       GRACE_S after TO_MS) and prints one line per side:
//       "side count p50 p90 p99 p999 max missing" (ms; missing = records seen
//       on the source but not on the destination within the grace), then
//       "added count p50 p90 p99 p999 max" (ms): the lag the mirror adds. The
//       k-th window record of source partition p is paired with the k-th window
//       record of destination partition p (both consumers see a partition's
//       records in order, and MirrorMaker 2 with IdentityReplicationPolicy and
//       kmirror both keep partition and order); added = destination poll wall
//       time - source poll wall time, clamped at 0 (count = pairs matched). Per
//       partition, a growable long[] ring holds the poll times of whichever
//       side is ahead, so memory is bounded by the records in flight.
//       With TIMELINE_FILE, also writes there one line per second of record
//       timestamp (second = (CreateTime - FROM_MS) / 1000) and side, source
//       first: "side second count p50 p99 max" (ms; -1 when count is 0), from a
//       small histogram per second (1 ms buckets below 10 s, 10 ms buckets
//       below 60 s, beyond that the second's max); "-" writes none.
//       ISOLATIONS (default read_uncommitted) is the destination consumer's
//       isolation.level, or a comma-separated list of them: one destination
//       consumer each, all positioned together and paired with the one source
//       consumer, so each sees the same records in the same window (a
//       read_committed consumer sees a record only once the last stable offset
//       passes it). With more than one, the destination and added lines are
//       named "destination.ISOLATION" and "added.ISOLATION".
//   topics BOOTSTRAP PREFIX COUNT PARTITIONS
//       creates topics PREFIX0..PREFIX{COUNT-1} of PARTITIONS partitions each
//       (replication factor 1), 50 topics per CreateTopics request; topics that
//       exist already are kept. Returns once every partition has a leader in
//       the broker's metadata. Prints the number of partitions.
//   trickle BOOTSTRAP PREFIX COUNT RATE SECONDS
//       produces RATE records/s in total (100 B values, acks=all) for SECONDS,
//       round-robin over every partition of PREFIX0..PREFIX{COUNT-1}, so each
//       partition gets a record now and then (an idle but live mirror).
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class BenchProbe {
    public static void main(String[] a) throws Exception {
        switch (a.length > 0 ? a[0] : "") {
            case "endsum" -> System.out.println(new Offsets(a[1], a[2]).sum());
            case "watch" -> System.exit(watch(a[1], a[2], Long.parseLong(a[3]), Long.parseLong(a[4]),
                    Long.parseLong(a[5]), Long.parseLong(a[6])));
            case "lag" -> lag(a[1], a[2], a[3], a[4], a[5], Long.parseLong(a[6]),
                    a.length > 7 && !a[7].equals("-") ? a[7] : null,
                    List.of((a.length > 8 ? a[8] : "read_uncommitted").split(",")));
            case "topics" -> System.out.println(topics(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4])));
            case "trickle" -> trickle(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]), Long.parseLong(a[5]));
            default -> { System.err.println("usage: endsum|watch|lag|topics|trickle ..."); System.exit(64); }
        }
    }

    /** End offsets of one topic, or of a comma-separated list of topics. */
    static final class Offsets implements AutoCloseable {
        final Admin admin;
        final List<String> topics;
        final Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
        final Set<String> known = new HashSet<>();

        Offsets(String bootstrap, String topics) {
            Properties p = new Properties();
            p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
            p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
            this.admin = Admin.create(p);
            this.topics = List.of(topics.split(","));
        }

        /** Sum of end offsets; a topic that does not exist yet counts 0. */
        long sum() throws Exception {
            for (String topic : topics) {
                if (known.contains(topic)) continue;
                try {
                    TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                    for (TopicPartitionInfo i : d.partitions()) specs.put(new TopicPartition(topic, i.partition()), OffsetSpec.latest());
                    known.add(topic);
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) throw e;
                }
            }
            if (specs.isEmpty()) return 0;
            try {
                long s = 0;
                for (var r : admin.listOffsets(specs).all().get().values()) s += r.offset();
                return s;
            } catch (ExecutionException e) {
                if (e.getCause() instanceof UnknownTopicOrPartitionException) return 0; // just created, leader not known yet
                throw e;
            }
        }

        public void close() { admin.close(Duration.ofSeconds(2)); }
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "120000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "60000");
        return Admin.create(p);
    }

    static int topics(String bootstrap, String prefix, int count, int partitions) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            for (int from = 0; from < count; from += 50) {
                List<NewTopic> batch = new ArrayList<>();
                for (int i = from; i < Math.min(count, from + 50); i++) batch.add(new NewTopic(prefix + i, partitions, (short) 1));
                for (var f : admin.createTopics(batch).values().values()) {
                    try {
                        f.get();
                    } catch (ExecutionException e) {
                        if (!(e.getCause() instanceof org.apache.kafka.common.errors.TopicExistsException)) throw e;
                    }
                }
            }
            // A broker publishes new topics to its metadata cache a while
            // after the controller commits them (seconds at thousands of
            // partitions): wait until every partition has a leader there.
            List<String> names = new ArrayList<>();
            for (int i = 0; i < count; i++) names.add(prefix + i);
            long deadline = System.currentTimeMillis() + 180_000;
            while (true) {
                int led = 0;
                try {
                    for (TopicDescription d : admin.describeTopics(names).allTopicNames().get().values())
                        for (TopicPartitionInfo i : d.partitions()) if (i.leader() != null) led++;
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) throw e;
                }
                if (led == count * partitions) break;
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException(led + " of " + count * partitions + " partitions have a leader after 180 s");
                Thread.sleep(500);
            }
        }
        return count * partitions;
    }

    static void trickle(String bootstrap, String prefix, int count, int rate, long seconds) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("linger.ms", "5");
        p.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        List<TopicPartition> all = new ArrayList<>();
        try (var producer = new org.apache.kafka.clients.producer.KafkaProducer<byte[], byte[]>(p)) {
            for (int i = 0; i < count; i++)
                for (var info : producer.partitionsFor(prefix + i)) all.add(new TopicPartition(prefix + i, info.partition()));
            Collections.shuffle(all, new Random(17));
            byte[] value = new byte[100];
            long start = System.nanoTime(), end = start + seconds * 1_000_000_000L;
            // The bench stops the trickle with SIGTERM: the count is told on
            // the way out, however it ends.
            var sent = new java.util.concurrent.atomic.AtomicLong();
            Runtime.getRuntime().addShutdownHook(new Thread(
                () -> System.out.println("sent " + sent.get() + " records over " + all.size() + " partitions")));
            while (System.nanoTime() < end) {
                TopicPartition tp = all.get((int) (sent.get() % all.size()));
                producer.send(new org.apache.kafka.clients.producer.ProducerRecord<>(tp.topic(), tp.partition(), null, value));
                long due = start + sent.incrementAndGet() * 1_000_000_000L / rate;
                long wait = due - System.nanoTime();
                if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
            }
            producer.flush();
        }
    }

    static long[] proc(long pid) {
        long[] r = {-1, -1, -1};
        if (pid <= 0) return r;
        try {
            String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            r[0] = Long.parseLong(f[11]) + Long.parseLong(f[12]); // fields 14, 15: utime, stime
            for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"))) {
                if (line.startsWith("VmRSS:")) r[1] = Long.parseLong(line.replaceAll("[^0-9]", ""));
                if (line.startsWith("VmHWM:")) r[2] = Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        } catch (Exception e) {
            r[0] = -1;
        }
        return r;
    }

    static int watch(String bootstrap, String topic, long target, long pid, long intervalMs, long timeoutS) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        try (Offsets o = new Offsets(bootstrap, topic)) {
            while (true) {
                long t = System.currentTimeMillis();
                long s;
                try {
                    s = o.sum();
                } catch (Exception e) {
                    System.err.println("watch: " + e);
                    s = -1;
                }
                long[] p = proc(pid);
                System.out.println(t + " " + s + " " + p[0] + " " + p[1] + " " + p[2]);
                System.out.flush();
                if (s >= target) return 0;
                if (pid > 0 && p[0] < 0) return 3;
                if (t > deadline) return 2;
                long sleep = t + intervalMs - System.currentTimeMillis();
                if (sleep > 0) Thread.sleep(sleep);
            }
        }
    }

    /** Percentile of a 1 ms histogram (bucket index = ms), -1 when empty. */
    static long pct(int[] histo, double q, long n) {
        long want = (long) Math.ceil(q * n), seen = 0;
        for (int i = 0; i < histo.length; i++) {
            seen += histo[i];
            if (seen >= want && want > 0) return i;
        }
        return -1;
    }

    /** "count p50 p90 p99 p999 max" of a 1 ms histogram (ms; -1 when empty). */
    static String summary(int[] histo, long n, long max) {
        return n + " " + pct(histo, 0.50, n) + " " + pct(histo, 0.90, n) + " " + pct(histo, 0.99, n) + " "
                + pct(histo, 0.999, n) + " " + (n > 0 ? max : -1);
    }

    /** Lag histograms per second of record timestamp (the TIMELINE_FILE). */
    static final class Seconds {
        static final int FINE = 10_000;   // 1 ms buckets for [0, 10 s)
        static final int COARSE = 5_000;  // 10 ms buckets for [10 s, 60 s); beyond: the second's max
        final int[][] histo;              // allocated for the seconds that have records
        final long[] count, max;

        Seconds(int n) {
            histo = new int[n][];
            count = new long[n];
            max = new long[n];
        }

        void add(int sec, long lag) {
            if (sec < 0 || sec >= histo.length) return;
            lag = Math.max(0, lag);
            if (histo[sec] == null) histo[sec] = new int[FINE + COARSE + 1];
            int b = lag < FINE ? (int) lag : (int) Math.min(FINE + (lag - FINE) / 10, FINE + COARSE);
            histo[sec][b]++;
            count[sec]++;
            max[sec] = Math.max(max[sec], lag);
        }

        long pct(int sec, double q) {
            long n = count[sec], want = (long) Math.ceil(q * n), seen = 0;
            if (n == 0) return -1;
            int[] h = histo[sec];
            for (int b = 0; b < h.length; b++) {
                seen += h[b];
                if (seen >= want) return b < FINE ? b : b < FINE + COARSE ? FINE + (long) (b - FINE) * 10 : max[sec];
            }
            return max[sec];
        }

        void write(java.io.PrintWriter w, String side) {
            for (int s = 0; s < histo.length; s++) {
                w.println(side + " " + s + " " + count[s] + " " + pct(s, 0.50) + " " + pct(s, 0.99) + " "
                        + (count[s] > 0 ? max[s] : -1));
            }
        }
    }

    /**
     * Pairs the k-th window record of partition p on the source with the k-th
     * one on the destination. Per partition, a growable ring of poll wall times
     * holds the records of whichever side is ahead.
     */
    static final class Pending {
        long[] ring = new long[1024];
        int head, size;
        boolean sourceAhead;

        /** This side saw its next record of the partition at NOW; returns the added lag, or -1 if queued. */
        synchronized long seen(boolean source, long now) {
            if (size > 0 && sourceAhead != source) {
                long then = ring[head];
                head = (head + 1) % ring.length;
                size--;
                return Math.max(0, source ? then - now : now - then);
            }
            sourceAhead = source;
            if (size == ring.length) {
                long[] grown = new long[ring.length * 2];
                for (int i = 0; i < size; i++) grown[i] = ring[(head + i) % ring.length];
                ring = grown;
                head = 0;
            }
            ring[(head + size) % ring.length] = now;
            size++;
            return -1;
        }
    }

    /** The source paired with one destination consumer: its rings and the added lags of its pairs. */
    static final class Pairing {
        final String name;
        final ConcurrentHashMap<Integer, Pending> pending = new ConcurrentHashMap<>();
        final int[] histo = new int[600_001]; // 1 ms buckets up to 10 min
        long count, max;

        Pairing(String name) { this.name = name; }

        /** The record of PARTITION seen by one side at NOW; counts the pair if it completes one. */
        void seen(int partition, boolean source, long now) {
            long added = pending.computeIfAbsent(partition, k -> new Pending()).seen(source, now);
            if (added < 0) return;
            synchronized (this) {
                histo[(int) Math.min(added, histo.length - 1)]++;
                count++;
                max = Math.max(max, added);
            }
        }

        synchronized String report() { return name + " " + summary(histo, count, max); }
    }

    static final class Side implements Runnable {
        final String name;
        final boolean source;
        final KafkaConsumer<byte[], byte[]> consumer;
        long from, to; // set by window() before the thread starts
        final int[] histo = new int[600_001]; // 1 ms buckets up to 10 min
        final AtomicLong count = new AtomicLong();
        final List<Pairing> pairings; // the source's: every destination's; a destination's: its own
        Seconds seconds; // null without a TIMELINE_FILE
        volatile boolean stop;
        long max;

        Side(String name, boolean source, String bootstrap, String topic, List<Pairing> pairings, String isolation) {
            this.name = name;
            this.source = source;
            this.pairings = pairings;
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            p.put(ConsumerConfig.FETCH_MIN_BYTES_CONFIG, "1");
            p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "2000");
            p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
            consumer = new KafkaConsumer<>(p);
            List<TopicPartition> tps = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 120_000;
            while (tps.isEmpty()) {
                for (PartitionInfo i : consumer.partitionsFor(topic)) tps.add(new TopicPartition(topic, i.partition()));
                if (tps.isEmpty()) {
                    if (System.currentTimeMillis() > deadline) throw new IllegalStateException(name + ": topic " + topic + " not found");
                    sleep(200);
                }
            }
            consumer.assign(tps);
            consumer.seekToEnd(tps);
            for (TopicPartition tp : tps) consumer.position(tp); // resolve now, before the load starts
        }

        void window(long from, long to, boolean timeline) {
            this.from = from;
            this.to = to;
            this.seconds = timeline ? new Seconds((int) ((to - from + 999) / 1000)) : null;
        }

        public void run() {
            while (!stop) {
                ConsumerRecords<byte[], byte[]> rs = consumer.poll(Duration.ofMillis(100));
                long now = System.currentTimeMillis();
                for (TopicPartition tp : rs.partitions()) {
                    for (ConsumerRecord<byte[], byte[]> r : rs.records(tp)) {
                        long ts = r.timestamp();
                        if (ts < from || ts >= to) continue;
                        long lag = Math.max(0, now - ts);
                        histo[(int) Math.min(lag, histo.length - 1)]++;
                        max = Math.max(max, lag);
                        count.incrementAndGet();
                        if (seconds != null) seconds.add((int) ((ts - from) / 1000), lag);
                        for (Pairing pairing : pairings) pairing.seen(tp.partition(), source, now);
                    }
                }
            }
            consumer.close(Duration.ofSeconds(2));
        }

        String report(long missing) {
            return name + " " + summary(histo, count.get(), max) + " " + missing;
        }
    }

    static void sleep(long ms) {
        try { Thread.sleep(ms); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
    }

    static void lag(String srcBoot, String dstBoot, String topic, String fromArg, String toArg, long graceS,
            String timeline, List<String> isolations) throws Exception {
        boolean one = isolations.size() == 1;
        List<Pairing> pairings = new ArrayList<>();
        for (String iso : isolations) pairings.add(new Pairing(one ? "added" : "added." + iso));
        Side src = new Side("source", true, srcBoot, topic, pairings, "read_uncommitted");
        List<Side> dsts = new ArrayList<>();
        for (int i = 0; i < isolations.size(); i++) {
            String iso = isolations.get(i);
            dsts.add(new Side(one ? "destination" : "destination." + iso, false, dstBoot, topic,
                    List.of(pairings.get(i)), iso));
        }
        long positioned = System.currentTimeMillis();
        long from = fromArg.startsWith("+") ? positioned + Long.parseLong(fromArg.substring(1)) : Long.parseLong(fromArg);
        long to = toArg.startsWith("+") ? from + Long.parseLong(toArg.substring(1)) : Long.parseLong(toArg);
        List<Side> sides = new ArrayList<>(List.of(src));
        sides.addAll(dsts);
        for (Side side : sides) side.window(from, to, timeline != null);
        System.err.println("lag: all consumers positioned at the end of " + topic);
        System.out.println("ready " + from + " " + to);
        System.out.flush();
        List<Thread> threads = new ArrayList<>();
        for (Side side : sides) threads.add(new Thread(side));
        for (Thread t : threads) t.start();
        long hardEnd = to + graceS * 1000;
        while (System.currentTimeMillis() < hardEnd) {
            long now = System.currentTimeMillis();
            // The source consumer is caught up a second or two after TO_MS; after that,
            // stop as soon as every destination has as many window records as the source.
            long want = src.count.get();
            if (now > to + 3000 && want > 0 && dsts.stream().allMatch(d -> d.count.get() >= want)) break;
            sleep(100);
        }
        for (Side side : sides) side.stop = true;
        for (Thread t : threads) t.join();
        System.out.println(src.report(0));
        for (int i = 0; i < dsts.size(); i++) {
            System.out.println(dsts.get(i).report(Math.max(0, src.count.get() - dsts.get(i).count.get())));
            System.out.println(pairings.get(i).report());
        }
        System.out.flush();
        if (timeline != null) {
            try (java.io.PrintWriter w = new java.io.PrintWriter(Files.newBufferedWriter(Path.of(timeline)))) {
                for (Side side : sides) side.seconds.write(w, side.name);
                if (w.checkError()) throw new java.io.IOException("write failed");
            } catch (Exception e) {
                System.err.println("lag: could not write " + timeline + ": " + e);
            }
        }
    }
}
