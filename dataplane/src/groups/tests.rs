//! The group state machine without sockets: the time is passed in, and
//! waiting replies are read from their channels as soon as they are sent.

use super::*;

const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;

fn coordinator(dir: &Path) -> GroupCoordinator {
    GroupCoordinator::open(dir, 0, GroupConfig::default()).unwrap()
}

fn join_request(member: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: member.into(),
        client_id: "client".into(),
        client_host: String::new(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("{member}:{p}"))))
            .collect(),
        require_known_member_id: true,
    }
}

/// A reply that is already there (sent now or before).
fn ready<T>(reply: &Reply<T>) -> Option<T> {
    match reply {
        Reply::Now(_) => panic!("expected a waiting reply"),
        Reply::Wait(rx, _) => rx.try_recv().ok(),
    }
}

fn now_reply<T>(reply: Reply<T>) -> T {
    match reply {
        Reply::Now(t) => t,
        Reply::Wait(..) => panic!("expected an immediate reply"),
    }
}

/// v4+ first join: MEMBER_ID_REQUIRED with an id, then the join with it.
fn join_new(c: &mut GroupCoordinator, now: Instant) -> (String, Reply<JoinResult>) {
    let first = now_reply(c.join(join_request("", &["range"]), now));
    assert_eq!(first.error, MEMBER_ID_REQUIRED);
    assert!(first.member_id.starts_with("client-"), "{}", first.member_id);
    let id = first.member_id.clone();
    let reply = c.join(join_request(&id, &["range"]), now);
    (id, reply)
}

fn sync(
    c: &mut GroupCoordinator,
    member: &str,
    generation: i32,
    assignments: &[(&str, &str)],
    now: Instant,
) -> Reply<SyncResult> {
    c.sync(
        SyncRequest {
            group_id: "g".into(),
            generation,
            member_id: member.into(),
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: assignments
                .iter()
                .map(|(m, a)| (m.to_string(), Bytes::from(a.to_string())))
                .collect(),
        },
        now,
    )
}

/// The offset `group` has committed for `tp`, if any.
fn committed_offset(c: &GroupCoordinator, group: &str, tp: &(String, i32)) -> Option<i64> {
    c.committed(group, Some(std::slice::from_ref(tp)))[0]
        .1
        .as_ref()
        .map(|v| v.offset)
}

fn offset(o: i64) -> CommittedOffset {
    CommittedOffset {
        offset: o,
        leader_epoch: 2,
        metadata: "meta".into(),
        commit_timestamp: 1,
    }
}

/// One member, Stable at generation 1.
fn stable_single(c: &mut GroupCoordinator, now: Instant) -> String {
    let (a, reply) = join_new(c, now);
    let joined = ready(&reply).expect("a lone member completes the join at once");
    assert_eq!(
        (joined.error, joined.generation, joined.leader.as_str()),
        (NONE, 1, a.as_str())
    );
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(joined.members, vec![(a.clone(), Bytes::from(format!("{a}:range")))]);
    let synced = ready(&sync(c, &a, 1, &[(&a, "all")], now)).unwrap();
    assert_eq!((synced.error, &synced.assignment[..]), (NONE, &b"all"[..]));
    a
}

#[test]
fn join_sync_heartbeat_of_one_member() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let t0 = Instant::now();
    let a = stable_single(&mut c, t0);
    assert_eq!(c.heartbeat("g", &a, 1, t0), NONE);
    assert_eq!(c.describe("g").unwrap().state, GroupState::Stable);
    // A follower-less rejoin with the same metadata by the leader rebalances
    // (it may want to reassign); the generation moves on.
    let again = c.join(join_request(&a, &["range"]), t0);
    assert_eq!(ready(&again).unwrap().generation, 2);
}

