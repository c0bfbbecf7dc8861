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

/// Kafka's `UniformAssignor`: every partition of a subscribed topic goes to
/// one of its subscribers; a member keeps the partitions it had while that
/// stays balanced; the rest go to the subscriber with the fewest. Then
/// partitions move from a member to a subscriber holding two or more fewer
/// until none can — with the same subscriptions everywhere, the counts
/// then differ by at most one.
fn uniform(spec: &AssignmentSpec<'_>) -> BTreeMap<String, Assignment> {
    let subscribers = subscribers(spec);
    let mut counts: BTreeMap<&str, usize> = spec.subscriptions.keys().map(|m| (m.as_str(), 0)).collect();
    let mut owners: BTreeMap<(Uuid, i32), &str> = BTreeMap::new();
    for (member, assignment) in spec.previous {
        let Some((member, _)) = spec.subscriptions.get_key_value(member) else {
            continue;
        };
        for (topic, partitions) in assignment {
            let Some(&count) = spec.partition_counts.get(topic) else {
                continue;
            };
            if !spec.subscriptions[member].contains(topic) {
                continue;
            }
            for &partition in partitions.iter().filter(|&&p| (0..count).contains(&p)) {
                if owners.insert((*topic, partition), member.as_str()).is_none() {
                    *counts.get_mut(member.as_str()).expect("a member") += 1;
                }
            }
        }
    }
    let fewest = |counts: &BTreeMap<&str, usize>, eligible: &[&'_ str]| -> Option<String> {
        eligible
            .iter()
            .min_by_key(|m| (counts[**m], **m))
            .map(|m| (*m).to_owned())
    };
    for (topic, eligible) in &subscribers {
        for partition in 0..spec.partition_counts[topic] {
            if owners.contains_key(&(*topic, partition)) {
                continue;
            }
            let member = fewest(&counts, eligible).expect("a topic has subscribers");
            let (member, count) = counts
                .get_key_value(member.as_str())
                .map(|(m, c)| (*m, *c))
                .expect("a member");
            counts.insert(member, count + 1);
            owners.insert((*topic, partition), member);
        }
    }
    // Each move lowers the sum of squared counts, so this ends; the bound
    // is for the reader.
    let moves_max = owners.len() * spec.subscriptions.len().max(1);
    for _ in 0..moves_max {
        let movable = owners.iter().find_map(|(&(topic, partition), &owner)| {
            let to = fewest(&counts, &subscribers[&topic])?;
            (counts[owner] > counts[to.as_str()] + 1).then_some(((topic, partition), owner, to))
        });
        let Some((tp, from, to)) = movable else { break };
        let (to, _) = counts
            .get_key_value(to.as_str())
            .map(|(m, c)| (*m, *c))
            .expect("a member");
        *counts.get_mut(from).expect("a member") -= 1;
        *counts.get_mut(to).expect("a member") += 1;
        owners.insert(tp, to);
    }
    collect(owners, spec)
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
