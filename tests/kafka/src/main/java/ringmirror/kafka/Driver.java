package ringmirror.kafka;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * ringmirror's test driver: Kafka's own client library producing test data,
 * consuming and administering a cluster (Apache Kafka or a ringmirror agent),
 * with results printed one per line for a Rust test to compare.
 *
 * <p>Usage: {@code Driver <command> --bootstrap HOST:PORT [options]}; every
 * option is {@code --name value} (or a bare {@code --flag}). Extra client
 * settings: {@code --prop key=value} (repeatable). Output lines:
 * <ul>
 * <li>produce: {@code produced <partition> <offset>} per record</li>
 * <li>consume: {@code record <partition> <offset> <key> <value> <headers>}
 *     (key/value: {@code null} or {@code <length>:<sha256 prefix>}; headers:
 *     {@code k=<sha> ,…} or {@code -}), then {@code end <count>}</li>
 * <li>admin commands: {@code ok} or what they describe</li>
 * <li>{@code streams-input}, {@code streams-count}: see {@link Streams};
 *     {@code txn-zombie}, {@code txn-timeout}, {@code txn-hold}: see
 *     {@link Transactions}; {@code group-member}: see {@link GroupMember}</li>
 * </ul>
 * Any failure prints the exception and exits 1.
 */
public final class Driver {
    private final Map<String, List<String>> options = new HashMap<>();
    private final Properties extra = new Properties();