#[test]
fn a_second_member_triggers_a_rebalance_and_followers_wait_for_the_leader() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let t0 = Instant::now();
    let a = stable_single(&mut c, t0);
    let (b, b_join) = join_new(&mut c, t0);
    assert!(ready(&b_join).is_none(), "waits for the known member to rejoin");
    assert_eq!(c.describe("g").unwrap().state, GroupState::PreparingRebalance);
    assert_eq!(c.heartbeat("g", &a, 1, t0), REBALANCE_IN_PROGRESS);
    let a_join = c.join(join_request(&a, &["range"]), t0);
    let (a_res, b_res) = (ready(&a_join).unwrap(), ready(&b_join).unwrap());
    assert_eq!((a_res.generation, b_res.generation), (2, 2));
    assert_eq!((a_res.leader.as_str(), b_res.leader.as_str()), (a.as_str(), a.as_str()));
    assert_eq!(a_res.members.len(), 2, "the leader gets every member's metadata");
    assert!(b_res.members.is_empty());
    // The follower's sync waits for the leader's assignments.
    let b_sync = sync(&mut c, &b, 2, &[], t0);
    assert!(ready(&b_sync).is_none());
    assert_eq!(c.heartbeat("g", &b, 2, t0), NONE);
    let a_sync = sync(&mut c, &a, 2, &[(&a, "p0"), (&b, "p1")], t0);
    assert_eq!(&ready(&a_sync).unwrap().assignment[..], b"p0");
    assert_eq!(&ready(&b_sync).unwrap().assignment[..], b"p1");
    let d = c.describe("g").unwrap();
    assert_eq!(
        (d.state, d.protocol_name.as_str(), d.members.len()),
        (GroupState::Stable, "range", 2)
    );
    // A stable follower rejoining with the same metadata: no rebalance.
    let b_again = now_reply(c.join(join_request(&b, &["range"]), t0));
    assert_eq!((b_again.error, b_again.generation), (NONE, 2));
    assert_eq!(c.describe("g").unwrap().state, GroupState::Stable);
}

#[test]
fn generation_and_member_checks() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let t0 = Instant::now();
    assert_eq!(c.heartbeat("g", "nobody", 1, t0), UNKNOWN_MEMBER_ID);
    assert_eq!(
        now_reply(c.join(join_request("ghost", &["range"]), t0)).error,
        UNKNOWN_MEMBER_ID
    );
    let a = stable_single(&mut c, t0);
    assert_eq!(c.heartbeat("g", &a, 0, t0), ILLEGAL_GENERATION);
    assert_eq!(c.heartbeat("g", "nobody", 1, t0), UNKNOWN_MEMBER_ID);
    assert_eq!(now_reply(sync(&mut c, &a, 7, &[], t0)).error, ILLEGAL_GENERATION);
    let tp = ("t".to_string(), 0);
    assert_eq!(
        c.commit("g", 0, &a, vec![(tp.clone(), offset(1))], t0),
        [ILLEGAL_GENERATION]
    );
    assert_eq!(
        c.commit("g", 1, "nobody", vec![(tp.clone(), offset(1))], t0),
        [UNKNOWN_MEMBER_ID]
    );
    // A simple commit is refused while the group has members.
    assert_eq!(
        c.commit("g", -1, "", vec![(tp.clone(), offset(1))], t0),
        [UNKNOWN_MEMBER_ID]
    );
    let mut meta = offset(5);
    meta.metadata = "x".repeat(store::METADATA_MAX_BYTES + 1);
    assert_eq!(
        c.commit("g", 1, &a, vec![(tp.clone(), offset(5)), (("t".into(), 1), meta)], t0),
        [NONE, OFFSET_METADATA_TOO_LARGE]
    );
    // A different protocol type, or no common protocol, does not fit.
    let mut other = join_request("", &["range"]);
    other.protocol_type = "connect".into();
    assert_eq!(now_reply(c.join(other, t0)).error, INCONSISTENT_GROUP_PROTOCOL);
    assert_eq!(
        now_reply(c.join(join_request("", &["roundrobin"]), t0)).error,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let mut short = join_request("", &["range"]);
    short.session_timeout_ms = 10;
    assert_eq!(now_reply(c.join(short, t0)).error, INVALID_SESSION_TIMEOUT);
    // Commits during CompletingRebalance are refused.
    let (b, _) = join_new(&mut c, t0);
    let a_join = c.join(join_request(&a, &["range"]), t0);
    assert_eq!(ready(&a_join).unwrap().generation, 2);
    assert_eq!(
        c.commit("g", 2, &b, vec![(tp.clone(), offset(9))], t0),
        [REBALANCE_IN_PROGRESS]
    );
    assert_eq!(committed_offset(&c, "g", &tp), Some(5));
}

