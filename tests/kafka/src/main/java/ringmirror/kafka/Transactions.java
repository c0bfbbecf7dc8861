package ringmirror.kafka;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Transactional producers in the situations a transaction coordinator must
 * get right (the workloads of {@code tests/workloads/}): a zombie
 * fenced by a newer producer with its transactional id, a transaction the
 * coordinator aborts when it outlives {@code transaction.timeout.ms}, and a
 * transaction held open until the test says how to end it (across a
 * restart of the cluster under it). Every record goes to partition
 * {@code --partition} (0) of {@code --topic}; outcomes are printed, never
 * thrown, so a test reads what the producer saw.
 */
final class Transactions {
    private Transactions() {}

    /** Bounds every wait of these commands for the cluster. */
    private static final long WAIT_MS_MAX = 120_000;

    private static KafkaProducer<byte[], byte[]> producer(Driver d, String transactionalId, Properties overrides) {
        Properties p = d.common();
        p.setProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.setProperty(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.setProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.setProperty(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.putAll(overrides);
        return new KafkaProducer<>(p);
    }

    /** Sends {@code count} records keyed {@code <prefix><i>}; prints {@code sent <partition> <offset>} for each. */
    private static void send(Driver d, KafkaProducer<byte[], byte[]> producer, String prefix, int count) throws Exception {
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            byte[] key = (prefix + i).getBytes(StandardCharsets.UTF_8);
            sent.add(producer.send(new ProducerRecord<>(d.req("topic"), d.num("partition", 0), key, key)));
        }
        producer.flush();
        for (var f : sent) {
            RecordMetadata m = f.get(60, TimeUnit.SECONDS);
            say("sent " + m.partition() + " " + m.offset());
        }
    }

    /** A step that may throw. */
    private interface Step {
        void run() throws Exception;
    }

    /** Runs {@code step}; prints {@code ok}, or {@code <failed> <exception chain>} if it throws. */
    private static void end(Step step, String ok, String failed) {
        try {
            step.run();
            say(ok);
        } catch (Exception e) {
            say(failed + " " + Streams.chain(e));
        }
    }

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /**
     * {@code txn-zombie --topic T --transactional ID [--count N]}: producer
     * A begins a transaction and sends N records ({@code a<i>}); producer B
     * starts with the same transactional id — the coordinator bumps the
     * epoch, aborting A's transaction — sends N records ({@code b<i>}) and
     * commits; then A, the zombie, sends once more and tries to commit.
     * Prints {@code a-sent}, {@code b-committed}, then
     * {@code a-fenced <exception chain>} (or {@code a-committed}: wrong).
     */
    static void zombie(Driver d) throws Exception {
        String id = d.req("transactional");
        int count = d.num("count", 5);
        try (KafkaProducer<byte[], byte[]> a = producer(d, id, new Properties());
                KafkaProducer<byte[], byte[]> b = producer(d, id, new Properties())) {
            a.initTransactions();
            a.beginTransaction();
            send(d, a, "a", count);
            say("a-sent");
            b.initTransactions();
            b.beginTransaction();
            send(d, b, "b", count);
            b.commitTransaction();
            say("b-committed");
            end(() -> {
                send(d, a, "z", 1);
                a.commitTransaction();
            }, "a-committed", "a-fenced");
        }
    }

    /**
     * {@code txn-timeout --topic T --transactional ID --timeout-ms MS
     * [--count N]}: begins a transaction with {@code transaction.timeout.ms}
     * MS, sends N records and leaves it open; asks the coordinator
     * (DescribeTransactions) until it has ended it (no longer Ongoing or
     * preparing an end), prints {@code coordinator <state>}; then tries to
     * commit and prints {@code commit-failed <exception chain>} (or
     * {@code committed}: wrong).
     */
    static void timeout(Driver d) throws Exception {
        String id = d.req("transactional");
        Properties overrides = new Properties();
        overrides.setProperty(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, d.req("timeout-ms"));
        try (KafkaProducer<byte[], byte[]> producer = producer(d, id, overrides); Admin admin = Admin.create(d.common())) {
            producer.initTransactions();
            producer.beginTransaction();
            send(d, producer, "t", d.num("count", 5));
            say("sent-all");
            long deadline = System.currentTimeMillis() + WAIT_MS_MAX;
            TransactionState state;
            while (true) {
                TransactionDescription description =
                        admin.describeTransactions(List.of(id)).description(id).get(60, TimeUnit.SECONDS);
                state = description.state();
                boolean ended = state == TransactionState.COMPLETE_ABORT || state == TransactionState.COMPLETE_COMMIT
                        || state == TransactionState.EMPTY;
                if (ended || System.currentTimeMillis() > deadline) {
                    break;
                }
                Thread.sleep(100);
            }
            say("coordinator " + state);
            end(producer::commitTransaction, "committed", "commit-failed");
        }
    }

    /**
     * {@code txn-hold --topic T --transactional ID --go-file F [--count N]
     * [--outcome commit|abort] [--offsets-group G]}: begins a transaction,
     * sends N records ({@code h<i>}), with G commits offset N of T's
     * partition 0 for group G in it (sendOffsetsToTransaction, answered
     * before it returns), prints {@code holding}, and waits until the file F
     * exists (the test creates it — e.g. after restarting the cluster under
     * the open transaction); then commits (or aborts) and prints
     * {@code committed}/{@code aborted} or {@code failed <exception chain>}.
     */
    static void hold(Driver d) throws Exception {
        String id = d.req("transactional");
        Path go = Path.of(d.req("go-file"));
        Properties overrides = new Properties();
        // The producer outlives a restart of the cluster under it.
        overrides.setProperty(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(WAIT_MS_MAX));
        overrides.setProperty(ProducerConfig.MAX_BLOCK_MS_CONFIG, Long.toString(WAIT_MS_MAX));
        try (KafkaProducer<byte[], byte[]> producer = producer(d, id, overrides)) {
            producer.initTransactions();
            producer.beginTransaction();
            int count = d.num("count", 5);
            send(d, producer, "h", count);
            String group = d.opt("offsets-group", "");
            if (!group.isEmpty()) {
                producer.sendOffsetsToTransaction(
                    Map.of(new TopicPartition(d.req("topic"), 0), new OffsetAndMetadata(count)),
                    new ConsumerGroupMetadata(group));
            }
            say("holding");
            long deadline = System.currentTimeMillis() + WAIT_MS_MAX;
            while (!Files.exists(go)) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("no " + go + " within " + WAIT_MS_MAX + " ms");
                }
                Thread.sleep(50);
            }
            if (d.opt("outcome", "commit").equals("abort")) {
                end(producer::abortTransaction, "aborted", "failed");
            } else {
                end(producer::commitTransaction, "committed", "failed");
            }
        }
    }
}
