//! The assignor: given/when/then cases and properties over random groups.

use std::collections::{BTreeMap, BTreeSet};

use kmirror_events::assign::{assign, assign_weighted, reweighs, shares, MemberReport, Plan};
use proptest::prelude::*;

type Assignment = BTreeMap<String, BTreeSet<String>>;

fn units(n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("u-{i:03}")).collect()
}

fn member(id: &str, capacity: u32, owned: &BTreeSet<String>, generation: i32) -> MemberReport {
    MemberReport {
        member_id: id.into(),
        capacity,
        owned: owned.clone(),
        owned_generation: generation,
    }
}

/// Members that obey: each reports what the last plan gave it.
fn comply(members: &[MemberReport], plan: &Plan, generation: i32) -> Vec<MemberReport> {
    members
        .iter()
        .map(|m| {
            member(
                &m.member_id,
                m.capacity,
                &plan.assignment[&m.member_id],
                generation,
            )
        })
        .collect()
}

fn counts(plan: &Plan) -> Vec<usize> {
    plan.assignment.values().map(BTreeSet::len).collect()
}

fn moved(plan: &Plan) -> usize {
    plan.revoked.values().map(BTreeSet::len).sum()
}

#[test]
fn given_three_new_members_when_fifty_units_are_placed_then_17_17_16_at_once() {
    let none = BTreeSet::new();
    let ms = ["a", "b", "c"].map(|m| member(m, 1, &none, -1));
    let plan = assign(&ms, &units(50), &Assignment::new());
    assert_eq!(counts(&plan), vec![17, 17, 16]);
    assert!(!plan.revokes());
}

#[test]
fn given_one_owner_of_everything_when_two_join_then_it_revokes_first_and_they_get_work_next_round()
{
    let all = units(50);
    let none = BTreeSet::new();
    let ms = vec![
        member("a", 1, &all, 1),
        member("b", 1, &none, -1),
        member("c", 1, &none, -1),
    ];
    let first = assign(&ms, &all, &Assignment::new());
    // Round 1: a keeps its quota; nothing goes to b or c while a reports it.
    assert_eq!(counts(&first), vec![17, 0, 0]);
    assert_eq!(first.revoked["a"].len(), 33);
    let second = assign(&comply(&ms, &first, 2), &all, &first.assignment);
    assert_eq!(counts(&second), vec![17, 17, 16]);
    assert!(!second.revokes());
    assert!(first.assignment["a"].is_subset(&second.assignment["a"]));
}

#[test]
fn given_a_departed_member_when_the_rest_rebalance_then_its_units_are_placed_at_once() {
    let all = units(50);
    let none = BTreeSet::new();
    let three = assign(
        &["a", "b", "c"].map(|m| member(m, 1, &none, -1)),
        &all,
        &Assignment::new(),
    );
    let survivors: Vec<MemberReport> = ["a", "b"]
        .iter()
        .map(|m| member(m, 1, &three.assignment[*m], 1))
        .collect();
    let plan = assign(&survivors, &all, &three.assignment);
    assert_eq!(counts(&plan), vec![25, 25]);
    assert!(!plan.revokes(), "nothing of a live member moves");
    for m in ["a", "b"] {
        assert!(three.assignment[m].is_subset(&plan.assignment[m]), "sticky");
    }
}

#[test]
fn given_a_member_that_rejoins_empty_when_two_rounds_pass_then_it_has_its_share_back() {
    let all = units(50);
    let none = BTreeSet::new();
    let two = assign(
        &["a", "b"].map(|m| member(m, 1, &none, -1)),
        &all,
        &Assignment::new(),
    );
    let ms = vec![
        member("a", 1, &two.assignment["a"], 1),
        member("b", 1, &two.assignment["b"], 1),
        member("z", 1, &none, -1),
    ];
    let first = assign(&ms, &all, &two.assignment);
    assert_eq!(moved(&first), 16, "25+25 → 17+17+16 moves 8+8");
    let second = assign(&comply(&ms, &first, 3), &all, &first.assignment);
    assert_eq!(counts(&second), vec![17, 17, 16]);
}

#[test]
fn given_capacities_1_and_3_when_40_units_are_placed_then_10_and_30() {
    let none = BTreeSet::new();
    let plan = assign(
        &[member("a", 1, &none, -1), member("b", 3, &none, -1)],
        &units(40),
        &Assignment::new(),
    );
    assert_eq!(counts(&plan), vec![10, 30]);
}

