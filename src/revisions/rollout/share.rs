//! Which objects are the candidate's share in a canary rollout: a stable hash (xxh3, the same
//! across replicas, restarts and khai versions) of the object's uid, so an object stays with
//! one revision for the whole canary, whoever leads.

use xxhash_rust::xxh3::xxh3_64;

/// Whether the object with `uid` is among the `percent` of objects the candidate reconciles.
pub(crate) fn in_share(uid: &str, percent: u8) -> bool {
    xxh3_64(uid.as_bytes()) % 100 < u64::from(percent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uids(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("4f8e2c1a-0000-4000-8000-{i:012x}"))
            .collect()
    }

    #[test]
    fn ten_percent_of_5000_uids_is_about_500_and_the_same_every_time() {
        let all = uids(5000);
        let share: Vec<&String> = all.iter().filter(|u| in_share(u, 10)).collect();
        assert!((400..=600).contains(&share.len()), "{}", share.len());
        let again: Vec<&String> = all.iter().filter(|u| in_share(u, 10)).collect();
        assert_eq!(share, again);
    }

    #[test]
    fn a_larger_share_keeps_the_objects_of_a_smaller_one() {
        for u in uids(1000) {
            if in_share(&u, 10) {
                assert!(in_share(&u, 20), "{u}");
            }
            assert!(!in_share(&u, 0));
            assert!(in_share(&u, 100));
        }
    }
}
