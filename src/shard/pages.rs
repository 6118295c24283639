//! A label- and field-selected list of metadata read one page at a time, so the sharder never
//! holds more than one page whatever the number of objects.

use crate::watch::Filter;
use kube::api::{DynamicObject, ListParams};
use kube::core::PartialObjectMeta;

pub(super) type Meta = PartialObjectMeta<DynamicObject>;

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

    /// The next page, `None` past the last.
    pub(super) async fn next(&mut self) -> Result<Option<Vec<Meta>>, kube::Error> {
        if self.done {
            return Ok(None);
        }
        let params = match &self.token {
            Some(t) => self.params.clone().continue_token(t),
            None => self.params.clone(),
        };
        let page = self.api.list_metadata(&params).await?;
        self.token = page.metadata.continue_.filter(|t| !t.is_empty());
        self.done = self.token.is_none();
        Ok(Some(page.items))
    }
}