#[test]
fn members_that_do_not_rejoin_are_dropped_at_the_rebalance_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let t0 = Instant::now();
    let a = stable_single(&mut c, t0);
    let (b, b_join) = join_new(&mut c, t0);
    // `a` keeps heartbeating but never rejoins.
    let mut t = t0;
    for _ in 0..5 {
        t += Duration::from_secs(5);
        assert_eq!(c.heartbeat("g", &a, 1, t), REBALANCE_IN_PROGRESS);
        c.tick(t);
    }
    assert!(ready(&b_join).is_none());
    assert_eq!(c.next_deadline(), Some(t0 + ms(REBALANCE_MS)));
    c.tick(t0 + ms(REBALANCE_MS));
    let joined = ready(&b_join).unwrap();
    assert_eq!((joined.generation, joined.leader.as_str()), (2, b.as_str()));
    assert_eq!(joined.members.len(), 1);
    assert_eq!(c.heartbeat("g", &a, 1, t), UNKNOWN_MEMBER_ID);
}

#[test]
fn silent_members_expire_and_the_last_leave_empties_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let t0 = Instant::now();
    let a = stable_single(&mut c, t0);
    let (b, b_join) = join_new(&mut c, t0);
    let a_join = c.join(join_request(&a, &["range"]), t0);
    assert!(ready(&a_join).is_some() && ready(&b_join).is_some());
    let b_sync = sync(&mut c, &b, 2, &[], t0);
    let _ = ready(&sync(&mut c, &a, 2, &[(&a, "x"), (&b, "y")], t0)).unwrap();
    assert!(ready(&b_sync).is_some());
    // Only `b` heartbeats; `a`'s session runs out.
    let half = t0 + ms(SESSION_MS / 2);
    assert_eq!(c.heartbeat("g", &b, 2, half), NONE);
    c.tick(t0 + ms(SESSION_MS));
    assert_eq!(c.describe("g").unwrap().state, GroupState::PreparingRebalance);
    assert_eq!(c.heartbeat("g", &b, 2, t0 + ms(SESSION_MS)), REBALANCE_IN_PROGRESS);
    assert_eq!(c.delete("g"), NON_EMPTY_GROUP);
    let b_join = c.join(join_request(&b, &["range"]), t0 + ms(SESSION_MS));
    assert_eq!(ready(&b_join).unwrap().generation, 3);
    // Batch leave: one known, one unknown.
    let codes = c.leave("g", &[b.clone(), "nobody".into()], t0 + ms(SESSION_MS));
    assert_eq!(codes, [NONE, UNKNOWN_MEMBER_ID]);
    // Nothing left and no offsets: the group is gone.
    assert!(c.describe("g").is_none());
    assert_eq!(c.delete("g"), GROUP_ID_NOT_FOUND);
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn an_unused_member_id_expires() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let t0 = Instant::now();
    let first = now_reply(c.join(join_request("", &["range"]), t0));
    assert_eq!(first.error, MEMBER_ID_REQUIRED);
    assert_eq!(c.list().len(), 1);
    c.tick(t0 + ms(SESSION_MS));
    assert!(c.list().is_empty());
    assert_eq!(
        now_reply(c.join(join_request(&first.member_id, &["range"]), t0)).error,
        UNKNOWN_MEMBER_ID
    );
}

