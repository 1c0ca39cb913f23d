//! Flow control's choice of jobs for a key-limited or fair claim, for a
//! store that makes it outside SQL (SQLite; PostgreSQL's `CLAIM_BY_KEY`
//! states the same rule in its statement).
//!
//! The claim reads the head of each group's ready jobs — a group is a
//! `concurrency_key`, and jobs without a key form one more group — at most
//! [`group_cap`] of them, and takes `room` of those heads in [`claim_order`].
//! The walk over the keys visits at most [`walk_len`] of them, in turn.
//! A claim that is not fair first tries the queue's first ready jobs
//! ([`from_window`]), which spares it the walk over the keys when the
//! backlog mixes them.

use std::cmp::Ordering;
use std::collections::HashMap;

/// How many keys one claim's walk visits at most: twice its room, and at
/// least 256. A queue may hold jobs of millions of keys; a walk over all of
/// them would hold the queue's turn (and, on SQLite, the single writer)
/// for seconds. The walk starts after the key where the queue's previous
/// walk stopped and wraps around, so successive claims visit every key in
/// turn (see [`crate::LimitedQueues::walk_from`]).
pub fn walk_len(room: u32) -> u32 {
    room.saturating_mul(2).max(256)
}

/// A ready job at the head of its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head<Id> {
    /// The job.
    pub id: Id,
    /// Its concurrency key (`None`: the group of jobs without one).
    pub key: Option<String>,
    /// Its priority.
    pub priority: i16,
    /// Its `run_at`, in any unit that orders instants.
    pub run_at: i64,
}

/// How many heads a group may give: what its key's limit leaves
/// (`key_max_running` minus the key's running jobs; jobs without a key are
/// not limited by it), and no more than an equal share of the claim's room
/// over the `groups` groups when `fair`.
pub fn group_cap(room: u32, fair: bool, groups: usize, key_room: Option<u32>) -> u32 {
    let share = if fair {
        room.div_ceil(groups.max(1) as u32)
    } else {
        room
    };
    key_room.map_or(share, |k| share.min(k))
}

/// The heads a claim with `room` takes, in the order it takes them:
/// higher priority first; then, when `fair`, round-robin over the groups
/// (every group's i-th job of a priority before any group's (i+1)-th,
/// groups in the order of their oldest such job); then `run_at` and id.
pub fn claim_order<Id: Ord + Clone>(heads: Vec<Head<Id>>, fair: bool, room: usize) -> Vec<Id> {
    // The rank of each head within its (group, priority), and its group's
    // oldest `run_at` at that priority.
    let mut by_group: HashMap<(Option<String>, i16), Vec<usize>> = HashMap::new();
    for (i, h) in heads.iter().enumerate() {
        by_group
            .entry((h.key.clone(), h.priority))
            .or_default()
            .push(i);
    }
    let mut rank = vec![(0usize, 0i64); heads.len()];
    for members in by_group.values_mut() {
        members.sort_by(|&a, &b| {
            (heads[a].run_at, &heads[a].id).cmp(&(heads[b].run_at, &heads[b].id))
        });
        let oldest = heads[members[0]].run_at;
        for (nth, &i) in members.iter().enumerate() {
            rank[i] = (nth, oldest);
        }
    }
    let mut order: Vec<usize> = (0..heads.len()).collect();
    order.sort_by(|&a, &b| {
        let (ha, hb) = (&heads[a], &heads[b]);
        let by_priority = hb.priority.cmp(&ha.priority);
        let fair_part = if fair {
            rank[a]
                .0
                .cmp(&rank[b].0)
                .then(rank[a].1.cmp(&rank[b].1))
                .then(ha.key.cmp(&hb.key))
        } else {
            Ordering::Equal
        };
        by_priority
            .then(fair_part)
            .then(ha.run_at.cmp(&hb.run_at))
            .then(ha.id.cmp(&hb.id))
    });
    order
        .into_iter()
        .take(room)
        .map(|i| heads[i].id.clone())
        .collect()
}

