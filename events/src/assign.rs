//! The assignor of the clustered daemon: which node owns which unit of work
//! (a state-topic partition, a mirror partition), decided by the group's
//! leader from what every member reported when it joined.
//!
//! Incremental cooperative, as Kafka Connect's (KIP-415): a unit that must
//! move away from a live member is first *revoked* — its owner gets an
//! assignment without it, releases it and rejoins — and is handed to its new
//! owner only in a later round, once no member reports it. Two nodes never
//! act on one unit because the leader said so at the same time. Units nobody
//! reports (new units, or those of departed members) are placed at once.
//!
//! Balanced by capacity, sticky (a unit stays with its owner while the owner
//! is within its quota) and minimal: only a member's units beyond its quota
//! move, and the rounding surplus goes to the members it saves a move for.
//! Deterministic: every input is sorted, so any leader decides the same.
//! Units may weigh differently (a shard, the partitions that run in it):
//! [`assign_weighted`] balances their weight the same way, by whole units.
//!
//! Membership is not a fence (a paused member keeps acting until it learns
//! it is out): callers fence the units themselves.

use std::collections::{BTreeMap, BTreeSet};

/// What one member reported when it joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberReport {
    /// The coordinator's member id.
    pub member_id: String,
    /// Relative weight: a member of capacity 2 gets twice the units of a
    /// member of capacity 1. 0 takes no units (a node being drained).
    pub capacity: u32,
    /// The units the member still acts on (it has not released them).
    pub owned: BTreeSet<String>,
    /// The generation in which the member was given `owned`; when two
    /// members report one unit, the later grant wins.
    pub owned_generation: i32,
}

/// The leader's decision for one generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Every member's assignment (empty ones included).
    pub assignment: BTreeMap<String, BTreeSet<String>>,
    /// Per member, what it reported and no longer gets: to release before
    /// rejoining. A non-empty set means another round follows.
    pub revoked: BTreeMap<String, BTreeSet<String>>,
}

impl Plan {
    /// Whether a member gives up units in this round (so a follow-up round
    /// must place them).
    pub fn revokes(&self) -> bool {
        self.revoked.values().any(|r| !r.is_empty())
    }
}

/// A member's fair share of `units`: `[floor, ceil]` of its capacity's
/// fraction of the total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// Fewest units it should hold when there are enough to go round.
    pub floor: usize,
    /// Most units it may hold.
    pub ceil: usize,
}

/// Each member's share of `units` units, by capacity. With a total capacity
/// of 0 every share is 0.
pub fn shares(capacities: &BTreeMap<String, u32>, units: usize) -> BTreeMap<String, Share> {
    let total: u64 = capacities.values().map(|&c| u64::from(c)).sum();
    capacities
        .iter()
        .map(|(m, &c)| {
            let scaled = units as u64 * u64::from(c);
            let share = match scaled.checked_div(total) {
                None => Share { floor: 0, ceil: 0 },
                Some(floor) => Share {
                    floor: floor as usize,
                    ceil: floor as usize + usize::from(!scaled.is_multiple_of(total)),
                },
            };
            (m.clone(), share)
        })
        .collect()
}

/// Each member's quota for this round: its floor, plus one for as many
/// members as the rounding leaves units over. The extra goes first to those
/// holding at least their ceiling (each such extra saves one move), then to
/// the largest fractional share, then by member id.
pub fn quotas(
    capacities: &BTreeMap<String, u32>,
    units: usize,
    held: &BTreeMap<String, usize>,
) -> BTreeMap<String, usize> {
    let shares = shares(capacities, units);
    let total: u64 = capacities.values().map(|&c| u64::from(c)).sum();
    let mut quotas: BTreeMap<String, usize> =
        shares.iter().map(|(m, s)| (m.clone(), s.floor)).collect();
    if total == 0 {
        return quotas;
    }
    let surplus = units - shares.values().map(|s| s.floor).sum::<usize>();
    let mut candidates: Vec<(&String, bool, u64)> = shares
        .iter()
        .filter(|(_, s)| s.ceil > s.floor)
        .map(|(m, s)| {
            let at_ceil = held.get(m).copied().unwrap_or(0) >= s.ceil;
            let remainder = (units as u64 * u64::from(capacities[m])) % total;
            (m, at_ceil, remainder)
        })
        .collect();
    candidates.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0)));
    for (m, _, _) in candidates.into_iter().take(surplus) {
        *quotas.get_mut(m).expect("a member") += 1;
    }
    quotas
}

