//! The server-side partition assignors of KIP-848's consumer group protocol
//! (`group.remote.assignor` on the client): `uniform` (the default) and
//! `range`, after Kafka's `UniformAssignor` and `RangeAssignor`
//! (org.apache.kafka.coordinator.group.assignor). An assignor maps the
//! group's members and their subscribed topics to a target assignment; it
//! never looks at who owns a partition right now — handing a partition over
//! only after its old owner revoked it is reconciliation's job
//! ([`super::consumer_protocol`]).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// Partitions by topic id.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// Kafka's `UniformAssignor.NAME`: balanced and sticky.
pub const UNIFORM: &str = "uniform";
/// Kafka's `RangeAssignor.NAME`: contiguous ranges per topic.
pub const RANGE: &str = "range";
/// The assignors served, the default first (Kafka's
/// `group.consumer.assignors` default order).
pub const ASSIGNORS: [&str; 2] = [UNIFORM, RANGE];

/// What an assignor assigns from.
pub struct AssignmentSpec<'a> {
    /// Each member's subscribed topics (only topics that exist).
    pub subscriptions: &'a BTreeMap<String, BTreeSet<Uuid>>,
    /// Each subscribed topic's partition count.
    pub partition_counts: &'a BTreeMap<Uuid, i32>,
    /// The previous target assignment: `uniform` keeps what it can of it.
    pub previous: &'a BTreeMap<String, Assignment>,
}

/// The target assignment of `assignor` (one of [`ASSIGNORS`]; any other
/// name is refused before it gets here): every member, with what it gets.
pub fn assign(assignor: &str, spec: &AssignmentSpec<'_>) -> BTreeMap<String, Assignment> {
    debug_assert!(ASSIGNORS.contains(&assignor), "assignor {assignor} is not served");
    if assignor == RANGE { range(spec) } else { uniform(spec) }
}

/// The members subscribed to each topic.
fn subscribers<'a>(spec: &AssignmentSpec<'a>) -> BTreeMap<Uuid, Vec<&'a str>> {
    let mut by_topic: BTreeMap<Uuid, Vec<&str>> = BTreeMap::new();
    for (member, topics) in spec.subscriptions {
        for topic in topics.iter().filter(|t| spec.partition_counts.contains_key(t)) {
            by_topic.entry(*topic).or_default().push(member.as_str());
        }
    }
    by_topic
}

fn collect(owners: BTreeMap<(Uuid, i32), &str>, spec: &AssignmentSpec<'_>) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = spec
        .subscriptions
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    for ((topic, partition), member) in owners {
        let assignment = out.get_mut(member).expect("owners are members");
        assignment.entry(topic).or_default().insert(partition);
    }
    out
}

/// How many balancing passes the general uniform assignment makes at most:
/// each pass costs partitions × subscribers on the group's shard.
const BALANCING_PASSES_MAX: usize = 8;

/// Kafka's `UniformAssignor`, with its two builders: the same
/// subscriptions everywhere ([`uniform_same_subscriptions`]), or not
/// ([`uniform_general`]).
fn uniform(spec: &AssignmentSpec<'_>) -> BTreeMap<String, Assignment> {
    let mut subscribed = spec.subscriptions.values().map(|topics| {
        topics
            .iter()
            .filter(|t| spec.partition_counts.contains_key(t))
            .copied()
            .collect::<BTreeSet<Uuid>>()
    });
    let first = subscribed.next().unwrap_or_default();
    let owners = if subscribed.all(|topics| topics == first) {
        uniform_same_subscriptions(spec, &first)
    } else {
        uniform_general(spec)
    };
    collect(owners, spec)
}

