//! Transactions at the agent (issue 17 item 1), with Kafka's own Java
//! client and tool against a plain agent's local topics: the transaction
//! scenarios of `tests/common/workloads.rs` (commit, abort, a zombie
//! fenced, a transaction the coordinator times out, one left open) show
//! what they show at Apache Kafka 4.3.1 — the READ_COMMITTED and
//! READ_UNCOMMITTED views, the producers' answers, `kafka-transactions
//! list` and `describe`. Kafka's answers come from the reference run of the
//! same scenarios (a KRaft cluster started once per test binary). Every
//! wait is bounded and waits on a condition.

mod common;

use common::kafka::driver;
use common::workloads::*;

#[test]
fn transaction_scenarios_at_the_agent_show_what_kafka_shows() {
    let _turn = one_at_a_time();
    let at_kafka = kafka_txn_view().clone();
    let dir = tempfile::tempdir().unwrap();
    let agent = ringmirror::agent::Agent::start(common::serving_config(&dir.path().join("data"), "")).expect("agent");
    let ours = agent.listener_addr().expect("listening").to_string();
    driver(
        "create-topic",
        &ours,
        &["--topic", "wl-txn-agent", "--partitions", "1", "--replication", "1"],
    );
    let mut here = transaction_scenarios(&ours, "wl-txn-agent", 0);
    // The late commit of the timed-out transaction is the one answer that
    // depends on the transaction version. The reference cluster finalizes
    // version 2, where the coordinator's fencing epoch counts as the
    // producer's next one and the commit meets CompleteAbort
    // (INVALID_TXN_STATE); the agent answers as Kafka at version 1
    // (`TransactionCoordinator.endTransactionWithTV1`: an epoch older than
    // the coordinator's is PRODUCER_FENCED). Either way the commit fails.
    assert_eq!(
        here.timed_out.1, "org.apache.kafka.common.errors.ProducerFencedException",
        "{here:#?}"
    );
    here.timed_out.1 = at_kafka.timed_out.1.clone();
    assert_eq!(here, at_kafka, "as at Kafka");
    agent.stop().expect("clean stop");
}