#[test]
fn given_two_members_reporting_one_unit_then_the_later_grant_keeps_it() {
    let one: BTreeSet<String> = ["u-000".to_string()].into();
    let plan = assign(
        &[member("a", 1, &one, 3), member("b", 1, &one, 5)],
        &one,
        &Assignment::new(),
    );
    assert_eq!(plan.assignment["b"], one);
    assert_eq!(plan.revoked["a"], one);
}

#[test]
fn given_a_unit_that_no_longer_exists_then_its_owner_releases_it() {
    let owned: BTreeSet<String> = ["gone".to_string(), "u-000".to_string()].into();
    let plan = assign(&[member("a", 1, &owned, 1)], &units(1), &Assignment::new());
    assert_eq!(plan.assignment["a"], units(1));
    assert_eq!(plan.revoked["a"], ["gone".to_string()].into());
}

/// The fewest units that must leave their owners for every member to end
/// within its share, by trying every way of handing out the rounding surplus.
fn minimal_moves(members: &[MemberReport], n: usize) -> usize {
    let caps = members
        .iter()
        .map(|m| (m.member_id.clone(), m.capacity))
        .collect();
    let shares: Vec<_> = shares(&caps, n).into_values().collect();
    let held: Vec<usize> = members.iter().map(|m| m.owned.len()).collect();
    let surplus = n - shares.iter().map(|s| s.floor).sum::<usize>();
    let open: Vec<usize> = (0..shares.len())
        .filter(|&i| shares[i].ceil > shares[i].floor)
        .collect();
    let mut best = usize::MAX;
    for mask in 0u32..(1 << open.len()) {
        if mask.count_ones() as usize != surplus {
            continue;
        }
        let cost = (0..shares.len())
            .map(|i| {
                let extra = open
                    .iter()
                    .position(|&j| j == i)
                    .is_some_and(|k| mask & (1 << k) != 0);
                held[i].saturating_sub(shares[i].floor + usize::from(extra))
            })
            .sum();
        best = best.min(cost);
    }
    if best == usize::MAX {
        // No capacity at all: every share is 0, and everything moves.
        best = (0..shares.len())
            .map(|i| held[i].saturating_sub(shares[i].floor))
            .sum();
    }
    best
}

/// A group of 1..=5 members whose units are a disjoint random split of
/// `0..n` (some unowned), with random capacities.
fn group() -> impl Strategy<Value = (Vec<MemberReport>, usize)> {
    (1usize..=5, 0usize..60).prop_flat_map(|(members, n)| {
        (
            prop::collection::vec(0u32..4, members),
            prop::collection::vec(0usize..=members, n),
        )
            .prop_map(move |(caps, owner_of)| {
                let all: Vec<String> = units(n).into_iter().collect();
                let ms = caps
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| {
                        let owned = (0..n)
                            .filter(|&u| owner_of[u] == i)
                            .map(|u| all[u].clone())
                            .collect();
                        member(&format!("m{i}"), c, &owned, 1)
                    })
                    .collect();
                (ms, n)
            })
    })
}

/// `ms` with conflicting reports too: units `extra` names claimed by a
/// second member.
fn conflicting(mut ms: Vec<MemberReport>, extra: &[(usize, usize)]) -> Vec<MemberReport> {
    let len = ms.len();
    for (m, u) in extra {
        ms[m % len].owned.insert(format!("u-{u:03}"));
    }
    ms
}