/// Kafka's `OptimizedUniformAssignmentBuilder`: with `partitions` over
/// `members`, each member's quota is `partitions / members`, and the first
/// `partitions % members` to claim it one more. A member keeps what it had
/// up to its quota; the rest fill the members below theirs, in member id
/// order. Counts differ by at most one; the time is linear in the
/// partitions.
fn uniform_same_subscriptions<'a>(
    spec: &AssignmentSpec<'a>,
    topics: &BTreeSet<Uuid>,
) -> BTreeMap<(Uuid, i32), &'a str> {
    let members: Vec<&str> = spec.subscriptions.keys().map(String::as_str).collect();
    let partitions_of = |t: &Uuid| 0..spec.partition_counts[t].max(0);
    let total: usize = topics.iter().map(|t| partitions_of(t).len()).sum();
    let (quota, mut extra) = (total / members.len().max(1), total % members.len().max(1));
    let mut owners: BTreeMap<(Uuid, i32), &str> = BTreeMap::new();
    let mut counts: BTreeMap<&str, usize> = members.iter().map(|m| (*m, 0)).collect();
    for &member in &members {
        let Some(previous) = spec.previous.get(member) else {
            continue;
        };
        let kept = counts.get_mut(member).expect("a member");
        let had = previous
            .iter()
            .filter(|(t, _)| topics.contains(t))
            .flat_map(|(t, ps)| ps.iter().filter(|p| partitions_of(t).contains(p)).map(|p| (*t, *p)));
        for tp in had {
            if owners.contains_key(&tp) {
                continue;
            }
            if *kept < quota {
                owners.insert(tp, member);
                *kept += 1;
            } else if extra > 0 {
                owners.insert(tp, member);
                *kept += 1;
                extra -= 1;
                break;
            } else {
                break;
            }
        }
    }
    let mut free = topics
        .iter()
        .flat_map(|t| partitions_of(t).map(move |p| (*t, p)))
        .filter(|tp| !owners.contains_key(tp))
        .collect::<Vec<_>>()
        .into_iter();
    for &member in &members {
        while counts[member] < quota {
            owners.insert(free.next().expect("a free partition below quota"), member);
            *counts.get_mut(member).expect("a member") += 1;
        }
    }
    for &member in &members {
        if extra == 0 {
            break;
        }
        if counts[member] == quota {
            owners.insert(free.next().expect("a free partition for an extra"), member);
            extra -= 1;
        }
    }
    debug_assert!(free.next().is_none(), "every partition assigned");
    owners
}

