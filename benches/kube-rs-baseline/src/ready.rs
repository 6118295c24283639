//! Waiting for a reflector store to be listed from many reconciles at once.
//!
//! kube-runtime's `Store::wait_until_ready` polls one shared oneshot receiver, which keeps the
//! waker of only the task that polled it last: when several tasks wait at once, the list's end
//! wakes one of them and the others wait forever. On a restart over existing Caches the
//! Controller starts every reconcile as soon as the Cache list is in, usually before the
//! ConfigMap list, so each reconcile would wait on the ConfigMap store together; all but one
//! would hang, keep their objects' slots in the Controller (no later reconcile of them runs),
//! and hold up its graceful shutdown on SIGTERM. One task waits on the store; the rest wait on
//! a `OnceCell`, which wakes every waiter.

use kube::runtime::reflector::{Lookup, Store, store::WriterDropped};
use tokio::sync::OnceCell;

/// A store whose readiness any number of tasks can await at once.
pub struct ReadyStore<K: Lookup + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    listed: OnceCell<()>,
}

impl<K: Lookup + Clone + 'static> ReadyStore<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub fn new(store: Store<K>) -> Self {
        Self {
            store,
            listed: OnceCell::new(),
        }
    }

    /// The store, once its first list is complete.
    pub async fn ready(&self) -> Result<&Store<K>, WriterDropped> {
        self.listed
            .get_or_try_init(|| self.store.wait_until_ready())
            .await?;
        Ok(&self.store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::{reflector, watcher};
    use std::{sync::Arc, time::Duration};

    /// Every one of many concurrent waiters is woken when the list completes. On the
    /// single-threaded test runtime a yield lets each spawned waiter run up to its wait first.
    #[tokio::test]
    async fn every_concurrent_waiter_wakes_when_the_list_is_in() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let ready = Arc::new(ReadyStore::new(store));
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let ready = Arc::clone(&ready);
                tokio::spawn(async move { ready.ready().await.map(|_| ()) })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "the store is not listed yet"
        );
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for waiter in waiters {
            let done = tokio::time::timeout(Duration::from_secs(5), waiter).await;
            assert!(
                matches!(done, Ok(Ok(Ok(())))),
                "a waiter did not wake: {done:?}"
            );
        }
    }
}
