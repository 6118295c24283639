//! A label- and field-selected list of metadata read one page at a time, so the sharder never
//! holds more than one page whatever the number of objects, and what a pass wrote.

use crate::watch::Filter;
use kube::api::{DynamicObject, ListParams};
use kube::core::PartialObjectMeta;

pub(super) type Meta = PartialObjectMeta<DynamicObject>;

/// The value of label `key` of `o`.
pub(super) fn label<'m>(o: &'m Meta, key: &str) -> Option<&'m str> {
    o.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// Objects per page of the sharder's lists.
pub(super) const PAGE: u32 = 500;

/// A selected list of metadata, one page at a time. The pages are read from the API
/// server as they are asked for, so only the page in hand is in memory.
pub(super) struct Pages {
    api: kube::Api<DynamicObject>,
    params: ListParams,
    token: Option<String>,
    done: bool,
}

impl Pages {
    /// The objects `api` lists through `filter`.
    pub(super) fn new(api: kube::Api<DynamicObject>, filter: &Filter, limit: u32) -> Self {
        let mut params = ListParams::default().limit(limit);
        if let Some(l) = &filter.labels {
            params = params.labels(l);
        }
        if let Some(f) = &filter.fields {
            params = params.fields(f);
        }
        Self {
            api,
            params,
            token: None,
            done: false,
        }
    }

    /// The objects `api` lists through the label selector `selector`.
    pub(super) fn labelled(api: kube::Api<DynamicObject>, selector: &str, limit: u32) -> Self {
        let filter = Filter {
            labels: Some(selector.to_string()),
            fields: None,
        };
        Self::new(api, &filter, limit)
    }

    /// The next page, `None` past the last.
    pub(super) async fn next(&mut self) -> Result<Option<Vec<Meta>>, kube::Error> {
        if self.done {
            return Ok(None);
        }
        let params = match &self.token {
            Some(t) => self.params.clone().continue_token(t),
            None => self.params.clone(),
        };
        let page = match self.api.list_metadata(&params).await {
            // The continue token outlived etcd's compaction (about 5 min): a pass that long
            // starts over. What it already wrote is decided the same way again, or is no longer
            // selected, so starting over converges.
            Err(kube::Error::Api(e)) if e.code == 410 && self.token.is_some() => {
                tracing::debug!("a sharder pass outlived its list's continue token; starting over");
                self.api.list_metadata(&self.params).await?
            }
            answer => answer?,
        };
        self.token = page.metadata.continue_.filter(|t| !t.is_empty());
        self.done = self.token.is_none();
        Ok(Some(page.items))
    }
}

/// What a pass wrote: objects relabelled, and objects left because they changed or went
/// since they were read (the next pass decides again).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tally {
    pub written: usize,
    pub stale: usize,
}

impl Tally {
    pub(super) fn add(&mut self, other: Tally) {
        self.written += other.written;
        self.stale += other.stale;
    }
}

impl From<(usize, usize)> for Tally {
    fn from((written, stale): (usize, usize)) -> Self {
        Self { written, stale }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::fake::{Fake, PARTS, part};
    use serde_json::json;

    fn names(page: &[Meta]) -> Vec<String> {
        page.iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect()
    }

    #[tokio::test]
    async fn a_pass_whose_continue_token_expired_starts_over_rather_than_failing() {
        let fake = Fake::default();
        for n in ["a", "b", "c"] {
            fake.add(PARTS, n, json!({}), json!({}));
        }
        let api = crate::watch::api(&fake.client(), &part(), Some("ns"));
        let mut pages = Pages::labelled(api, "", 1);
        let mut read = Vec::new();
        read.extend(names(&pages.next().await.unwrap().unwrap()));
        fake.expire_next_continue();
        while let Some(page) = pages.next().await.unwrap() {
            read.extend(names(&page));
        }
        assert_eq!(read, ["a", "a", "b", "c"]);
        let lists: Vec<String> = fake
            .log()
            .into_iter()
            .filter(|l| l.starts_with("LIST"))
            .collect();
        assert_eq!(lists.len(), 5, "{lists:?}");
        assert!(
            lists[2].ends_with("  "),
            "started over without a token: {lists:?}"
        );
    }
}