/// Kafka's `GeneralUniformAssignmentBuilder`, for members subscribed to
/// different topics: a member keeps what it had; each other partition goes
/// to its subscriber with the fewest; then passes move a partition from
/// its owner to a subscriber holding two or more fewer, while any moves
/// (at most [`BALANCING_PASSES_MAX`] passes).
fn uniform_general<'a>(spec: &AssignmentSpec<'a>) -> BTreeMap<(Uuid, i32), &'a str> {
    let subscribers = subscribers(spec);
    let mut counts: BTreeMap<&str, usize> = spec.subscriptions.keys().map(|m| (m.as_str(), 0)).collect();
    let mut owners: BTreeMap<(Uuid, i32), &str> = BTreeMap::new();
    for (member, assignment) in spec.previous {
        let Some((member, topics)) = spec.subscriptions.get_key_value(member) else {
            continue;
        };
        for (topic, partitions) in assignment.iter().filter(|(t, _)| topics.contains(t)) {
            let Some(&count) = spec.partition_counts.get(topic) else {
                continue;
            };
            for &partition in partitions.iter().filter(|&&p| (0..count).contains(&p)) {
                if owners.insert((*topic, partition), member.as_str()).is_none() {
                    *counts.get_mut(member.as_str()).expect("a member") += 1;
                }
            }
        }
    }
    let fewest = |counts: &BTreeMap<&'a str, usize>, eligible: &[&'a str]| -> &'a str {
        eligible
            .iter()
            .copied()
            .min_by_key(|m| (counts[m], *m))
            .expect("a topic has subscribers")
    };
    for (topic, eligible) in &subscribers {
        for partition in 0..spec.partition_counts[topic] {
            if let std::collections::btree_map::Entry::Vacant(slot) = owners.entry((*topic, partition)) {
                let member = fewest(&counts, eligible);
                slot.insert(member);
                *counts.get_mut(member).expect("a member") += 1;
            }
        }
    }
    for _ in 0..BALANCING_PASSES_MAX {
        let mut moved = false;
        let partitions: Vec<(Uuid, i32)> = owners.keys().copied().collect();
        for tp in partitions {
            let owner = owners[&tp];
            let to = fewest(&counts, &subscribers[&tp.0]);
            if counts[owner] > counts[to] + 1 {
                *counts.get_mut(owner).expect("a member") -= 1;
                *counts.get_mut(to).expect("a member") += 1;
                owners.insert(tp, to);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    owners
}

/// Kafka's `RangeAssignor`: per topic, its subscribers in member id order
/// each get a contiguous range; the first `partitions % subscribers` one
/// partition more.
fn range(spec: &AssignmentSpec<'_>) -> BTreeMap<String, Assignment> {
    let mut owners: BTreeMap<(Uuid, i32), &str> = BTreeMap::new();
    for (topic, members) in subscribers(spec) {
        let count = spec.partition_counts[&topic].max(0) as usize;
        let (each, extra) = (count / members.len(), count % members.len());
        let mut next = 0;
        for (i, member) in members.into_iter().enumerate() {
            let take = each + usize::from(i < extra);
            for partition in next..next + take {
                owners.insert((topic, partition as i32), member);
            }
            next += take;
        }
    }
    collect(owners, spec)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn topic(n: u8) -> Uuid {
        Uuid::from_u128(u128::from(n) + 1)
    }

    prop_compose! {
        /// Up to 6 members, each subscribed to some of up to 4 topics of up
        /// to 12 partitions.
        fn group()(
            counts in proptest::collection::vec(0i32..12, 1..4),
            members in proptest::collection::btree_map("m[0-9]{1,2}", proptest::collection::btree_set(0u8..4, 1..4), 1..6),
        ) -> (BTreeMap<Uuid, i32>, BTreeMap<String, BTreeSet<Uuid>>) {
            let partition_counts = counts.iter().enumerate().map(|(i, c)| (topic(i as u8), *c)).collect();
            let subscriptions = members
                .into_iter()
                .map(|(m, ts)| (m, ts.into_iter().map(topic).collect()))
                .collect();
            (partition_counts, subscriptions)
        }
    }

    fn owners_of(target: &BTreeMap<String, Assignment>) -> BTreeMap<(Uuid, i32), Vec<&str>> {
        let mut owners: BTreeMap<(Uuid, i32), Vec<&str>> = BTreeMap::new();
        for (member, assignment) in target {
            for (topic, partitions) in assignment {
                for p in partitions {
                    owners.entry((*topic, *p)).or_default().push(member);
                }
            }
        }
        owners
    }

    /// Every partition of a topic someone subscribes to is assigned once,
    /// to a subscriber; nothing else is assigned.
    fn assert_complete(spec: &AssignmentSpec<'_>, target: &BTreeMap<String, Assignment>) {
        let owners = owners_of(target);
        let mut expected = 0;
        for (topic, count) in spec.partition_counts {
            if !spec.subscriptions.values().any(|ts| ts.contains(topic)) {
                continue;
            }
            for p in 0..*count {
                expected += 1;
                let who = &owners[&(*topic, p)];
                assert_eq!(who.len(), 1, "{topic} {p} owned by {who:?}");
                assert!(spec.subscriptions[who[0]].contains(topic));
            }
        }
        assert_eq!(owners.len(), expected);
        assert_eq!(
            target.keys().collect::<Vec<_>>(),
            spec.subscriptions.keys().collect::<Vec<_>>()
        );
    }

    fn total(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    proptest! {
        #[test]
        fn every_partition_is_assigned_once_to_a_subscriber((counts, subs) in group(), ranged in any::<bool>()) {
            let none = BTreeMap::new();
            let spec = AssignmentSpec { subscriptions: &subs, partition_counts: &counts, previous: &none };
            assert_complete(&spec, &assign(if ranged { RANGE } else { UNIFORM }, &spec));
        }

        #[test]
        fn same_subscriptions_are_balanced_within_one((counts, subs) in group(), ranged in any::<bool>()) {
            let all: BTreeSet<Uuid> = counts.keys().copied().collect();
            let subs: BTreeMap<String, BTreeSet<Uuid>> = subs.into_keys().map(|m| (m, all.clone())).collect();
            let none = BTreeMap::new();
            let spec = AssignmentSpec { subscriptions: &subs, partition_counts: &counts, previous: &none };
            let target = assign(if ranged { RANGE } else { UNIFORM }, &spec);
            if ranged {
                // Range balances each topic on its own.
                for topic in counts.keys() {
                    let per: Vec<usize> = target.values().map(|a| a.get(topic).map_or(0, BTreeSet::len)).collect();
                    prop_assert!(per.iter().max().unwrap() - per.iter().min().unwrap() <= 1);
                }
            } else {
                let per: Vec<usize> = target.values().map(total).collect();
                prop_assert!(per.iter().max().unwrap() - per.iter().min().unwrap() <= 1, "{:?}", per);
            }
        }

        /// Uniform is sticky: with the same subscriptions everywhere, when a
        /// member leaves the others keep all they had; assigning again from
        /// its own answer changes nothing.
        #[test]
        fn uniform_keeps_what_survivors_had((counts, subs) in group(), leaver in any::<prop::sample::Index>()) {
            let all: BTreeSet<Uuid> = counts.keys().copied().collect();
            let subs: BTreeMap<String, BTreeSet<Uuid>> = subs.into_keys().map(|m| (m, all.clone())).collect();
            let none = BTreeMap::new();
            let spec = AssignmentSpec { subscriptions: &subs, partition_counts: &counts, previous: &none };
            let before = assign(UNIFORM, &spec);
            let again = assign(UNIFORM, &AssignmentSpec { previous: &before, ..spec });
            prop_assert_eq!(&again, &before);
            let gone = leaver.get(&subs.keys().collect::<Vec<_>>()).to_string();
            let mut remaining = subs.clone();
            remaining.remove(&gone);
            prop_assume!(!remaining.is_empty());
            let after = assign(UNIFORM, &AssignmentSpec { subscriptions: &remaining, partition_counts: &counts, previous: &before });
            assert_complete(&AssignmentSpec { subscriptions: &remaining, partition_counts: &counts, previous: &before }, &after);
            for (member, had) in before.iter().filter(|(m, _)| **m != gone) {
                for (topic, partitions) in had {
                    let now = after[member].get(topic).cloned().unwrap_or_default();
                    prop_assert!(partitions.is_subset(&now), "{} lost part of {:?}", member, partitions);
                }
            }
        }
    }

    #[test]
    fn a_large_group_with_the_same_subscriptions_is_balanced_and_stays_put() {
        let topics: BTreeMap<Uuid, i32> = (0..10).map(|t| (topic(t), 100)).collect();
        let all: BTreeSet<Uuid> = topics.keys().copied().collect();
        let subs: BTreeMap<String, BTreeSet<Uuid>> = (0..300).map(|m| (format!("m{m:03}"), all.clone())).collect();
        let none = BTreeMap::new();
        let spec = AssignmentSpec {
            subscriptions: &subs,
            partition_counts: &topics,
            previous: &none,
        };
        let first = assign(UNIFORM, &spec);
        assert_complete(&spec, &first);
        let per: BTreeSet<usize> = first.values().map(total).collect();
        assert_eq!(per, BTreeSet::from([3, 4]));
        let mut grown = subs.clone();
        grown.insert("m999".into(), all.clone());
        let second = assign(
            UNIFORM,
            &AssignmentSpec {
                subscriptions: &grown,
                previous: &first,
                ..spec
            },
        );
        let moved: usize = first
            .iter()
            .map(|(m, had)| {
                had.iter()
                    .map(|(t, ps)| ps.difference(second[m].get(t).unwrap_or(&BTreeSet::new())).count())
                    .sum::<usize>()
            })
            .sum();
        assert_eq!(moved, total(&second["m999"]), "only what the new member gets moves");
    }

    #[test]
    fn range_gives_contiguous_ranges_first_members_one_more() {
        let t = topic(0);
        let subs: BTreeMap<String, BTreeSet<Uuid>> = ["a", "b", "c"]
            .iter()
            .map(|m| (m.to_string(), BTreeSet::from([t])))
            .collect();
        let counts = BTreeMap::from([(t, 7)]);
        let none = BTreeMap::new();
        let target = assign(
            RANGE,
            &AssignmentSpec {
                subscriptions: &subs,
                partition_counts: &counts,
                previous: &none,
            },
        );
        let of = |m: &str| target[m][&t].iter().copied().collect::<Vec<_>>();
        assert_eq!((of("a"), of("b"), of("c")), (vec![0, 1, 2], vec![3, 4], vec![5, 6]));
    }
}