#[test]
fn offsets_persist_and_deletion_is_for_empty_groups_only() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let tp = |p: i32| ("orders".to_string(), p);
    {
        let mut c = coordinator(dir.path());
        // A standalone consumer commits without a group.
        assert_eq!(
            c.commit("solo", -1, "", vec![(tp(0), offset(10)), (tp(1), offset(11))], t0),
            [NONE, NONE]
        );
        let a = stable_single(&mut c, t0);
        assert_eq!(c.commit("g", 1, &a, vec![(tp(0), offset(3))], t0), [NONE]);
        assert_eq!(c.delete("g"), NON_EMPTY_GROUP);
        assert_eq!(c.leave("g", &[a], t0), [NONE]);
        assert_eq!(
            c.describe("g").unwrap().state,
            GroupState::Empty,
            "kept: it has offsets"
        );
    }
    let mut c = coordinator(dir.path());
    let solo = c.committed("solo", None);
    assert_eq!(solo.len(), 2);
    assert_eq!(solo[1], (tp(1), Some(offset(11))));
    assert_eq!(
        c.committed("g", Some(&[tp(0), tp(5)])),
        [(tp(0), Some(offset(3))), (tp(5), None)]
    );
    let listed: Vec<_> = c.list().into_iter().map(|g| (g.group_id, g.state)).collect();
    assert_eq!(listed, [("g".into(), "Empty"), ("solo".into(), "Empty")]);
    assert_eq!(c.delete("g"), NONE);
    drop(c);
    let c = coordinator(dir.path());
    assert!(c.describe("g").is_none());
    assert!(c.committed("g", None).is_empty());
    assert_eq!(c.committed("solo", None).len(), 2);
}

#[test]
fn offsets_past_the_log_end_are_moved_back_to_it_durably() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let tp = |p: i32| ("orders".to_string(), p);
    {
        let mut c = coordinator(dir.path());
        assert_eq!(
            c.commit(
                "ahead",
                -1,
                "",
                vec![(tp(0), offset(1_000)), (tp(1), offset(2_000))],
                t0
            ),
            [NONE, NONE]
        );
        assert_eq!(c.commit("behind", -1, "", vec![(tp(0), offset(40))], t0), [NONE]);
        assert_eq!(c.commit("at-end", -1, "", vec![(tp(0), offset(50))], t0), [NONE]);
        assert_eq!(c.alter_share_offsets("share-ahead", vec![(tp(0), 70)], 1), Ok(()));
        assert_eq!(c.alter_share_offsets("share-behind", vec![(tp(0), 30)], 1), Ok(()));

        assert_eq!(c.clamp_offsets_to_log_end("orders", 0, 50, 9).unwrap(), 2);
        assert_eq!(
            c.clamp_offsets_to_log_end("orders", 0, 50, 10).unwrap(),
            0,
            "idempotent"
        );
    }
    // As stored: read back after a reopen.
    let c = coordinator(dir.path());
    let clamped = CommittedOffset {
        offset: 50,
        leader_epoch: -1,
        metadata: "meta".into(),
        commit_timestamp: 9,
    };
    assert_eq!(
        c.committed("ahead", None),
        [(tp(0), Some(clamped)), (tp(1), Some(offset(2_000)))],
        "only the ended partition moves"
    );
    assert_eq!(c.committed("behind", None), [(tp(0), Some(offset(40)))]);
    assert_eq!(c.committed("at-end", None), [(tp(0), Some(offset(50)))]);
    assert_eq!(starts(c.share_offsets("share-ahead", None)), [(tp(0), Some(50))]);
    assert_eq!(starts(c.share_offsets("share-behind", None)), [(tp(0), Some(30))]);
}

#[test]
fn group_placement_is_stable() {
    assert_eq!(group_shard("g", 1), 0);
    assert_eq!(group_shard("orders-consumers", 4), group_shard("orders-consumers", 4));
    let spread: std::collections::HashSet<usize> = (0..64).map(|i| group_shard(&format!("group-{i}"), 4)).collect();
    assert_eq!(spread.len(), 4);
}

// ---- share groups ----