/// Decides one generation. `previous` is the leader's last plan (empty on a
/// new leader); it breaks ties between two members reporting one unit in
/// the same generation.
pub fn assign(
    members: &[MemberReport],
    units: &BTreeSet<String>,
    previous: &BTreeMap<String, BTreeSet<String>>,
) -> Plan {
    let mut members: Vec<&MemberReport> = members.iter().collect();
    members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    let owner = owners(&members, units, previous);
    let mut valid: BTreeMap<&str, Vec<&str>> = members
        .iter()
        .map(|m| (m.member_id.as_str(), Vec::new()))
        .collect();
    for (u, m) in &owner {
        valid
            .get_mut(m.member_id.as_str())
            .expect("a member")
            .push(u);
    }

    let capacities = members
        .iter()
        .map(|m| (m.member_id.clone(), m.capacity))
        .collect();
    let held = valid
        .iter()
        .map(|(m, us)| (m.to_string(), us.len()))
        .collect();
    let quotas = quotas(&capacities, units.len(), &held);

    let mut assignment: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, us) in &valid {
        let keep = us.iter().take(quotas[*m]).map(|u| u.to_string());
        assignment.insert(m.to_string(), keep.collect());
    }
    // Units nobody reports go to the member furthest below its quota.
    for u in units.iter().filter(|u| !owner.contains_key(u.as_str())) {
        let neediest = assignment
            .iter()
            .map(|(m, a)| (quotas[m].saturating_sub(a.len()), m))
            .filter(|(deficit, _)| *deficit > 0)
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)))
            .map(|(_, m)| m.clone());
        if let Some(m) = neediest {
            assignment.get_mut(&m).expect("a member").insert(u.clone());
        }
    }
    plan(&members, assignment)
}

