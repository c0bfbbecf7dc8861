package ringmirror.kafka;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * {@code group-member --group G --topic T [--protocol consumer|classic]
 * [--max N] [--idle-ms MS] [--timeout-ms MS]}: one member of a consumer
 * group (by default KIP-848's {@code group.protocol=consumer}), running
 * until SIGTERM, N records, or MS without a record once it holds
 * partitions, and never longer than {@code --timeout-ms} (120 s). It
 * commits what each poll returned before polling again, and on the way
 * out closes the consumer, which leaves the group.
 *
 * <p>Prints {@code assigned <p,p,…>} (its whole assignment, sorted, or
 * {@code -}) after every change, {@code record <partition> <offset> <key>}
 * per record, {@code committed <p>=<next offset>,…} per commit, and
 * {@code closed} once it has left.
 */
final class GroupMember {
    private GroupMember() {}

    static void run(Driver d) throws Exception {
        Properties p = d.common();
        p.setProperty(ConsumerConfig.GROUP_ID_CONFIG, d.req("group"));
        p.setProperty(ConsumerConfig.GROUP_PROTOCOL_CONFIG, d.opt("protocol", "consumer"));
        p.setProperty(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.setProperty(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.setProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.putAll(d.common());
        long max = Long.parseLong(d.opt("max", Long.toString(Long.MAX_VALUE)));
        long idleMs = Long.parseLong(d.opt("idle-ms", "0"));
        long deadline = System.currentTimeMillis() + Long.parseLong(d.opt("timeout-ms", "120000"));

        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p);
        AtomicBoolean stopping = new AtomicBoolean(false);
        CountDownLatch closed = new CountDownLatch(1);
        // SIGTERM: the loop ends after the poll in progress and its commit
        // (a wakeup could interrupt the commit, and the next member would
        // read those records again); the hook waits for the close.
        Thread hook = new Thread(() -> {
            stopping.set(true);
            try {
                closed.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Runtime.getRuntime().addShutdownHook(hook);
        TreeSet<Integer> assigned = new TreeSet<>();
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                partitions.forEach(tp -> assigned.remove(tp.partition()));
                sayAssigned(assigned);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                partitions.forEach(tp -> assigned.add(tp.partition()));
                sayAssigned(assigned);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                onPartitionsRevoked(partitions);
            }
        };
        long count = 0;
        try {
            consumer.subscribe(List.of(d.req("topic")), listener);
            long lastRecord = System.currentTimeMillis();
            while (!stopping.get() && count < max && System.currentTimeMillis() < deadline) {
                var records = consumer.poll(Duration.ofMillis(200));
                if (assigned.isEmpty()) {
                    lastRecord = System.currentTimeMillis();
                }
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    lastRecord = System.currentTimeMillis();
                    say("record " + r.partition() + " " + r.offset() + " "
                            + (r.key() == null ? "null" : new String(r.key(), StandardCharsets.UTF_8)));
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    if (++count >= max) {
                        break;
                    }
                }
                if (!next.isEmpty()) {
                    consumer.commitSync(next, Duration.ofSeconds(30));
                    TreeSet<String> shown = new TreeSet<>();
                    next.forEach((tp, o) -> shown.add(tp.partition() + "=" + o.offset()));
                    say("committed " + String.join(",", shown));
                }
                if (idleMs > 0 && System.currentTimeMillis() - lastRecord > idleMs) {
                    break;
                }
            }
        } finally {
            consumer.close(Duration.ofSeconds(30));
            say("closed");
            closed.countDown();
        }
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException shuttingDown) {
            // SIGTERM: the hook waits for the close above.
        }
    }

    private static void sayAssigned(TreeSet<Integer> assigned) {
        say("assigned " + (assigned.isEmpty() ? "-" : String.join(",", assigned.stream().map(String::valueOf).toList())));
    }

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