fn tp(t: &str, p: i32) -> (String, i32) {
    (t.to_owned(), p)
}

/// (partition, start offset) of what `share_offsets` found.
fn starts(found: Vec<((String, i32), Option<ShareStartOffset>)>) -> Vec<((String, i32), Option<i64>)> {
    found.into_iter().map(|(k, v)| (k, v.map(|v| v.start_offset))).collect()
}

#[test]
fn alter_creates_a_share_group_and_describe_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    // Unknown: no error, nothing set (Kafka answers it with -1s).
    assert_eq!(starts(c.share_offsets("s", Some(&[tp("t", 0)]))), [(tp("t", 0), None)]);
    assert!(c.share_offsets("s", None).is_empty());
    assert_eq!(
        c.describe_share_group("s"),
        Err((GROUP_ID_NOT_FOUND, "Group s not found.".into()))
    );
    // Nothing to set creates nothing.
    assert_eq!(c.alter_share_offsets("s", Vec::new(), 1), Ok(()));
    assert!(c.list().is_empty());
    assert_eq!(
        c.alter_share_offsets("", vec![(tp("t", 0), 1)], 1),
        Err(INVALID_GROUP_ID)
    );

    assert_eq!(
        c.alter_share_offsets("s", vec![(tp("t", 0), 5), (tp("t", 1), 9)], 1),
        Ok(())
    );
    assert_eq!(c.alter_share_offsets("s", vec![(tp("t", 0), 7)], 2), Ok(()));
    assert_eq!(
        starts(c.share_offsets("s", Some(&[tp("t", 1), tp("t", 0), tp("t", 2)]))),
        [(tp("t", 1), Some(9)), (tp("t", 0), Some(7)), (tp("t", 2), None)],
        "in the order asked"
    );
    let all = c.share_offsets("s", None);
    assert_eq!(starts(all.clone()), [(tp("t", 0), Some(7)), (tp("t", 1), Some(9))]);
    assert_eq!(all[0].1.unwrap().leader_epoch, -1, "set by an alter: no leader epoch");
    assert_eq!(
        c.describe_share_group("s"),
        Ok(ShareGroupDescription {
            state: GroupState::Empty,
            group_epoch: 2
        }),
        "each alter bumps the epoch"
    );
    assert!(c.is_share_group("s") && !c.is_share_group("t"));
    assert!(c.describe("s").is_none(), "DescribeGroups: not a classic group");
}

#[test]
fn a_group_id_is_one_group_of_one_type() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let t0 = Instant::now();
    assert_eq!(c.commit("consumer", -1, "", vec![(tp("t", 0), offset(3))], t0), [NONE]);
    assert_eq!(c.alter_share_offsets("share", vec![(tp("t", 0), 4)], 1), Ok(()));

    // A share group's id is no consumer group's.
    assert_eq!(
        c.commit("share", -1, "", vec![(tp("t", 0), offset(1))], t0),
        [GROUP_ID_NOT_FOUND]
    );
    let mut join = join_request("", &["range"]);
    join.group_id = "share".into();
    let refused = now_reply(c.join(join, t0));
    assert_eq!(
        (refused.error, refused.member_id.as_str()),
        (INCONSISTENT_GROUP_PROTOCOL, "")
    );
    assert_eq!(c.heartbeat("share", "m", 1, t0), UNKNOWN_MEMBER_ID);
    assert_eq!(c.leave("share", &["m".into()], t0), [UNKNOWN_MEMBER_ID]);
    // A consumer group's id (offsets only, or members only) is no share group's.
    assert_eq!(
        c.alter_share_offsets("consumer", vec![(tp("t", 0), 1)], 1),
        Err(GROUP_ID_NOT_FOUND)
    );
    let a = stable_single(&mut c, t0);
    assert_eq!(
        c.alter_share_offsets("g", vec![(tp("t", 0), 1)], 1),
        Err(GROUP_ID_NOT_FOUND)
    );
    assert_eq!(
        c.delete_share_offsets("consumer", &["t".into()]),
        Err(GROUP_ID_NOT_FOUND)
    );
    assert_eq!(
        c.describe_share_group("consumer"),
        Err((GROUP_ID_NOT_FOUND, "Group consumer is not a share group.".into()))
    );
    assert!(
        c.share_offsets("consumer", None).is_empty(),
        "a consumer group has no start offsets"
    );
    // Each stays as it was.
    assert_eq!(c.committed("consumer", None), [(tp("t", 0), Some(offset(3)))]);
    assert_eq!(starts(c.share_offsets("share", None)), [(tp("t", 0), Some(4))]);
    assert!(c.describe("g").is_some() && !c.is_share_group("g"));
    assert_eq!(c.leave("g", &[a], t0), [NONE]);
}

