package ringmirror.kafka;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams application with exactly-once processing (the workload of
 * {@code tests/workloads/}) and the input it counts.
 *
 * <p>The application reads {@code --input} (keys {@code k<i>}, values
 * {@code w<i % words>}), groups the records by value — a repartition topic,
 * {@code <app-id>-by-word-repartition} — and counts them per word in a
 * state store whose changelog is {@code <app-id>-counts-changelog}; every
 * new count goes to {@code --output} (key: the word, value: the count as
 * Kafka's LongSerializer writes it). The record cache is off, so each input
 * record yields exactly one output record: over an input holding a word
 * {@code n} times, a run without duplicates or losses outputs that word
 * with the counts 1…n, each once — computable from the input alone.
 */
final class Streams {
    private Streams() {}

    /** The repartition topic's name inside the application's id. */
    static final String REPARTITION = "by-word";
    /** The state store's name, whose changelog is {@code <app-id>-counts-changelog}. */
    static final String STORE = "counts";

    /**
     * {@code streams-input --topic T --from A --to B --words W
     * [--interval-ms M]}: produces records {@code i} in [A, B) with an
     * idempotent producer (acks=all), key {@code k<i>}, value
     * {@code w<i % W>}, partitioned by key. Prints
     * {@code produced <partition> <offset> <i>} once each is acknowledged.
     * With {@code --interval-ms}, one record at a time, waiting for its
     * acknowledgement and then M ms: a stream a test can cut anywhere,
     * knowing which records the cluster acknowledged.
     */
    static void input(Driver d) throws Exception {
        Properties p = d.common();
        p.setProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.setProperty(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.setProperty(ProducerConfig.ACKS_CONFIG, "all");
        p.setProperty(ProducerConfig.LINGER_MS_CONFIG, "0");
        String topic = d.req("topic");
        int from = d.num("from", 0);
        int to = d.num("to", 100);
        int words = d.num("words", 7);
        int intervalMs = d.num("interval-ms", -1);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = from; i < to; i++) {
                Future<RecordMetadata> f = producer.send(new ProducerRecord<>(topic, "k" + i, "w" + (i % words)));
                if (intervalMs < 0) {
                    sent.add(f);
                    continue;
                }
                RecordMetadata m = f.get(60, TimeUnit.SECONDS);
                System.out.println("produced " + m.partition() + " " + m.offset() + " " + i);
                System.out.flush();
                Thread.sleep(intervalMs);
            }
            producer.flush();
            for (int i = 0; i < sent.size(); i++) {
                RecordMetadata m = sent.get(i).get(60, TimeUnit.SECONDS);
                System.out.println("produced " + m.partition() + " " + m.offset() + " " + (from + i));
            }
        }
    }

    /**
     * {@code streams-count --app-id A --input I --output O --state-dir D
     * [--commit-ms 100] [--record-delay-ms 0] [--idle-ms 0]}: runs the
     * application with {@code processing.guarantee=exactly_once_v2}.
     * Prints {@code state <S>} on every state change, {@code processed <key>}
     * for every input record the count step sees (also those of
     * transactions that end up aborted: progress, not output), and
     * {@code error <exception>} for an exception that stops it. With
     * {@code --record-delay-ms} each record is held that long (a run a test
     * can interrupt mid-stream). It stops (closing, which commits) after
     * {@code --idle-ms} without a record once it has processed one, or on
     * SIGTERM; exits 1 if Streams stopped on an error.
     */
    static void count(Driver d) throws Exception {
        Properties p = new Properties();
        p.setProperty(StreamsConfig.APPLICATION_ID_CONFIG, d.req("app-id"));
        p.setProperty(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.setProperty(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, d.opt("commit-ms", "100"));
        // No record cache: one output record per input record.
        p.setProperty(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.setProperty(StreamsConfig.STATE_DIR_CONFIG, d.req("state-dir"));
        p.setProperty(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        p.setProperty(StreamsConfig.REPLICATION_FACTOR_CONFIG, d.opt("replication", "-1"));
        // The bootstrap and any --prop last: they win over the defaults above.
        p.putAll(d.common());
        long delayMs = Long.parseLong(d.opt("record-delay-ms", "0"));
        long idleMs = Long.parseLong(d.opt("idle-ms", "0"));

        StreamsBuilder builder = new StreamsBuilder();
        AtomicLong lastRecordMs = new AtomicLong(0);
        builder.stream(d.req("input"), Consumed.with(Serdes.String(), Serdes.String()))
                .peek((key, word) -> {
                    System.out.println("processed " + key);
                    lastRecordMs.set(System.currentTimeMillis());
                    if (delayMs > 0) {
                        try {
                            Thread.sleep(delayMs);
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                    }
                })
                .groupBy((key, word) -> word, Grouped.with(REPARTITION, Serdes.String(), Serdes.String()))
                .count(Materialized.as(STORE))
                .toStream()
                .to(d.req("output"), Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch stopped = new CountDownLatch(1);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            failure.set(e);
            System.out.println("error " + chain(e));
            System.out.flush();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Thread hook = new Thread(() -> streams.close(Duration.ofSeconds(30)));
        Runtime.getRuntime().addShutdownHook(hook);
        streams.start();
        while (!stopped.await(100, TimeUnit.MILLISECONDS)) {
            long last = lastRecordMs.get();
            if (idleMs > 0 && last > 0 && System.currentTimeMillis() - last > idleMs) {
                streams.close(Duration.ofSeconds(60));
                break;
            }
        }
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException shuttingDown) {
            // SIGTERM: the hook is closing Streams already.
        }
        streams.close(Duration.ofSeconds(60));
        if (failure.get() != null) {
            throw new IllegalStateException("Kafka Streams stopped on an error", failure.get());
        }
    }

    /** An exception and its causes on one line: what a test reports first. */
    static String chain(Throwable e) {
        StringBuilder out = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (out.length() > 0) {
                out.append(" <- ");
            }
            out.append(t.getClass().getName()).append(": ").append(t.getMessage());
            if (t.getCause() == t) {
                break;
            }
        }
        return out.toString().replace('\n', ' ');
    }
}