/// Who validly owns each unit among those `members` report: the latest
/// grant, then `previous` (the leader's last plan), then the smallest
/// member id. `members` sorted by id.
fn owners<'a>(
    members: &[&'a MemberReport],
    units: &BTreeSet<String>,
    previous: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeMap<&'a str, &'a MemberReport> {
    let mut owner: BTreeMap<&str, &MemberReport> = BTreeMap::new();
    for m in members {
        for u in m.owned.iter().filter(|u| units.contains(*u)) {
            let better = match owner.get(u.as_str()) {
                None => true,
                Some(o) => {
                    let was_previous = |r: &MemberReport| {
                        previous
                            .get(&r.member_id)
                            .is_some_and(|p| p.contains(u.as_str()))
                    };
                    (m.owned_generation, was_previous(m)) > (o.owned_generation, was_previous(o))
                }
            };
            if better {
                owner.insert(u.as_str(), m);
            }
        }
    }
    owner
}

/// The plan that gives `assignment`: each member revokes what it reported
/// and no longer gets.
fn plan(members: &[&MemberReport], assignment: BTreeMap<String, BTreeSet<String>>) -> Plan {
    let revoked = members
        .iter()
        .map(|m| {
            let kept = &assignment[&m.member_id];
            let gone = m.owned.difference(kept).cloned().collect();
            (m.member_id.clone(), gone)
        })
        .collect();
    Plan {
        assignment,
        revoked,
    }
}

/// [`assign`] for units of unequal weight (a shard's weight: the
/// partitions that run in it), balancing the members' total weight by
/// capacity instead of their unit count — what puts as many partitions of
/// a spread mirror on each node when they hash into shards unevenly. Equal
/// weights are [`assign`]'s exact quotas.
///
/// Incremental cooperative as [`assign`]: a unit leaves a live member only
/// by revocation, and is placed in the next round. Sticky: a member keeps
/// its units, lightest first, while each leaves it nearer its share of
/// the total weight than without it, so a member within its share plus
/// half its heaviest unit loses nothing. What is left (revoked and
/// unreported units) goes heaviest first to the member it leaves nearest
/// its share for its capacity (half the unit counted, as when keeping),
/// its present owner on a tie — counted there at once, even when it only
/// arrives next round, so the round plans its end state. Whole units
/// move, never swap: a member over its share by less than half a unit
/// stays so.
pub fn assign_weighted(
    members: &[MemberReport],
    weights: &BTreeMap<String, u64>,
    previous: &BTreeMap<String, BTreeSet<String>>,
) -> Plan {
    let units: BTreeSet<String> = weights.keys().cloned().collect();
    let weight = |u: &str| weights.get(u).copied().unwrap_or(1).max(1);
    let mut all = weights.values().map(|&w| w.max(1));
    let first = all.next();
    if all.all(|w| Some(w) == first) {
        return assign(members, &units, previous);
    }
    let mut members: Vec<&MemberReport> = members.iter().collect();
    members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    let owner = owners(&members, &units, previous);
    let total_weight: u128 = units.iter().map(|u| u128::from(weight(u))).sum();
    let total_capacity: u128 = members.iter().map(|m| u128::from(m.capacity)).sum();
    // Whether holding `w` more leaves `held` nearer its share (W * c / C)
    // than without: held + w - share <= share - held.
    let nearer = |held: u64, w: u64, m: &MemberReport| {
        u128::from(2 * held + w) * total_capacity <= 2 * total_weight * u128::from(m.capacity)
    };

    let mut assignment: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut load: BTreeMap<&str, u64> = BTreeMap::new();
    let mut left: Vec<&str> = units
        .iter()
        .map(String::as_str)
        .filter(|u| !owner.contains_key(u))
        .collect();
    for m in &members {
        let mut mine: Vec<&str> = owner
            .iter()
            .filter(|(_, o)| o.member_id == m.member_id)
            .map(|(u, _)| *u)
            .collect();
        mine.sort_by_key(|u| (weight(u), *u));
        let (mut held, mut kept) = (0u64, BTreeSet::new());
        for u in mine {
            if m.capacity > 0 && nearer(held, weight(u), m) {
                held += weight(u);
                kept.insert(u.to_string());
            } else {
                left.push(u);
            }
        }
        load.insert(&m.member_id, held);
        assignment.insert(m.member_id.clone(), kept);
    }
    left.sort_by(|a, b| weight(b).cmp(&weight(a)).then(a.cmp(b)));
    for u in left {
        let w = weight(u);
        let present = owner.get(u).map(|o| o.member_id.as_str());
        // Half of it counted, as a member keeps a unit: nearest its share.
        let ends = |m: &MemberReport| u128::from(2 * load[m.member_id.as_str()] + w);
        let best = members.iter().filter(|m| m.capacity > 0).min_by(|a, b| {
            (ends(a) * u128::from(b.capacity))
                .cmp(&(ends(b) * u128::from(a.capacity)))
                .then((present != Some(&a.member_id)).cmp(&(present != Some(&b.member_id))))
                .then(a.member_id.cmp(&b.member_id))
        });
        let Some(best) = best else { continue };
        *load.get_mut(best.member_id.as_str()).expect("a member") += w;
        if present.is_none_or(|p| p == best.member_id) {
            assignment
                .get_mut(&best.member_id)
                .expect("a member")
                .insert(u.to_string());
        }
    }
    plan(&members, assignment)
}

/// Whether [`assign_weighted`] would move units away from members that
/// hold what `assignment` gave them: the leader's cue to rebalance when the
/// weights shifted under a settled group (a mirror created, a topic
/// stopped), since no member joins or leaves to start one.
pub fn reweighs(
    members: &[MemberReport],
    assignment: &BTreeMap<String, BTreeSet<String>>,
    weights: &BTreeMap<String, u64>,
) -> bool {
    let held: Vec<MemberReport> = members
        .iter()
        .map(|m| MemberReport {
            owned: assignment.get(&m.member_id).cloned().unwrap_or_default(),
            ..m.clone()
        })
        .collect();
    assign_weighted(&held, weights, assignment).revokes()
}