/// Every unit `plan` gives is `known`, given once, and not to a member
/// while another still reports it.
fn one_owner_each(
    ms: &[MemberReport],
    plan: &Plan,
    known: impl Fn(&str) -> bool,
) -> Result<(), TestCaseError> {
    let mut seen = BTreeSet::new();
    for (m, a) in &plan.assignment {
        for u in a {
            prop_assert!(known(u));
            prop_assert!(seen.insert(u.clone()), "{u} twice");
            let mine = ms.iter().any(|r| &r.member_id == m && r.owned.contains(u));
            let others = ms.iter().any(|r| &r.member_id != m && r.owned.contains(u));
            prop_assert!(mine || !others, "{u} to {m} while another reports it");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No unit is given twice, nor to a member while another still reports it.
    #[test]
    fn a_unit_has_one_owner_and_never_two_at_once(
        (ms, n) in group(),
        extra in prop::collection::vec((0usize..5, 0usize..60), 0..10),
    ) {
        let ms = conflicting(ms, &extra);
        let all = units(n);
        let plan = assign(&ms, &all, &Assignment::new());
        one_owner_each(&ms, &plan, |u| all.contains(u))?;
    }

    /// Members that obey are balanced after two rounds, and a third changes
    /// nothing; a member within its floor loses nothing (sticky); only the
    /// fewest possible units are revoked.
    #[test]
    fn balanced_within_two_rounds_sticky_and_minimal((ms, n) in group()) {
        let all = units(n);
        let first = assign(&ms, &all, &Assignment::new());
        let caps = ms.iter().map(|m| (m.member_id.clone(), m.capacity)).collect();
        let shares = shares(&caps, n);
        for m in &ms {
            if m.owned.len() <= shares[&m.member_id].floor {
                prop_assert!(m.owned.is_subset(&first.assignment[&m.member_id]), "sticky");
            }
        }
        prop_assert_eq!(moved(&first), minimal_moves(&ms, n));
        let second = assign(&comply(&ms, &first, 2), &all, &first.assignment);
        prop_assert!(!second.revokes(), "round 2 revokes nothing");
        let total_capacity: u32 = ms.iter().map(|m| m.capacity).sum();
        let placed: usize = counts(&second).iter().sum();
        prop_assert_eq!(placed, if total_capacity == 0 { 0 } else { n });
        for (m, a) in &second.assignment {
            let s = shares[m];
            prop_assert!(s.floor <= a.len() && a.len() <= s.ceil, "{} holds {} of [{}, {}]", m, a.len(), s.floor, s.ceil);
        }
        let third = assign(&comply(&ms, &second, 3), &all, &second.assignment);
        prop_assert_eq!(third, second);
    }
}

/// Each member's total weight in `plan`.
fn loads(plan: &Plan, weights: &BTreeMap<String, u64>) -> Vec<u64> {
    plan.assignment
        .values()
        .map(|a| a.iter().map(|u| weights[u]).sum())
        .collect()
}

/// 50 shards of weight 1, and 24 partitions (weight 16 each) hashed into
/// ten of them unevenly: what a spread mirror leaves behind.
fn uneven() -> BTreeMap<String, u64> {
    let mut weights: BTreeMap<String, u64> = units(50).into_iter().map(|u| (u, 1)).collect();
    for (i, n) in [6, 1, 0, 4, 2, 0, 5, 3, 2, 1].into_iter().enumerate() {
        *weights.get_mut(&format!("u-{i:03}")).unwrap() += 16 * n;
    }
    weights
}

#[test]
fn given_shards_holding_partitions_unevenly_when_three_members_share_them_then_each_ends_within_one_shard_of_its_share(
) {
    let weights = uneven();
    let none = BTreeSet::new();
    let ms = ["a", "b", "c"].map(|m| member(m, 1, &none, -1));
    let plan = assign_weighted(&ms, &weights, &Assignment::new());
    assert!(!plan.revokes());
    // 434 in all: 144.7 each; none is off by more than its lightest unit.
    let loads = loads(&plan, &weights);
    assert_eq!(loads.iter().sum::<u64>(), 434);
    assert!(loads.iter().all(|&l| (144..=146).contains(&l)), "{loads:?}");
}

#[test]
fn given_a_count_balanced_group_when_its_shards_fill_unevenly_then_weight_moves_and_settles() {
    let all = units(50);
    let none = BTreeSet::new();
    let ms = ["a", "b", "c"].map(|m| member(m, 1, &none, -1));
    let by_count = assign(&ms, &all, &Assignment::new());
    let weights = uneven();
    let before = loads(&by_count, &weights);
    let ms = comply(&ms, &by_count, 1);
    let first = assign_weighted(&ms, &weights, &by_count.assignment);
    assert!(first.revokes(), "{before:?} is not balanced");
    let second = assign_weighted(&comply(&ms, &first, 2), &weights, &first.assignment);
    assert!(!second.revokes());
    let after = loads(&second, &weights);
    assert!(
        after.iter().max().unwrap() - after.iter().min().unwrap()
            < before.iter().max().unwrap() - before.iter().min().unwrap(),
        "{before:?} → {after:?}"
    );
    let third = assign_weighted(&comply(&ms, &second, 3), &weights, &second.assignment);
    assert_eq!(third, second, "settled");
}

#[test]
fn given_equal_weights_then_the_weighted_assignor_is_the_counting_one() {
    let none = BTreeSet::new();
    let ms = ["a", "b", "c"].map(|m| member(m, 1, &none, -1));
    let weights = units(50).into_iter().map(|u| (u, 7)).collect();
    assert_eq!(
        assign_weighted(&ms, &weights, &Assignment::new()),
        assign(&ms, &units(50), &Assignment::new())
    );
}

/// Random weights, mostly light with some heavy units, for `group()`'s units.
fn weights_of(n: usize) -> impl Strategy<Value = BTreeMap<String, u64>> {
    prop::collection::vec(prop_oneof![3 => Just(1u64), 1 => 1u64..100], n)
        .prop_map(|ws| units(ws.len()).into_iter().zip(ws).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Weighted: one owner at a time; a member already within its share
    /// plus half its heaviest unit loses nothing; members that obey settle
    /// within three rounds, and then stay; with equal capacities each ends
    /// under its share plus its heaviest unit (what greedy placement,
    /// heaviest first, guarantees).
    #[test]
    fn weighted_one_owner_sticky_and_settling(
        ((ms, n), weights) in group().prop_flat_map(|(ms, n)| (Just((ms, n)), weights_of(n))),
        extra in prop::collection::vec((0usize..5, 0usize..60), 0..10),
        equal in any::<bool>(),
    ) {
        let mut ms = ms;
        for m in ms.iter_mut().filter(|_| equal) {
            m.capacity = 1;
        }
        let total: u64 = weights.values().sum();
        let capacity: u64 = ms.iter().map(|m| u64::from(m.capacity)).sum();
        let share = |m: &MemberReport| total as f64 * f64::from(m.capacity) / capacity as f64;
        let load = |units: &BTreeSet<String>| units.iter().map(|u| weights[u]).sum::<u64>();
        let heaviest = |units: &BTreeSet<String>| units.iter().map(|u| weights[u]).max().unwrap_or(0);
        // Equal weights are the counting assignor's, sticky by its quotas.
        let uniform = weights.values().all(|w| Some(w) == weights.values().next());
        let first = assign_weighted(&ms, &weights, &Assignment::new());
        for m in ms.iter().filter(|m| !uniform && m.capacity > 0) {
            if load(&m.owned) as f64 - heaviest(&m.owned) as f64 / 2.0 <= share(m) + 1e-9 {
                prop_assert!(m.owned.is_subset(&first.assignment[&m.member_id]), "sticky");
            }
        }
        let claimed = conflicting(ms.clone(), &extra);
        let plan = assign_weighted(&claimed, &weights, &Assignment::new());
        one_owner_each(&claimed, &plan, |u| weights.contains_key(u))?;

        let mut plan = assign_weighted(&ms, &weights, &Assignment::new());
        let mut round = 1;
        while plan.revokes() {
            prop_assert!(round < 3, "still revoking in round {}", round + 1);
            round += 1;
            plan = assign_weighted(&comply(&ms, &plan, round), &weights, &plan.assignment);
        }
        let again = assign_weighted(&comply(&ms, &plan, round + 1), &weights, &plan.assignment);
        prop_assert_eq!(&again, &plan);
        let placed: usize = plan.assignment.values().map(BTreeSet::len).sum();
        prop_assert_eq!(placed, if capacity == 0 { 0 } else { n });
        for m in ms.iter().filter(|m| m.capacity == 0) {
            prop_assert!(plan.assignment[&m.member_id].is_empty(), "a drained member holds nothing");
        }
        if equal {
            for m in &ms {
                let a = &plan.assignment[&m.member_id];
                prop_assert!(a.is_empty() || ((load(a) - heaviest(a)) as f64) < share(m),
                    "{} holds {} (heaviest {}) of a share of {}", m.member_id, load(a), heaviest(a), share(m));
            }
        }
    }
}

#[test]
fn given_a_settled_group_when_its_units_fill_unevenly_then_the_leader_is_told_to_reweigh_and_after_that_not(
) {
    let all = units(50);
    let none = BTreeSet::new();
    let ms = ["a", "b", "c"].map(|m| member(m, 1, &none, -1));
    let settled = assign(&ms, &all, &Assignment::new());
    let alike = all.iter().map(|u| (u.clone(), 1)).collect();
    assert!(!reweighs(&ms, &settled.assignment, &alike));
    let weights = uneven();
    assert!(reweighs(&ms, &settled.assignment, &weights));
    let first = assign_weighted(&comply(&ms, &settled, 1), &weights, &settled.assignment);
    let second = assign_weighted(&comply(&ms, &first, 2), &weights, &first.assignment);
    assert!(!reweighs(&ms, &second.assignment, &weights));
}