/// A claim that is not fair first looks at the queue's first ready jobs in
/// claim order (`window`): the ones of them that their keys' room allows
/// (`key_room`: `None` for no limit) are the first such jobs of the whole
/// queue. When there are at least `room` of them, those are the claim and
/// no key needs walking; otherwise `None`.
pub fn from_window<Id: Clone>(
    window: &[Head<Id>],
    key_room: impl Fn(&str) -> Option<u32>,
    room: usize,
) -> Option<Vec<Id>> {
    let mut taken: HashMap<&str, u32> = HashMap::new();
    let mut out = Vec::with_capacity(room);
    for h in window {
        if out.len() == room {
            break;
        }
        if let Some(key) = h.key.as_deref() {
            let n = taken.entry(key).or_default();
            *n += 1;
            if key_room(key).is_some_and(|max| *n > max) {
                continue;
            }
        }
        out.push(h.id.clone());
    }
    (out.len() == room).then_some(out)
}

/// A fair claim without a per-key limit, from the same window: when at
/// least `room` groups appear in it, the first job of each of the first
/// `room` to appear — the groups with the oldest heads, one job each, as
/// the walk over the keys takes them when there are that many groups;
/// otherwise `None`.
pub fn fair_from_window<Id: Clone>(window: &[Head<Id>], room: usize) -> Option<Vec<Id>> {
    let mut seen = std::collections::HashSet::new();
    let firsts: Vec<Id> = window
        .iter()
        .filter(|h| seen.insert(h.key.as_deref()))
        .take(room)
        .map(|h| h.id.clone())
        .collect();
    (firsts.len() == room).then_some(firsts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(id: u32, key: Option<&str>, priority: i16, run_at: i64) -> Head<u32> {
        Head {
            id,
            key: key.map(str::to_owned),
            priority,
            run_at,
        }
    }

    #[test]
    fn fair_order_interleaves_groups_and_keeps_priority_first() {
        let heads = vec![
            head(1, Some("a"), 0, 1),
            head(2, Some("a"), 0, 2),
            head(3, Some("a"), 0, 3),
            head(4, Some("b"), 0, 5),
            head(5, Some("b"), 0, 6),
            head(6, None, 0, 4),
            head(7, Some("b"), 5, 9),
        ];
        assert_eq!(
            claim_order(heads.clone(), true, 10),
            vec![7, 1, 6, 4, 2, 5, 3]
        );
        assert_eq!(
            claim_order(heads.clone(), false, 10),
            vec![7, 1, 2, 3, 6, 4, 5]
        );
        assert_eq!(claim_order(heads, true, 3), vec![7, 1, 6]);
    }

    #[test]
    fn the_window_holds_a_claim_only_with_enough_allowed_jobs() {
        let window = vec![
            head(1, Some("a"), 0, 1),
            head(2, Some("a"), 0, 2),
            head(3, None, 0, 3),
            head(4, Some("b"), 0, 4),
        ];
        let one_each = |_: &str| Some(1);
        assert_eq!(from_window(&window, one_each, 3), Some(vec![1, 3, 4]));
        assert_eq!(from_window(&window, one_each, 4), None);
        assert_eq!(from_window(&window, |_| None, 2), Some(vec![1, 2]));
        assert_eq!(from_window(&window, |_| Some(0), 1), Some(vec![3]));
    }

    #[test]
    fn a_fair_window_takes_one_job_of_each_of_the_first_groups() {
        let window = vec![
            head(1, Some("a"), 5, 1),
            head(2, Some("a"), 0, 2),
            head(3, None, 0, 3),
            head(4, Some("b"), 0, 4),
            head(5, None, 0, 5),
        ];
        assert_eq!(fair_from_window(&window, 3), Some(vec![1, 3, 4]));
        assert_eq!(fair_from_window(&window, 4), None);
    }

    #[test]
    fn group_cap_is_the_smaller_of_key_room_and_fair_share() {
        assert_eq!(group_cap(100, false, 3, None), 100);
        assert_eq!(group_cap(100, true, 3, None), 34);
        assert_eq!(group_cap(100, true, 3, Some(2)), 2);
        assert_eq!(group_cap(10, false, 0, Some(0)), 0);
        assert_eq!(group_cap(10, true, 0, None), 10);
    }
}
