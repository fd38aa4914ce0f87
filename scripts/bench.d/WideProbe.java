// scripts/bench.d/WideProbe.java — the wide scale run's Kafka client
// (scripts/bench.d/scale_wide.sh): many topics and many groups in one JVM,
// where a Kafka tool per topic or per group would start a JVM each (a
// CPU-second apiece on this box; 1 000 groups would take many minutes).
// A class of its own, apart from BenchProbe.java, so the two evolve apart.
//
//   topics BOOTSTRAP PREFIX TOPICS PARTITIONS
//       creates PREFIX0 .. PREFIX{TOPICS-1}, PARTITIONS each, in one
//       CreateTopics call, and waits until every partition has a leader.
//   load BOOTSTRAP PREFIX TOPICS PARTITIONS PER_PARTITION SIZE
//       writes exactly PER_PARTITION records of SIZE bytes into every
//       partition (lz4, acks=all), so each end offset is PER_PARTITION.
//   commit BOOTSTRAP GROUP_PREFIX GROUPS PREFIX TOPICS PARTITIONS PER_PARTITION
//       group g (GROUP_PREFIX + g) commits, on topic PREFIX{g % TOPICS}, the
//       offset expected(g, p) = 1 + (g * 7 + p) % PER_PARTITION on every
//       partition p: a standalone commit (AlterConsumerGroupOffsets), all
//       groups at once.
//   groupwait BOOTSTRAP GROUP_PREFIX GROUPS PREFIX TOPICS PARTITIONS PER_PARTITION FROM_MS TIMEOUT_S
//       polls the groups' committed offsets (OffsetFetch, many groups per
//       request) every 100 ms until every group holds exactly expected(g, p)
//       on every partition, then prints "done MS" (ms since FROM_MS) and
//       exits 0; exit 2 on timeout. Prints "t MS GROUPS_DONE" on each change.
//   watch BOOTSTRAP PREFIX TOPICS TARGET PID INTERVAL_MS TIMEOUT_S
//       BenchProbe's watch over all the topics: every INTERVAL_MS prints
//       "wall_ms end_offset_sum cpu_ticks rss_kb hwm_kb" until the sum of
//       every partition's end offset reaches TARGET (exit 0), TIMEOUT_S
//       passes (exit 2) or PID exits (exit 3).
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class WideProbe {
    public static void main(String[] a) throws Exception {
        switch (a.length > 0 ? a[0] : "") {
            case "topics" -> topics(a[1], a[2], i(a[3]), i(a[4]));
            case "load" -> load(a[1], a[2], i(a[3]), i(a[4]), i(a[5]), i(a[6]));
            case "commit" -> commit(a[1], a[2], i(a[3]), a[4], i(a[5]), i(a[6]), i(a[7]));
            case "groupwait" -> System.exit(groupwait(a[1], a[2], i(a[3]), a[4], i(a[5]), i(a[6]), i(a[7]),
                    Long.parseLong(a[8]), Long.parseLong(a[9])));
            case "watch" -> System.exit(watch(a[1], a[2], i(a[3]), Long.parseLong(a[4]), Long.parseLong(a[5]),
                    Long.parseLong(a[6]), Long.parseLong(a[7])));
            default -> { System.err.println("usage: topics|load|commit|groupwait|watch ..."); System.exit(64); }
        }
    }

    static int i(String s) { return Integer.parseInt(s); }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    static List<TopicPartition> partitions(String prefix, int topics, int parts) {
        List<TopicPartition> out = new ArrayList<>();
        for (int t = 0; t < topics; t++) for (int p = 0; p < parts; p++) out.add(new TopicPartition(prefix + t, p));
        return out;
    }

    static long expected(int g, int p, int perPartition) { return 1 + ((long) g * 7 + p) % perPartition; }

    static void topics(String bootstrap, String prefix, int topics, int parts) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            List<NewTopic> ts = new ArrayList<>();
            for (int t = 0; t < topics; t++) ts.add(new NewTopic(prefix + t, parts, (short) 1));
            admin.createTopics(ts).all().get();
            List<String> names = ts.stream().map(NewTopic::name).toList();
            for (int n = 0; ; n++) {
                boolean ready = true;
                try {
                    for (TopicDescription d : admin.describeTopics(names).allTopicNames().get().values())
                        for (TopicPartitionInfo i : d.partitions()) ready &= i.leader() != null;
                } catch (ExecutionException e) {
                    ready = false;
                }
                if (ready) {
                    // A leader in the metadata may not serve yet: wait until
                    // every partition answers ListOffsets.
                    try {
                        Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
                        for (TopicPartition tp : partitions(prefix, topics, parts)) specs.put(tp, OffsetSpec.latest());
                        admin.listOffsets(specs).all().get();
                        break;
                    } catch (ExecutionException e) {
                        // not yet
                    }
                }
                if (n > 600) throw new IllegalStateException("partitions not served after 60 s");
                Thread.sleep(100);
            }
        }
    }

    static void load(String bootstrap, String prefix, int topics, int parts, int perPartition, int size) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "10");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "131072");
        p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, String.valueOf(64L << 20));
        // One request in flight per broker: on a loaded machine, retried
        // batches otherwise loop on OUT_OF_ORDER_SEQUENCE_NUMBER.
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "120000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "600000");
        byte[] value = new byte[size];
        new Random(17).nextBytes(value);
        try (Producer<byte[], byte[]> prod = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            List<Future<RecordMetadata>> last = new ArrayList<>();
            for (int r = 0; r < perPartition; r++)
                for (TopicPartition tp : partitions(prefix, topics, parts)) {
                    Future<RecordMetadata> f = prod.send(new ProducerRecord<>(tp.topic(), tp.partition(), null, value));
                    if (r == perPartition - 1) last.add(f);
                }
            prod.flush();
            for (Future<RecordMetadata> f : last) f.get();
        }
    }

    static void commit(String bootstrap, String groupPrefix, int groups, String prefix, int topics, int parts,
                       int perPartition) throws Exception {
        // 50 groups in flight at a time, each chunk tried up to 3 times: a
        // thousand calls queued at once time out on a loaded machine.
        try (Admin admin = admin(bootstrap)) {
            for (int from = 0; from < groups; from += 50) {
                for (int attempt = 1; ; attempt++) {
                    List<KafkaFuture<Void>> chunk = new ArrayList<>();
                    for (int g = from; g < Math.min(groups, from + 50); g++) {
                        Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>();
                        for (int p = 0; p < parts; p++)
                            m.put(new TopicPartition(prefix + (g % topics), p), new OffsetAndMetadata(expected(g, p, perPartition)));
                        chunk.add(admin.alterConsumerGroupOffsets(groupPrefix + g, m).all());
                    }
                    try {
                        for (KafkaFuture<Void> f : chunk) f.get();
                        break;
                    } catch (ExecutionException e) {
                        if (attempt >= 3) throw e;
                    }
                }
            }
        }
    }

    static int groupwait(String bootstrap, String groupPrefix, int groups, String prefix, int topics, int parts,
                         int perPartition, long fromMs, long timeoutS) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        Set<Integer> pending = new TreeSet<>();
        for (int g = 0; g < groups; g++) pending.add(g);
        int reported = -1;
        try (Admin admin = admin(bootstrap)) {
            while (true) {
                Map<String, ListConsumerGroupOffsetsSpec> specs = new HashMap<>();
                for (int g : pending) {
                    List<TopicPartition> tps = new ArrayList<>();
                    for (int p = 0; p < parts; p++) tps.add(new TopicPartition(prefix + (g % topics), p));
                    specs.put(groupPrefix + g, new ListConsumerGroupOffsetsSpec().topicPartitions(tps));
                }
                ListConsumerGroupOffsetsResult res = admin.listConsumerGroupOffsets(specs);
                for (Iterator<Integer> it = pending.iterator(); it.hasNext(); ) {
                    int g = it.next();
                    Map<TopicPartition, OffsetAndMetadata> got;
                    try {
                        got = res.partitionsToOffsetAndMetadata(groupPrefix + g).get();
                    } catch (ExecutionException e) {
                        continue;
                    }
                    boolean ok = true;
                    for (int p = 0; p < parts; p++) {
                        OffsetAndMetadata o = got.get(new TopicPartition(prefix + (g % topics), p));
                        ok &= o != null && o.offset() == expected(g, p, perPartition);
                    }
                    if (ok) it.remove();
                }
                long now = System.currentTimeMillis();
                int done = groups - pending.size();
                if (done != reported) {
                    System.out.println("t " + (now - fromMs) + " " + done);
                    System.out.flush();
                    reported = done;
                }
                if (pending.isEmpty()) {
                    System.out.println("done " + (now - fromMs));
                    return 0;
                }
                if (now > deadline) return 2;
                Thread.sleep(100);
            }
        }
    }

    static long[] proc(long pid) {
        long[] r = {-1, -1, -1};
        if (pid <= 0) return r;
        try {
            String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            r[0] = Long.parseLong(f[11]) + Long.parseLong(f[12]);
            for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"))) {
                if (line.startsWith("VmRSS:")) r[1] = Long.parseLong(line.replaceAll("[^0-9]", ""));
                if (line.startsWith("VmHWM:")) r[2] = Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        } catch (Exception e) {
            r[0] = -1;
        }
        return r;
    }

    static int watch(String bootstrap, String prefix, int topics, long target, long pid, long intervalMs, long timeoutS)
            throws Exception {
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        List<String> names = new ArrayList<>();
        for (int t = 0; t < topics; t++) names.add(prefix + t);
        Map<TopicPartition, OffsetSpec> specs = null;
        try (Admin admin = admin(bootstrap)) {
            while (true) {
                long t = System.currentTimeMillis(), s = -1;
                try {
                    if (specs == null) {
                        Map<TopicPartition, OffsetSpec> m = new HashMap<>();
                        for (TopicDescription d : admin.describeTopics(names).allTopicNames().get().values())
                            for (TopicPartitionInfo i : d.partitions()) m.put(new TopicPartition(d.name(), i.partition()), OffsetSpec.latest());
                        specs = m;
                    }
                    s = 0;
                    for (var r : admin.listOffsets(specs).all().get().values()) s += r.offset();
                } catch (Exception e) {
                    s = specs == null ? 0 : -1; // topics not all created yet: nothing copied
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
}
