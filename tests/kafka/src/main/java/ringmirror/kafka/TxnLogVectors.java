package ringmirror.kafka;

import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Optional;
import java.util.Set;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.coordinator.transaction.TransactionLog;
import org.apache.kafka.coordinator.transaction.TransactionMetadata;
import org.apache.kafka.coordinator.transaction.TransactionState;
import org.apache.kafka.coordinator.transaction.TxnTransitMetadata;
import org.apache.kafka.coordinator.transaction.generated.TransactionLogValue;
import org.apache.kafka.server.common.TransactionVersion;

/**
 * Test vectors of the {@code __transaction_state} records, written by Kafka's
 * own classes ({@code TransactionMetadata} for the transitions,
 * {@code TransactionLog} for the bytes): a transactional id's life as the
 * transaction coordinator drives it under transaction version 1 (the steps
 * of {@code TransactionCoordinator}: InitProducerId, AddPartitionsToTxn,
 * EndTxn, the marker completion, fencing an ongoing transaction, KIP-360's
 * epoch bump and its retry, epoch exhaustion), then a few records only a
 * decoder meets (value version 0, a transaction version 2 client, the
 * NextProducerEpoch tag).
 *
 * <p>Output: one line per record, {@code <name> <key hex> <value hex>}
 * (value {@code null} for a tombstone). ringmirror's transaction
 * coordinator replays the same steps and compares its records with these.
 */
public final class TxnLogVectors {
    private static final HexFormat HEX = HexFormat.of();
    private static final int TIMEOUT_MS = 60_000;
    private static final long T0 = 1_700_000_000_000L;

    private TxnLogVectors() {
    }

    private static void print(String name, String transactionalId, TxnTransitMetadata transit, TransactionVersion level) {
        System.out.println(name + " " + HEX.formatHex(TransactionLog.keyToBytes(transactionalId)) + " "
            + HEX.formatHex(TransactionLog.valueToBytes(transit, level)));
    }

    /** Prepares, prints (at transaction version 1, as a 4.3 cluster writes) and completes one transition. */
    private static void step(String name, TransactionMetadata m, TxnTransitMetadata transit) {
        print(name, m.transactionalId(), transit, TransactionVersion.TV_1);
        m.completeTransitionTo(transit);
    }

    private static Set<TopicPartition> partitions(Object... topicAndPartition) {
        Set<TopicPartition> out = new HashSet<>();
        for (int i = 0; i < topicAndPartition.length; i += 2) {
            out.add(new TopicPartition((String) topicAndPartition[i], (Integer) topicAndPartition[i + 1]));
        }
        return out;
    }

    /** TransactionCoordinator's fence of an ongoing transaction (InitProducerId or a timeout), then its abort. */
    private static void fenceAndAbort(String name, TransactionMetadata m, long now) {
        TxnTransitMetadata fence = m.prepareFenceProducerEpoch();
        m.pendingState(Optional.empty());
        m.setProducerEpoch(fence.producerEpoch());
        m.setLastProducerEpoch((short) -1);
        step(name, m, m.prepareAbortOrCommit(TransactionState.PREPARE_ABORT, TransactionVersion.TV_0, -1L, now, false));
    }

    public static void main(String[] args) {
        TransactionMetadata a = new TransactionMetadata("txn-a", 1000L, -1L, -1L, (short) -1, (short) -1, TIMEOUT_MS,
            TransactionState.EMPTY, new HashSet<>(), -1L, T0, TransactionVersion.TV_0);
        step("init", a, a.prepareIncrementProducerEpoch(TIMEOUT_MS, Optional.empty(), T0 + 1));
        step("add-one", a, a.prepareAddPartitions(partitions("orders", 0), T0 + 2, TransactionVersion.TV_0));
        step("add-more", a, a.prepareAddPartitions(partitions("orders", 1, "payments", 0), T0 + 3, TransactionVersion.TV_0));
        step("prepare-commit", a, a.prepareAbortOrCommit(TransactionState.PREPARE_COMMIT, TransactionVersion.TV_0, -1L, T0 + 4, false));
        step("complete-commit", a, a.prepareComplete(T0 + 5));
        step("add-again", a, a.prepareAddPartitions(partitions("orders", 2), T0 + 6, TransactionVersion.TV_0));
        fenceAndAbort("fence-prepare-abort", a, T0 + 7);
        step("complete-abort", a, a.prepareComplete(T0 + 8));
        step("init-after-fence", a, a.prepareIncrementProducerEpoch(TIMEOUT_MS, Optional.empty(), T0 + 9));
        step("init-kip360-bump", a, a.prepareIncrementProducerEpoch(TIMEOUT_MS, Optional.of((short) 2), T0 + 10));
        step("init-kip360-retry", a, a.prepareIncrementProducerEpoch(TIMEOUT_MS, Optional.of((short) 2), T0 + 11));

        TransactionMetadata b = new TransactionMetadata("txn-b", 3000L, 3000L, -1L, (short) 32765, (short) -1, TIMEOUT_MS,
            TransactionState.COMPLETE_COMMIT, new HashSet<>(), T0, T0, TransactionVersion.TV_0);
        print("b-start", "txn-b", b.prepareNoTransit(), TransactionVersion.TV_1);
        step("b-init-last-epoch", b, b.prepareIncrementProducerEpoch(TIMEOUT_MS, Optional.empty(), T0 + 20));
        step("b-init-rotate", b, b.prepareProducerIdRotation(3001L, TIMEOUT_MS, T0 + 21, false));

        System.out.println("tombstone " + HEX.formatHex(TransactionLog.keyToBytes("txn-a")) + " null");

        // Only decoders meet these: value version 0 (transaction version 0),
        // a transaction version 2 client's epoch-bumping abort, a tag 3.
        TransactionMetadata c = new TransactionMetadata("txn-c", 4000L, -1L, -1L, (short) 7, (short) -1, TIMEOUT_MS,
            TransactionState.ONGOING, partitions("t", 3), T0, T0, TransactionVersion.TV_0);
        print("v0-ongoing", "txn-c", c.prepareNoTransit(), TransactionVersion.TV_0);
        print("v0-empty", "txn-c", new TxnTransitMetadata(4000L, 4000L, -1L, (short) 7, (short) -1, TIMEOUT_MS,
            TransactionState.EMPTY, new HashSet<>(), -1L, T0, TransactionVersion.TV_0), TransactionVersion.TV_0);
        print("tv2-prepare-abort", "txn-c",
            c.prepareAbortOrCommit(TransactionState.PREPARE_ABORT, TransactionVersion.TV_2, -1L, T0 + 30, false),
            TransactionVersion.TV_2);
        TransactionLogValue tagged = new TransactionLogValue()
            .setProducerId(5000L).setPreviousProducerId(4999L).setNextProducerId(5001L).setProducerEpoch((short) 3)
            .setNextProducerEpoch((short) 4).setTransactionTimeoutMs(TIMEOUT_MS)
            .setTransactionStatus(TransactionState.PREPARE_COMMIT.id())
            .setTransactionPartitions(List.of(new TransactionLogValue.PartitionsSchema().setTopic("t").setPartitionIds(List.of(9))))
            .setTransactionLastUpdateTimestampMs(T0 + 40).setTransactionStartTimestampMs(T0 + 39)
            .setClientTransactionVersion((short) 2);
        System.out.println("all-tags " + HEX.formatHex(TransactionLog.keyToBytes("txn-d")) + " "
            + HEX.formatHex(MessageUtil.toVersionPrefixedBytes((short) 1, tagged)));
    }
}