#[test]
fn share_offsets_are_deleted_by_topic_and_the_group_by_delete_groups() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let set = vec![(tp("t", 0), 1), (tp("t", 1), 2), (tp("u", 0), 3)];
    assert_eq!(c.alter_share_offsets("s", set, 1), Ok(()));
    assert_eq!(c.delete_share_offsets("nobody", &["t".into()]), Err(GROUP_ID_NOT_FOUND));
    assert_eq!(c.delete_share_offsets("", &["t".into()]), Err(INVALID_GROUP_ID));
    assert_eq!(
        c.delete_share_offsets("s", &["t".into(), "v".into()]),
        Ok(vec!["t".to_owned()]),
        "only topics it held offsets of"
    );
    assert_eq!(starts(c.share_offsets("s", None)), [(tp("u", 0), Some(3))]);
    assert_eq!(c.delete_share_offsets("s", &["u".into()]), Ok(vec!["u".to_owned()]));
    // No start offsets left: still there, Empty (as in Kafka).
    assert!(c.share_offsets("s", None).is_empty());
    let listed: Vec<_> = c
        .list()
        .into_iter()
        .map(|g| (g.group_id, g.group_type, g.state))
        .collect();
    assert_eq!(listed, [("s".into(), GroupType::Share, "Empty")]);
    assert_eq!(c.delete("s"), NONE);
    assert!(c.list().is_empty());
    assert_eq!(c.delete("s"), GROUP_ID_NOT_FOUND);
    // The id is free for a consumer group now.
    assert_eq!(
        c.commit("s", -1, "", vec![(tp("t", 0), offset(1))], Instant::now()),
        [NONE]
    );
}

#[test]
fn share_groups_persist_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    {
        let mut c = coordinator(dir.path());
        assert_eq!(
            c.alter_share_offsets("s", vec![(tp("t", 0), 10), (tp("t", 1), 11)], 1),
            Ok(())
        );
        assert_eq!(c.alter_share_offsets("s", vec![(tp("t", 1), 12)], 2), Ok(()));
        assert_eq!(c.alter_share_offsets("gone", vec![(tp("t", 0), 1)], 1), Ok(()));
        assert_eq!(c.delete("gone"), NONE);
        assert_eq!(c.alter_share_offsets("emptied", vec![(tp("t", 0), 1)], 1), Ok(()));
        assert_eq!(
            c.delete_share_offsets("emptied", &["t".into()]),
            Ok(vec!["t".to_owned()])
        );
        assert_eq!(c.commit("c", -1, "", vec![(tp("t", 0), offset(5))], t0), [NONE]);
    }
    let mut c = coordinator(dir.path());
    assert_eq!(
        starts(c.share_offsets("s", None)),
        [(tp("t", 0), Some(10)), (tp("t", 1), Some(12))]
    );
    assert_eq!(c.describe_share_group("s").map(|d| d.group_epoch), Ok(2));
    assert!(!c.is_share_group("gone"));
    assert!(c.is_share_group("emptied") && c.share_offsets("emptied", None).is_empty());
    let listed: Vec<_> = c.list().into_iter().map(|g| (g.group_id, g.group_type)).collect();
    assert_eq!(
        listed,
        [
            ("c".into(), GroupType::Classic),
            ("emptied".into(), GroupType::Share),
            ("s".into(), GroupType::Share)
        ]
    );
    // Uniqueness holds after the reopen too.
    assert_eq!(
        c.alter_share_offsets("c", vec![(tp("t", 0), 1)], 3),
        Err(GROUP_ID_NOT_FOUND)
    );
    assert_eq!(
        c.commit("s", -1, "", vec![(tp("t", 0), offset(1))], t0),
        [GROUP_ID_NOT_FOUND]
    );
    // The logs, side by side: the consumer offsets one stays Kafka's format.
    let internal = dir.path().join(store::INTERNAL_DIR);
    assert!(internal.join("group-offsets-0").is_dir() && internal.join("share-group-offsets-0").is_dir());
}

