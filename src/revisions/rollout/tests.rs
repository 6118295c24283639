//! The rollout over an in-memory API, under tokio's paused clock: its state kept and resumed,
//! the router's share and phases, a rollback at once on failures, a promotion when the window
//! ends, each moving every object.

use super::*;
use crate::fake_api::FakeApi;
use futures::StreamExt;
use serde_json::json;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/khai-op-rollout";
const WINDOW: Duration = Duration::from_secs(60);

fn rollout(api: &FakeApi, candidate: u64) -> Arc<Rollout> {
    let settings = Settings {
        percent: 10,
        promote_after: WINDOW,
        max_error_ratio: 1.5,
        namespace: "ns".into(),
        regarding: None,
    };
    Rollout::new(settings, 1, candidate, &api.client(), "op")
}

fn kept(api: &FakeApi, key: &str) -> String {
    let lease = api.get(LEASE).expect("the rollout's Lease");
    lease["metadata"]["annotations"][format!("khai.dev/rollout-{key}")]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(start_paused = true)]
async fn the_same_candidate_resumes_the_kept_rollout_and_another_starts_anew() {
    let api = FakeApi::default();
    let first = rollout(&api, 2);
    first.resume().await;
    assert_eq!(kept(&api, "phase"), "canary");
    assert_eq!(kept(&api, "share"), "10");
    assert_eq!(kept(&api, "candidate"), format!("{:016x}", 2));
    // Started long ago, promoted since: a restart resumes exactly that.
    let mut lease = api.get(LEASE).unwrap();
    lease["metadata"]["annotations"]["khai.dev/rollout-started"] = json!("1000");
    lease["metadata"]["annotations"]["khai.dev/rollout-phase"] = json!("promoted");
    api.put(LEASE, lease);
    let again = rollout(&api, 2);
    let resumed = again.resume().await;
    assert_eq!((resumed.started, resumed.decided), (1000, true));
    assert_eq!(again.phase(), Phase::Promoted);
    assert!(again.owns("any-uid"));
    let other = rollout(&api, 3);
    assert_ne!(
        other.resume().await.started,
        1000,
        "a new candidate, a new rollout"
    );
    assert_eq!(other.phase(), Phase::Canary);
    assert_eq!(kept(&api, "phase"), "canary");
}

#[tokio::test(start_paused = true)]
async fn in_the_canary_the_candidate_owns_its_hash_share_and_nothing_after_a_rollback() {
    let api = FakeApi::default();
    let r = rollout(&api, 2);
    r.resume().await;
    let uids: Vec<String> = (0..1000).map(|i| format!("uid-{i}")).collect();
    let owned: Vec<&String> = uids.iter().filter(|u| r.owns(u)).collect();
    assert!((60..=140).contains(&owned.len()), "{}", owned.len());
    assert!(owned.iter().all(|u| share::in_share(u, 10)));
    assert!(
        !r.owns(""),
        "an object without a uid stays with the active revision"
    );
    r.switch(Phase::RolledBack);
    assert!(uids.iter().all(|u| !r.owns(u)));
}

/// A new rollout, started, and the stream of its moves.
async fn started() -> (FakeApi, Arc<Rollout>, Resumed, BoxStream<'static, ()>) {
    let api = FakeApi::default();
    let r = rollout(&api, 2);
    let started = r.resume().await;
    let moves = r.moves();
    (api, r, started, moves)
}

#[tokio::test(start_paused = true)]
async fn a_failing_candidate_is_rolled_back_at_once_moving_every_object() {
    let (api, r, started, mut moves) = started().await;
    for i in 0..decide::MIN_SAMPLE {
        r.outcome(false, false);
        r.outcome(true, i % 10 < 3);
    }
    assert_eq!(r.phase(), Phase::RolledBack, "before the window ends");
    assert_eq!(moves.next().await, Some(()));
    r.run(started).await;
    assert_eq!(kept(&api, "phase"), "rolled-back");
}

#[tokio::test(start_paused = true)]
async fn a_healthy_candidate_is_promoted_when_the_window_ends() {
    let (api, r, started, mut moves) = started().await;
    for _ in 0..decide::MIN_SAMPLE {
        r.outcome(true, false);
    }
    let at = tokio::time::Instant::now();
    r.run(started).await;
    assert!(at.elapsed() >= WINDOW, "{:?}", at.elapsed());
    assert!(at.elapsed() <= WINDOW + TICK, "{:?}", at.elapsed());
    assert_eq!(r.phase(), Phase::Promoted);
    assert_eq!(moves.next().await, Some(()));
    assert_eq!(kept(&api, "phase"), "promoted");
}