    private Driver(String[] args, int from) {
        for (int i = from; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("expected --option, got " + a);
            }
            String name = a.substring(2);
            String value = (i + 1 < args.length && !args[i + 1].startsWith("--")) ? args[++i] : "true";
            if (name.equals("prop")) {
                int eq = value.indexOf('=');
                extra.setProperty(value.substring(0, eq), value.substring(eq + 1));
            } else {
                options.computeIfAbsent(name, k -> new ArrayList<>()).add(value);
            }
        }
    }

    public static void main(String[] args) {
        if (args.length == 0) {
            System.err.println("usage: Driver <command> --bootstrap HOST:PORT [options]");
            System.exit(2);
        }
        try {
            new Driver(args, 1).run(args[0]);
            System.out.flush();
            System.exit(0);
        } catch (Exception e) {
            System.out.flush();
            System.err.println("driver failed: " + e);
            e.printStackTrace();
            System.exit(1);
        }
    }

    String opt(String name, String fallback) {
        List<String> v = options.get(name);
        return v == null ? fallback : v.get(v.size() - 1);
    }

    String req(String name) {
        String v = opt(name, null);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }

    boolean flag(String name) {
        return options.containsKey(name);
    }

    List<String> all(String name) {
        return options.getOrDefault(name, List.of());
    }

    int num(String name, int fallback) {
        return Integer.parseInt(opt(name, Integer.toString(fallback)));
    }

    Properties common() {
        Properties p = new Properties();
        p.setProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, req("bootstrap"));
        p.putAll(extra);
        return p;
    }

    private void run(String command) throws Exception {
        switch (command) {
            case "produce" -> produce();
            case "consume" -> consume();
            case "create-topic" -> createTopic();
            case "add-partitions" -> addPartitions();
            case "describe-topic" -> describeTopic();
            case "alter-configs" -> alterConfigs();
            case "describe-configs" -> describeConfigs();
            case "create-acl" -> createAcl();
            case "delete-records" -> deleteRecords();
            case "elect-leaders" -> electLeaders();
            case "commit-offsets" -> commitOffsets();
            case "interleaved-aborts" -> interleavedAborts();
            case "streams-input" -> Streams.input(this);
            case "streams-count" -> Streams.count(this);
            case "txn-zombie" -> Transactions.zombie(this);
            case "txn-timeout" -> Transactions.timeout(this);
            case "txn-hold" -> Transactions.hold(this);
            case "group-member" -> GroupMember.run(this);
            default -> throw new IllegalArgumentException("unknown command " + command);
        }
    }

    // ---- producing ----

    /**
     * Produces {@code --count} records to {@code --topic} (partition
     * {@code --partition}, else by key). {@code --codec}, {@code --idempotent},
     * {@code --transactional ID} with {@code --txn commit|abort|open}
     * (open: the transaction is left open and the process halts without
     * closing the producer), {@code --headers}, {@code --null-keys},
     * {@code --null-values}, {@code --value-bytes N}, {@code --batch}
     * (records per send batch: linger so they share a batch),
     * {@code --key-prefix}.
     */
    private void produce() throws Exception {
        Properties p = common();
        p.setProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.setProperty(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.setProperty(ProducerConfig.COMPRESSION_TYPE_CONFIG, opt("codec", "none"));
        p.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(flag("idempotent") || flag("transactional")));
        p.setProperty(ProducerConfig.ACKS_CONFIG, opt("acks", "all"));
        p.setProperty(ProducerConfig.LINGER_MS_CONFIG, flag("batch") ? "50" : "0");
        p.setProperty(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, Integer.toString(16 << 20));
        p.setProperty(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(256 << 10));
        String txnId = opt("transactional", null);
        if (txnId != null) {
            p.setProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        }
        p.putAll(extra);
        int count = num("count", 10);
        int valueBytes = num("value-bytes", 16);
        String topic = req("topic");
        Integer partition = options.containsKey("partition") ? Integer.valueOf(req("partition")) : null;
        String keyPrefix = opt("key-prefix", "k");
        int keys = num("keys", count);
        String txn = opt("txn", "commit");
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        if (txnId != null) {
            producer.initTransactions();
            producer.beginTransaction();
        }
        List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            byte[] key = flag("null-keys") && i % 2 == 0 ? null : (keyPrefix + (i % keys)).getBytes(StandardCharsets.UTF_8);
            byte[] value = flag("null-values") && i % 3 == 0 ? null : value(i, valueBytes);
            ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, partition, key, value);
            if (flag("headers")) {
                r.headers().add("h" + (i % 3), ("v" + i).getBytes(StandardCharsets.UTF_8));
                r.headers().add("empty", new byte[0]);
            }
            sent.add(producer.send(r));
        }
        producer.flush();
        for (var f : sent) {
            RecordMetadata m = f.get(60, TimeUnit.SECONDS);
            System.out.println("produced " + m.partition() + " " + m.offset());
        }
        if (txnId != null) {
            switch (txn) {
                case "commit" -> producer.commitTransaction();
                case "abort" -> producer.abortTransaction();
                case "open" -> {
                    System.out.println("open");
                    System.out.flush();
                    // Halt without closing: the transaction stays open at the broker.
                    Runtime.getRuntime().halt(0);
                }
                default -> throw new IllegalArgumentException("--txn commit|abort|open");
            }
        }
        producer.close(Duration.ofSeconds(30));
    }

    /**
     * Two transactional producers whose transactions overlap and end in the
     * other order, {@code --rounds} times into partition 0 of {@code --topic}:
     * A begins, B begins, B aborts, A aborts — so the aborted transactions'
     * first offsets and markers are in opposite orders — then
     * {@code --count} committed non-transactional records. Prints
     * {@code committed <n>}: how many records READ_COMMITTED readers must see.
     */
    private void interleavedAborts() throws Exception {
        String topic = req("topic");
        int rounds = num("rounds", 3);
        int count = num("count", 5);
        Properties base = common();
        base.setProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        base.setProperty(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        base.setProperty(ProducerConfig.COMPRESSION_TYPE_CONFIG, opt("codec", "none"));
        base.setProperty(ProducerConfig.LINGER_MS_CONFIG, "0");
        base.putAll(extra);
        Properties pa = (Properties) base.clone();
        pa.setProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG, topic + "-tx-a");
        Properties pb = (Properties) base.clone();
        pb.setProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG, topic + "-tx-b");
        Properties plain = (Properties) base.clone();
        plain.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        int committed = 0;
        try (KafkaProducer<byte[], byte[]> a = new KafkaProducer<>(pa);
                KafkaProducer<byte[], byte[]> b = new KafkaProducer<>(pb);
                KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(plain)) {
            a.initTransactions();
            b.initTransactions();
            for (int r = 0; r < rounds; r++) {
                a.beginTransaction();
                sendAndFlush(a, topic, "a" + r, count);
                b.beginTransaction();
                sendAndFlush(b, topic, "b" + r, count);
                sendAndFlush(a, topic, "a" + r, count);
                b.abortTransaction();
                sendAndFlush(a, topic, "a" + r, count);
                a.abortTransaction();
                sendAndFlush(p, topic, "c" + r, count);
                committed += count;
            }
        }
        System.out.println("committed " + committed);
    }

    private static void sendAndFlush(KafkaProducer<byte[], byte[]> producer, String topic, String key, int count)
            throws Exception {
        List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            sent.add(producer.send(new ProducerRecord<>(topic, 0, key.getBytes(StandardCharsets.UTF_8), value(i, 32))));
        }
        producer.flush();
        for (var f : sent) {
            f.get(60, TimeUnit.SECONDS);
        }
    }

    /** A value of {@code n} bytes that differs per record and compresses a little. */
    private static byte[] value(int i, int n) {
        byte[] v = new byte[n];
        long x = 0x9E3779B97F4A7C15L * (i + 1);
        for (int j = 0; j < n; j++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            v[j] = (byte) (j % 4 == 0 ? x : 'a' + (j % 26));
        }
        return v;
    }

    // ---- consuming ----

    /**
     * Reads {@code --topic} from the beginning (or from committed offsets with
     * {@code --group G --committed}) at {@code --isolation
     * read_committed|read_uncommitted} until {@code --max} records or
     * {@code --idle-ms} without a record once it has partitions assigned;
     * {@code --commit} commits what was read (with {@code --group});
     * {@code --keys}/{@code --values digest|string|long} say how keys and
     * values are printed (digest by default).
     */
    private void consume() throws Exception {
        Properties p = common();
        p.setProperty(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.setProperty(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.setProperty(ConsumerConfig.ISOLATION_LEVEL_CONFIG, opt("isolation", "read_uncommitted"));
        p.setProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.setProperty(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, Integer.toString(16 << 20));
        p.setProperty(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, Integer.toString(64 << 20));
        String group = opt("group", null);
        if (group != null) {
            p.setProperty(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.putAll(extra);
        String topic = req("topic");
        long max = Long.parseLong(opt("max", Long.toString(Long.MAX_VALUE)));
        long idleMs = Long.parseLong(opt("idle-ms", "3000"));
        long deadline = System.currentTimeMillis() + Long.parseLong(opt("timeout-ms", "60000"));
        long count = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            if (group != null) {
                consumer.subscribe(List.of(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                for (var info : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                    tps.add(new TopicPartition(topic, info.partition()));
                }
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
            }
            long lastRecord = System.currentTimeMillis();
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            while (count < max && System.currentTimeMillis() < deadline
                    && System.currentTimeMillis() - lastRecord < idleMs) {
                var records = consumer.poll(Duration.ofMillis(200));
                if (consumer.assignment().isEmpty()) {
                    // Still joining its group (a slow SASL_SSL handshake on a
                    // loaded machine): idle time counts from the assignment.
                    lastRecord = System.currentTimeMillis();
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    lastRecord = System.currentTimeMillis();
                    System.out.println("record " + r.partition() + " " + r.offset() + " "
                            + shown(r.key(), opt("keys", "digest")) + " " + shown(r.value(), opt("values", "digest")) + " "
                            + headers(r.headers().toArray()));
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    if (++count >= max) {
                        break;
                    }
                }
            }
            if (flag("commit") && group != null && !next.isEmpty()) {
                consumer.commitSync(next, Duration.ofSeconds(30));
            }
        }
        System.out.println("end " + count);
    }

    /**
     * A key or value as {@code --keys}/{@code --values} ask: {@code digest}
     * (see {@link #digest}), {@code string} (UTF-8) or {@code long} (8 bytes,
     * big-endian: Kafka's LongSerializer); {@code null} for none.
     */
    private static String shown(byte[] b, String as) throws Exception {
        if (b == null) {
            return "null";
        }
        return switch (as) {
            case "string" -> new String(b, StandardCharsets.UTF_8);
            case "long" -> Long.toString(java.nio.ByteBuffer.wrap(b).getLong());
            case "digest" -> digest(b);
            default -> throw new IllegalArgumentException("--keys/--values digest|string|long");
        };
    }

    private static String digest(byte[] b) throws Exception {
        if (b == null) {
            return "null";
        }
        byte[] d = MessageDigest.getInstance("SHA-256").digest(b);
        return b.length + ":" + HexFormat.of().formatHex(d, 0, 8);
    }

    private static String headers(Header[] hs) throws Exception {
        if (hs.length == 0) {
            return "-";
        }
        List<String> out = new ArrayList<>();
        for (Header h : hs) {
            out.add(h.key() + "=" + digest(h.value()));
        }
        return String.join(",", out);
    }

    // ---- administering ----

    private Admin admin() {
        return Admin.create(common());
    }

    /** {@code --topic T --partitions N --replication R [--config k=v …]}. */
    private void createTopic() throws Exception {
        try (Admin admin = admin()) {
            NewTopic t = new NewTopic(req("topic"), num("partitions", 1), (short) num("replication", 1));
            Map<String, String> configs = new HashMap<>();
            for (String kv : all("config")) {
                int eq = kv.indexOf('=');
                configs.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
            t.configs(configs);
            admin.createTopics(List.of(t)).all().get(60, TimeUnit.SECONDS);
        }
        System.out.println("ok");
    }

    /** {@code --topic T --partitions N} (the new total). */
    private void addPartitions() throws Exception {
        try (Admin admin = admin()) {
            admin.createPartitions(Map.of(req("topic"), NewPartitions.increaseTo(num("partitions", 1))))
                    .all().get(60, TimeUnit.SECONDS);
        }
        System.out.println("ok");
    }

    /** Prints {@code topic <id> <partitions>} and {@code partition <p> <leader> <replicas> <isr>}. */
    private void describeTopic() throws Exception {
        try (Admin admin = admin()) {
            String topic = req("topic");
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(60, TimeUnit.SECONDS).get(topic);
            System.out.println("topic " + d.topicId() + " " + d.partitions().size());
            for (TopicPartitionInfo p : d.partitions()) {
                System.out.println("partition " + p.partition() + " " + (p.leader() == null ? -1 : p.leader().id()) + " "
                        + ids(p.replicas()) + " " + ids(p.isr()));
            }
        }
    }

    private static String ids(List<org.apache.kafka.common.Node> nodes) {
        List<String> out = new ArrayList<>();
        for (var n : nodes) {
            out.add(Integer.toString(n.id()));
        }
        return String.join(",", out);
    }

    /** {@code --topic T --set k=v … --delete k …}. */
    private void alterConfigs() throws Exception {
        try (Admin admin = admin()) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, req("topic"));
            List<AlterConfigOp> ops = new ArrayList<>();
            for (String kv : all("set")) {
                int eq = kv.indexOf('=');
                ops.add(new AlterConfigOp(new ConfigEntry(kv.substring(0, eq), kv.substring(eq + 1)), AlterConfigOp.OpType.SET));
            }
            for (String k : all("delete")) {
                ops.add(new AlterConfigOp(new ConfigEntry(k, null), AlterConfigOp.OpType.DELETE));
            }
            admin.incrementalAlterConfigs(Map.of(r, ops)).all().get(60, TimeUnit.SECONDS);
        }
        System.out.println("ok");
    }

    /** Prints {@code config <name> <value> <source>} for every non-default entry, sorted. */
    private void describeConfigs() throws Exception {
        try (Admin admin = admin()) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, req("topic"));
            Config c = admin.describeConfigs(List.of(r)).all().get(60, TimeUnit.SECONDS).get(r);
            Map<String, ConfigEntry> sorted = new TreeMap<>();
            for (ConfigEntry e : c.entries()) {
                sorted.put(e.name(), e);
            }
            for (ConfigEntry e : sorted.values()) {
                if (e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG || flag("all")) {
                    System.out.println("config " + e.name() + " " + e.value() + " " + e.source());
                }
            }
        }
    }

    /**
     * {@code --principal User:x --resource-type topic|group|cluster
     * --resource-name N [--pattern literal|prefixed] --operation read|… [--deny]}.
     */
    private void createAcl() throws Exception {
        try (Admin admin = admin()) {
            ResourcePattern pattern = new ResourcePattern(ResourceType.fromString(req("resource-type").toUpperCase()),
                    req("resource-name"), PatternType.fromString(opt("pattern", "literal").toUpperCase()));
            AccessControlEntry entry = new AccessControlEntry(req("principal"), opt("host", "*"),
                    AclOperation.fromString(req("operation").toUpperCase()),
                    flag("deny") ? AclPermissionType.DENY : AclPermissionType.ALLOW);
            admin.createAcls(List.of(new AclBinding(pattern, entry))).all().get(60, TimeUnit.SECONDS);
        }
        System.out.println("ok");
    }

    /** {@code --topic T --partition P --before OFFSET}; prints {@code low <new log start>}. */
    private void deleteRecords() throws Exception {
        try (Admin admin = admin()) {
            TopicPartition tp = new TopicPartition(req("topic"), num("partition", 0));
            var result = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(Long.parseLong(req("before")))));
            System.out.println("low " + result.lowWatermarks().get(tp).get(60, TimeUnit.SECONDS).lowWatermark());
        }
    }

    /** {@code --topic T --partition P [--unclean]}: a preferred (or unclean) election. */
    private void electLeaders() throws Exception {
        try (Admin admin = admin()) {
            Set<TopicPartition> tps = new HashSet<>();
            tps.add(new TopicPartition(req("topic"), num("partition", 0)));
            var result = admin.electLeaders(flag("unclean") ? ElectionType.UNCLEAN : ElectionType.PREFERRED, tps);
            for (var e : result.partitions().get(60, TimeUnit.SECONDS).entrySet()) {
                System.out.println("elected " + e.getKey().partition() + " " + e.getValue().map(Throwable::toString).orElse("ok"));
            }
        }
    }

    /** {@code --group G --topic T --offset P=O …}: commits offsets as an inactive group (Admin). */
    private void commitOffsets() throws Exception {
        try (Admin admin = admin()) {
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (String po : all("offset")) {
                int eq = po.indexOf('=');
                offsets.put(new TopicPartition(req("topic"), Integer.parseInt(po.substring(0, eq))),
                        new OffsetAndMetadata(Long.parseLong(po.substring(eq + 1))));
            }
            admin.alterConsumerGroupOffsets(req("group"), offsets).all().get(60, TimeUnit.SECONDS);
        }
        System.out.println("ok");
    }
}