#[test]
fn list_groups_filters_by_type_as_kafka() {
    use kafka_protocol::messages::ListGroupsRequest;
    use kafka_protocol::protocol::StrBytes;

    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let t0 = Instant::now();
    assert_eq!(c.commit("c", -1, "", vec![(tp("t", 0), offset(5))], t0), [NONE]);
    let _a = stable_single(&mut c, t0);
    assert_eq!(c.alter_share_offsets("s", vec![(tp("t", 0), 1)], 1), Ok(()));
    let list = |version: i16, types: &[&str], states: &[&str]| -> Vec<(String, String, String, String)> {
        let r = ListGroupsRequest::default()
            .with_types_filter(types.iter().map(|t| StrBytes::from_string(t.to_string())).collect())
            .with_states_filter(states.iter().map(|t| StrBytes::from_string(t.to_string())).collect());
        crate::kafka::groups::list_groups_response(version, &r, c.list())
            .groups
            .into_iter()
            .map(|g| {
                (
                    g.group_id.0.to_string(),
                    g.protocol_type.to_string(),
                    g.group_state.to_string(),
                    g.group_type.to_string(),
                )
            })
            .collect()
    };
    let row = |id: &str, protocol: &str, state: &str, group_type: &str| {
        (
            id.to_owned(),
            protocol.to_owned(),
            state.to_owned(),
            group_type.to_owned(),
        )
    };
    // No types filter: every type, share groups with protocol type "share".
    assert_eq!(
        list(5, &[], &[]),
        [
            row("c", "", "Empty", "classic"),
            row("g", "consumer", "Stable", "classic"),
            row("s", "share", "Empty", "share")
        ]
    );
    assert_eq!(
        list(4, &[], &[]).into_iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
        [
            ("c".into(), "".into()),
            ("g".into(), "consumer".into()),
            ("s".into(), "share".into())
        ],
        "before v5 (no types filter) Kafka lists every type too"
    );
    assert_eq!(list(5, &["Share"], &[]), [row("s", "share", "Empty", "share")]);
    assert_eq!(
        list(5, &["classic"], &[]).into_iter().map(|r| r.0).collect::<Vec<_>>(),
        ["c", "g"],
        "a filter without share never lists share groups"
    );
    assert!(list(5, &["consumer"], &[]).is_empty(), "no KIP-848 groups here");
    assert!(list(5, &["streams", "nonsense"], &[]).is_empty());
    assert_eq!(
        list(5, &["share", "classic"], &["empty"])
            .into_iter()
            .map(|r| r.0)
            .collect::<Vec<_>>(),
        ["c", "s"]
    );
    assert!(list(5, &["share"], &["Stable"]).is_empty());
}

#[test]
fn a_group_id_longer_than_a_kafka_string_is_refused_and_the_longest_one_kept() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let longest = "g".repeat(ringmirror_storage::limits::STRING_BYTES_MAX);
    let too_long = "g".repeat(40_000);
    let tp = ("t".to_string(), 0);
    {
        let mut c = coordinator(dir.path());
        // A flexible OffsetCommit's compact string can carry it; the record's
        // i16 length could not.
        assert_eq!(
            c.commit(&too_long, -1, "", vec![(tp.clone(), offset(7))], t0),
            [INVALID_GROUP_ID]
        );
        assert_eq!(
            c.alter_share_offsets(&too_long, vec![(tp.clone(), 1)], 1),
            Err(INVALID_GROUP_ID)
        );
        assert!(c.list().is_empty(), "nothing created: {:?}", c.list());
        assert_eq!(c.commit(&longest, -1, "", vec![(tp.clone(), offset(7))], t0), [NONE]);
    }
    // What was stored reads back whole after a reopen.
    let c = coordinator(dir.path());
    assert_eq!(c.committed(&longest, None), [(tp.clone(), Some(offset(7)))]);
    assert!(c.committed(&too_long, None).is_empty());
}

#[test]
fn transactional_offsets_wait_for_their_transaction_and_follow_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let tp = ("t".to_string(), 0);
    assert_eq!(c.txn_commit("g", 7, -1, "", vec![(tp.clone(), offset(5))]), [NONE]);
    assert_eq!(c.txn_commit("g", 8, -1, "", vec![(tp.clone(), offset(9))]), [NONE]);
    assert!(c.has_pending_txn_offset("g", &tp));
    assert_eq!(committed_offset(&c, "g", &tp), None, "pending, not committed");
    // Producer 8 aborts: its offset is dropped, 7's still pending.
    assert!(c.complete_txn_offsets(8, false));
    assert!(c.has_pending_txn_offset("g", &tp));
    assert!(c.complete_txn_offsets(7, true));
    assert!(!c.has_pending_txn_offset("g", &tp));
    assert_eq!(committed_offset(&c, "g", &tp), Some(5));
    // Persisted as any commit; the group is listed.
    drop(c);
    let c = coordinator(dir.path());
    assert_eq!(c.committed("g", Some(&[tp]))[0].1.as_ref().map(|v| v.offset), Some(5));
    assert!(c.list().iter().any(|g| g.group_id == "g"));
}

#[test]
fn a_transactional_commit_names_a_member_and_generation_the_group_knows() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let now = Instant::now();
    let member = stable_single(&mut c, now);
    let tp = ("t".to_string(), 0);
    assert_eq!(
        c.txn_commit("g", 1, 1, "stranger", vec![(tp.clone(), offset(1))]),
        [UNKNOWN_MEMBER_ID]
    );
    assert_eq!(
        c.txn_commit("g", 1, 99, &member, vec![(tp.clone(), offset(1))]),
        [ILLEGAL_GENERATION]
    );
    assert_eq!(c.txn_commit("g", 1, 1, &member, vec![(tp, offset(1))]), [NONE]);
}

#[test]
fn transactional_offsets_pending_at_a_restart_are_decided_by_the_marker_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let tp = ("t".to_string(), 0);
    let mut c = coordinator(dir.path());
    assert_eq!(c.txn_commit("g", 7, -1, "", vec![(tp.clone(), offset(5))]), [NONE]);
    assert_eq!(c.txn_commit("g", 8, -1, "", vec![(tp.clone(), offset(9))]), [NONE]);
    drop(c);

    let mut c = coordinator(dir.path());
    assert!(
        c.has_pending_txn_offset("g", &tp),
        "still pending: require_stable waits"
    );
    assert_eq!(committed_offset(&c, "g", &tp), None);
    // Producer 8's transaction was aborted (or timed out) meanwhile.
    assert!(c.complete_txn_offsets(8, false));
    assert!(c.has_pending_txn_offset("g", &tp));
    // Producer 7's COMMIT, re-sent by the transaction coordinator's reload.
    assert!(c.complete_txn_offsets(7, true));
    assert!(!c.has_pending_txn_offset("g", &tp));
    assert!(c.list().iter().any(|g| g.group_id == "g"));
    drop(c);

    let c = coordinator(dir.path());
    assert!(!c.has_pending_txn_offset("g", &tp));
    assert_eq!(committed_offset(&c, "g", &tp), Some(5));
}
